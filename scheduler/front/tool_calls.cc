#include "scheduler/front/tool_calls.h"

#include <cctype>

namespace astr::front {

namespace {

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kMistralMarker = "[TOOL_CALLS]";
constexpr std::string_view kPythonTag = "<|python_tag|>";

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

// Length of the longest suffix of `s` that is a proper prefix of `marker`.
size_t PartialMarker(std::string_view s, std::string_view marker) {
  for (size_t n = std::min(s.size(), marker.size() - 1); n > 0; --n) {
    if (s.substr(s.size() - n) == marker.substr(0, n)) return n;
  }
  return 0;
}

enum State {
  kStart,         // nothing consumed yet (llama3_json, forced, named look at the first chars)
  kOutside,       // content; looking for the opening marker (hermes, mistral)
  kContentOnly,   // the rest is content
  kBeforeArray,   // mistral / forced: expecting '['
  kInArray,       // between calls of an array: ',' / whitespace / '{' / ']'
  kBeforeObject,  // hermes / llama3: expecting '{' of a call
  kInCall,        // inside a call object (Scanner)
  kAfterCall,     // hermes: expecting </tool_call>; llama3: ';' or the end
  kNamedArgs,     // named: every char is arguments
};

}  // namespace

std::optional<ToolCallFormat> ParseToolCallFormat(std::string_view name) {
  if (name == "hermes") return ToolCallFormat::kHermes;
  if (name == "llama3_json") return ToolCallFormat::kLlama3Json;
  if (name == "mistral") return ToolCallFormat::kMistral;
  if (name == "none") return ToolCallFormat::kNone;
  return std::nullopt;
}

ToolCallFormat DetectToolCallFormat(std::string_view src) {
  if (src.find("<tool_call>") != std::string_view::npos) return ToolCallFormat::kHermes;
  if (src.find("[TOOL_CALLS]") != std::string_view::npos) return ToolCallFormat::kMistral;
  if (src.find("<|python_tag|>") != std::string_view::npos ||
      (src.find("<|start_header_id|>") != std::string_view::npos &&
       src.find("tools") != std::string_view::npos)) {
    return ToolCallFormat::kLlama3Json;
  }
  return ToolCallFormat::kNone;
}

// One call object, char by char: its name and the text of its arguments value.
struct ToolCallStream::Scanner {
  int depth = 0;
  bool in_string = false, escape = false;
  bool expect_key = false;
  std::string str;  // the depth-1 string being read (a key or the name's value)
  std::string key;  // the depth-1 key whose value is being read
  bool in_value = false;
  bool value_is_args = false;
  std::string name;
  bool has_name = false;
  bool started = false;  // kStart emitted
  std::string args;      // the arguments text so far
  size_t args_sent = 0;  // of args, already emitted
  bool args_done = false;
  bool done = false;  // the object closed

  // Feeds one char of the object.
  void Feed(char c) {
    if (value_is_args && in_value && !(args.empty() && IsSpace(c))) args += c;
    if (in_string) {
      if (escape) {
        escape = false;
      } else if (c == '\\') {
        escape = true;
      } else if (c == '"') {
        in_string = false;
        if (depth == 1 && expect_key) {
          key = str;
          expect_key = false;
        } else if (depth == 1 && in_value && key == "name" && !has_name) {
          name = str;  // raw (escapes kept); names are identifiers
          has_name = true;
        }
        if (depth == 1 && in_value && !expect_key && value_is_args) {
          args_done = true;  // a string value ends here
          in_value = false;
          value_is_args = false;
        }
        return;
      }
      if (depth == 1) str += c;
      return;
    }
    if (c == '"') {
      in_string = true;
      if (depth == 1) str.clear();
      return;
    }
    if (c == '{' || c == '[') {
      ++depth;
      if (depth == 1) expect_key = true;
      return;
    }
    if (c == '}' || c == ']') {
      --depth;
      if (depth == 1 && value_is_args && in_value) {  // an object / array value closed
        args_done = true;
        in_value = false;
        value_is_args = false;
      } else if (depth == 0) {
        if (value_is_args && in_value) {  // a bare value ended by the object's end
          args.pop_back();
          args_done = true;
        }
        in_value = false;
        done = true;
      }
      return;
    }
    if (depth != 1) return;
    if (c == ':') {
      in_value = true;
      value_is_args = key == "arguments" || key == "parameters";
      return;
    }
    if (c == ',') {
      if (value_is_args && in_value) {  // a bare value (number, true, null) ended
        args.pop_back();
        args_done = true;
      }
      in_value = false;
      value_is_args = false;
      expect_key = true;
    }
  }
};

ToolCallStream::ToolCallStream(ToolCallFormat format, std::string named)
    : format_(format), named_(std::move(named)) {
  state_ = format == ToolCallFormat::kHermes || format == ToolCallFormat::kMistral ? kOutside
           : format == ToolCallFormat::kNone                                       ? kContentOnly
                                                                                   : kStart;
}

ToolCallStream::~ToolCallStream() = default;

void ToolCallStream::Emit(ToolCallDelta d, std::vector<ToolCallDelta>* out) {
  if (d.kind == ToolCallDelta::Kind::kContent) {
    if (d.text.empty()) return;
    content_ += d.text;
    if (!out->empty() && out->back().kind == ToolCallDelta::Kind::kContent) {
      out->back().text += d.text;
      return;
    }
  } else if (d.kind == ToolCallDelta::Kind::kStart) {
    calls_.push_back({d.text, ""});
  } else {
    if (d.text.empty()) return;
    calls_.back().arguments += d.text;
    if (!out->empty() && out->back().kind == ToolCallDelta::Kind::kArguments &&
        out->back().index == d.index) {
      out->back().text += d.text;
      return;
    }
  }
  out->push_back(std::move(d));
}

void ToolCallStream::Push(std::string_view text, std::vector<ToolCallDelta>* out) {
  buf_.append(text);
  Run(false, out);
}

void ToolCallStream::Finish(std::vector<ToolCallDelta>* out) {
  Run(true, out);
  // A call cut short: what it streamed stays; one whose name never came (or a marker with no
  // call after it) is content.
  if (scan_ != nullptr && scan_->started) {
    if (scan_->args.empty()) {
      Emit({.kind = ToolCallDelta::Kind::kArguments,
            .index = static_cast<int32_t>(calls_.size()) - 1,
            .text = "{}"},
           out);
    }
  } else {
    Emit({.kind = ToolCallDelta::Kind::kContent, .text = pending_}, out);
  }
  scan_.reset();
  pending_.clear();
  Emit({.kind = ToolCallDelta::Kind::kContent, .text = buf_}, out);
  buf_.clear();
}

void ToolCallStream::Run(bool at_end, std::vector<ToolCallDelta>* out) {
  using K = ToolCallDelta::Kind;
  size_t i = 0;
  auto content = [&](std::string_view s) {
    Emit({.kind = K::kContent, .text = std::string(s)}, out);
  };
  auto start_call = [&] {
    scan_ = std::make_unique<Scanner>();
    pending_.clear();
    state_ = kInCall;
  };
  while (i < buf_.size()) {
    const char c = buf_[i];
    switch (state_) {
      case kContentOnly:
        content(std::string_view(buf_).substr(i));
        i = buf_.size();
        break;
      case kStart: {
        if (format_ == ToolCallFormat::kNamed) {
          Emit({.kind = K::kStart, .index = 0, .text = named_}, out);
          state_ = kNamedArgs;
          break;
        }
        if (IsSpace(c)) {  // leading whitespace: held until the first other char decides
          pending_ += c;
          ++i;
          break;
        }
        const std::string_view rest = std::string_view(buf_).substr(i);
        if (format_ == ToolCallFormat::kLlama3Json && rest.substr(0, 1) == "<") {
          if (rest.size() < kPythonTag.size() && kPythonTag.substr(0, rest.size()) == rest &&
              !at_end) {
            buf_.erase(0, i);
            return;  // may be the tag
          }
          if (rest.substr(0, kPythonTag.size()) == kPythonTag) {
            i += kPythonTag.size();
            pending_.clear();
            state_ = kBeforeObject;
            break;
          }
        }
        if (format_ == ToolCallFormat::kForced) {
          pending_.clear();
          state_ = kBeforeArray;
          break;
        }
        if (c == '{') {
          pending_.clear();
          state_ = kBeforeObject;
          break;
        }
        content(pending_);
        pending_.clear();
        state_ = kContentOnly;
        break;
      }
      case kOutside: {
        const std::string_view marker =
            format_ == ToolCallFormat::kHermes ? kHermesOpen : kMistralMarker;
        const std::string_view rest = std::string_view(buf_).substr(i);
        const size_t at = rest.find(marker);
        if (at != std::string_view::npos) {
          content(rest.substr(0, at));
          i += at + marker.size();
          if (format_ == ToolCallFormat::kHermes) {
            state_ = kBeforeObject;
          } else {
            state_ = kBeforeArray;
          }
          pending_ = std::string(marker);
          break;
        }
        const size_t hold = at_end ? 0 : PartialMarker(rest, marker);
        content(rest.substr(0, rest.size() - hold));
        buf_.erase(0, buf_.size() - hold);
        return;
      }
      case kBeforeArray:
        pending_ += c;
        ++i;
        if (IsSpace(c)) break;
        if (c == '[') {
          pending_.clear();
          state_ = kInArray;
        } else {  // not a call list after all
          content(pending_);
          pending_.clear();
          state_ = kContentOnly;
        }
        break;
      case kInArray:
        if (IsSpace(c) || c == ',') {
          ++i;
          break;
        }
        if (c == ']') {
          ++i;
          state_ = kContentOnly;
          break;
        }
        if (c == '{') {
          start_call();
          break;
        }
        state_ = kContentOnly;  // malformed: the rest is content
        break;
      case kBeforeObject:
        if (IsSpace(c)) {
          pending_ += c;
          ++i;
          break;
        }
        if (c == '{') {
          const std::string before = pending_;
          start_call();
          pending_ = before;
          break;
        }
        content(pending_);
        pending_.clear();
        state_ = kContentOnly;
        break;
      case kInCall: {
        Scanner& s = *scan_;
        pending_ += c;
        s.Feed(c);
        ++i;
        if (s.has_name && !s.started) {
          s.started = true;
          Emit({.kind = K::kStart, .index = static_cast<int32_t>(calls_.size()), .text = s.name},
               out);
        }
        if (s.started && s.args.size() > s.args_sent) {
          Emit({.kind = K::kArguments,
                .index = static_cast<int32_t>(calls_.size()) - 1,
                .text = s.args.substr(s.args_sent)},
               out);
          s.args_sent = s.args.size();
        }
        if (s.done) {
          if (!s.started) {  // no name: it was text
            content(pending_);
          } else if (s.args.empty()) {
            Emit({.kind = K::kArguments,
                  .index = static_cast<int32_t>(calls_.size()) - 1,
                  .text = "{}"},
                 out);
          }
          scan_.reset();
          pending_.clear();
          state_ = format_ == ToolCallFormat::kMistral || format_ == ToolCallFormat::kForced
                       ? kInArray
                       : kAfterCall;
        }
        break;
      }
      case kAfterCall: {
        if (IsSpace(c)) {
          ++i;
          break;
        }
        const std::string_view rest = std::string_view(buf_).substr(i);
        if (format_ == ToolCallFormat::kHermes) {
          if (!at_end && rest.size() < kHermesClose.size() &&
              kHermesClose.substr(0, rest.size()) == rest) {
            buf_.erase(0, i);
            return;
          }
          if (rest.substr(0, kHermesClose.size()) == kHermesClose) i += kHermesClose.size();
          state_ = kOutside;
          break;
        }
        if (c == ';') {  // llama3_json: another call
          ++i;
          state_ = kBeforeObject;
          break;
        }
        state_ = kContentOnly;
        break;
      }
      case kNamedArgs:
        Emit({.kind = K::kArguments,
              .index = 0,
              .text = std::string(std::string_view(buf_).substr(i))},
             out);
        i = buf_.size();
        break;
    }
  }
  buf_.erase(0, i);
}

ParsedToolCalls ParseToolCalls(ToolCallFormat format, std::string_view text,
                               const std::string& named) {
  ToolCallStream s(format, named);
  std::vector<ToolCallDelta> ignored;
  s.Push(text, &ignored);
  s.Finish(&ignored);
  return {s.content(), s.calls()};
}

}  // namespace astr::front
