#include "common/text/tokenizer/decoder.h"

#include "common/model/vocab.h"
#include "common/text/tokenizer/byte_level.h"
#include "common/text/tokenizer/json_util.h"
#include "common/text/unicode/unicode.h"

namespace astr::tok {
namespace {

constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> parts)
      : parts_(std::move(parts)) {}
  void DecodeChain(std::vector<std::string>& tokens) const override {
    for (const auto& p : parts_) p->DecodeChain(tokens);
  }
  bool JoinsByteTokens() const override {
    for (const auto& p : parts_) {
      if (p->JoinsByteTokens()) return true;
    }
    return false;
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

// Maps every token's characters back to bytes (a token with a character outside the byte alphabet
// stays as it is) and decodes the whole byte string as lossy UTF-8.
class ByteLevelDecoder final : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    std::string token_bytes;
    for (const std::string& t : tokens) {
      token_bytes.clear();
      bool mapped = true;
      for (size_t i = 0; i < t.size() && mapped;) {
        const int b = ByteLevelByte(unicode::NextCodepoint(t, i));
        if (b < 0) {
          mapped = false;
        } else {
          token_bytes.push_back(static_cast<char>(b));
        }
      }
      bytes += mapped ? token_bytes : t;
    }
    tokens.assign(1, unicode::Utf8Lossy(bytes));
  }
};

class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool drop_first)
      : replacement_(std::move(replacement)), drop_first_(drop_first) {}
  // In the first token every replacement character is dropped when a prefix was prepended
  // (tokenizers' Metaspace::decode_chain); elsewhere it becomes a space.
  void DecodeChain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string out;
      const std::string& t = tokens[i];
      for (size_t pos = 0; pos < t.size();) {
        if (!replacement_.empty() && t.compare(pos, replacement_.size(), replacement_) == 0) {
          if (!(i == 0 && drop_first_)) out += ' ';
          pos += replacement_.size();
        } else {
          out += t[pos++];
        }
      }
      tokens[i] = std::move(out);
    }
  }

 private:
  std::string replacement_;
  bool drop_first_;
};

class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(Pattern pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void DecodeChain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) t = ReplaceAll(pattern_, t, content_);
  }

 private:
  Pattern pattern_;
  std::string content_;
};

// Runs of <0xXX> tokens become their bytes when those form valid UTF-8, else one U+FFFD per byte.
class ByteFallbackDecoder final : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string run;
    size_t run_tokens = 0;
    auto flush = [&] {
      if (run_tokens == 0) return;
      if (unicode::IsValidUtf8(run)) {
        out.push_back(run);
      } else {
        for (size_t i = 0; i < run_tokens; ++i) out.emplace_back(kReplacementChar);
      }
      run.clear();
      run_tokens = 0;
    };
    for (std::string& t : tokens) {
      const int b = model::ParseByteToken(t);
      if (b >= 0) {
        run.push_back(static_cast<char>(b));
        ++run_tokens;
        continue;
      }
      flush();
      out.push_back(std::move(t));
    }
    flush();
    tokens = std::move(out);
  }
  bool JoinsByteTokens() const override { return true; }
};

class FuseDecoder final : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const std::string& t : tokens) all += t;
    tokens.clear();
    tokens.push_back(std::move(all));
  }
};

// Removes up to `start` leading and `stop` trailing `content` characters from every token.
class StripDecoder final : public Decoder {
 public:
  StripDecoder(std::string content, size_t start, size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void DecodeChain(std::vector<std::string>& tokens) const override {
    if (content_.empty()) return;
    const size_t n = content_.size();
    for (std::string& t : tokens) {
      size_t begin = 0;
      for (size_t k = 0; k < start_ && t.compare(begin, n, content_) == 0; ++k) begin += n;
      size_t end = t.size();
      for (size_t k = 0; k < stop_ && end >= begin + n && t.compare(end - n, n, content_) == 0;
           ++k) {
        end -= n;
      }
      t = t.substr(begin, end - begin);
    }
  }

 private:
  std::string content_;
  size_t start_;
  size_t stop_;
};

// tokenizers' BPEDecoder: the end-of-word suffix becomes a space, except on the last token.
class BpeSuffixDecoder final : public Decoder {
 public:
  explicit BpeSuffixDecoder(std::string suffix) : suffix_(std::move(suffix)) {}
  void DecodeChain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      const std::string replacement = i + 1 == tokens.size() ? "" : " ";
      std::string& t = tokens[i];
      std::string out;
      for (size_t pos = 0; pos < t.size();) {
        if (!suffix_.empty() && t.compare(pos, suffix_.size(), suffix_) == 0) {
          out += replacement;
          pos += suffix_.size();
        } else {
          out += t[pos++];
        }
      }
      t = std::move(out);
    }
  }

 private:
  std::string suffix_;
};

StatusOr<std::unique_ptr<Decoder>> StripFromJson(const nlohmann::json& j) {
  ASTR_ASSIGN_OR_RETURN(std::string content, JsonString(j, "content", "Strip decoder"));
  const auto start = j.find("start");
  const auto stop = j.find("stop");
  if (start == j.end() || !start->is_number_unsigned() || stop == j.end() ||
      !stop->is_number_unsigned()) {
    return InvalidArgumentError("Strip decoder: fields \"start\" and \"stop\" must be counts");
  }
  return std::unique_ptr<Decoder>(
      new StripDecoder(content, start->get<size_t>(), stop->get<size_t>()));
}

StatusOr<std::unique_ptr<Decoder>> MetaspaceDecoderFromJson(const nlohmann::json& j) {
  std::string replacement = "\xE2\x96\x81";
  if (j.contains("replacement")) {
    ASTR_ASSIGN_OR_RETURN(replacement, JsonString(j, "replacement", "Metaspace decoder"));
  }
  bool drop_first = true;
  if (const auto it = j.find("prepend_scheme"); it != j.end() && it->is_string()) {
    drop_first = it->get<std::string>() != "never";
  } else {
    ASTR_ASSIGN_OR_RETURN(drop_first, JsonBool(j, "add_prefix_space", true, "Metaspace decoder"));
  }
  return std::unique_ptr<Decoder>(new MetaspaceDecoder(replacement, drop_first));
}

}  // namespace

std::unique_ptr<Decoder> MakeByteLevelDecoder() {
  return std::unique_ptr<Decoder>(new ByteLevelDecoder());
}

std::unique_ptr<Decoder> MakeSentencePieceDecoder(bool strip_leading_space) {
  std::vector<std::unique_ptr<Decoder>> parts;
  parts.emplace_back(new ReplaceDecoder(Pattern::Literal("\xE2\x96\x81"), " "));
  parts.emplace_back(new ByteFallbackDecoder());
  parts.emplace_back(new FuseDecoder());
  if (strip_leading_space) parts.emplace_back(new StripDecoder(" ", 1, 0));
  return std::unique_ptr<Decoder>(new SequenceDecoder(std::move(parts)));
}

StatusOr<std::unique_ptr<Decoder>> DecoderFromJson(const nlohmann::json& j) {
  if (j.is_null()) return std::unique_ptr<Decoder>();
  ASTR_ASSIGN_OR_RETURN(std::string type, JsonType(j, "decoder"));
  if (type == "Sequence") {
    ASTR_ASSIGN_OR_RETURN(const nlohmann::json* list, JsonArray(j, "decoders", "Sequence decoder"));
    std::vector<std::unique_ptr<Decoder>> parts;
    for (const auto& item : *list) {
      ASTR_ASSIGN_OR_RETURN(auto part, DecoderFromJson(item));
      if (part != nullptr) parts.push_back(std::move(part));
    }
    return std::unique_ptr<Decoder>(new SequenceDecoder(std::move(parts)));
  }
  if (type == "ByteLevel") return MakeByteLevelDecoder();
  if (type == "Metaspace") return MetaspaceDecoderFromJson(j);
  if (type == "Replace") {
    ASTR_ASSIGN_OR_RETURN(Pattern pattern, PatternFromJson(j, "Replace decoder"));
    ASTR_ASSIGN_OR_RETURN(std::string content, JsonString(j, "content", "Replace decoder"));
    return std::unique_ptr<Decoder>(new ReplaceDecoder(std::move(pattern), content));
  }
  if (type == "ByteFallback") return std::unique_ptr<Decoder>(new ByteFallbackDecoder());
  if (type == "Fuse") return std::unique_ptr<Decoder>(new FuseDecoder());
  if (type == "Strip") return StripFromJson(j);
  if (type == "BPEDecoder") {
    std::string suffix = "</w>";
    if (j.contains("suffix")) {
      ASTR_ASSIGN_OR_RETURN(suffix, JsonString(j, "suffix", "BPEDecoder"));
    }
    return std::unique_ptr<Decoder>(new BpeSuffixDecoder(suffix));
  }
  return UnimplementedError("decoder type \"" + type + "\" is not supported");
}

}  // namespace astr::tok
