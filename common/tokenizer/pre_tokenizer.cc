#include "common/tokenizer/pre_tokenizer.h"

#include <functional>

#include "common/byte_level.h"
#include "common/tokenizer/json_util.h"
#include "common/unicode.h"

namespace astr::tok {

const char kGpt2SplitRegex[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {

constexpr std::string_view kMetaspace = "\xE2\x96\x81";  // U+2581

// Replaces each piece by the spans `split` cuts it into; only the span at offset 0 of a piece that
// was at the start stays at the start.
template <typename SplitFn>
void SplitEach(std::vector<PreToken>& pieces, SplitFn&& split) {
  std::vector<PreToken> out;
  out.reserve(pieces.size() * 2);
  std::vector<Span> spans;
  for (PreToken& piece : pieces) {
    spans.clear();
    split(piece.text, spans);
    for (const Span& s : spans) {
      if (s.end == s.begin) continue;
      out.push_back({piece.text.substr(s.begin, s.end - s.begin), piece.at_start && s.begin == 0});
    }
  }
  pieces = std::move(out);
}

// Matches of single characters for which `pred` holds.
void CharMatches(std::string_view text, const std::function<bool(uint32_t)>& pred,
                 std::vector<Regex::Match>& out) {
  for (size_t i = 0; i < text.size();) {
    const size_t begin = i;
    if (pred(unicode::NextCodepoint(text, i))) out.push_back({begin, i});
  }
}

// Rust's char::is_numeric, which `tokenizers`' Digits pre-tokenizer uses. Rust's standard library
// follows Unicode 17.0 while our tables (and Oniguruma's) are 16.0; the only code points 17.0 added
// to the N* categories are U+11DE0..U+11DE9 and U+16FF4..U+16FF6 (checked with unicodedata2
// 17.0.0 against 16.0.0).
bool IsRustNumeric(uint32_t cp) {
  return unicode::IsNumber(cp) || (cp >= 0x11DE0 && cp <= 0x11DE9) ||
         (cp >= 0x16FF4 && cp <= 0x16FF6);
}

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts)
      : parts_(std::move(parts)) {}
  void PreTokenize(std::vector<PreToken>& pieces) const override {
    for (const auto& p : parts_) p->PreTokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(Pattern pattern, SplitBehavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  void PreTokenize(std::vector<PreToken>& pieces) const override {
    std::vector<Regex::Match> matches;
    SplitEach(pieces, [&](const std::string& text, std::vector<Span>& spans) {
      matches.clear();
      pattern_.FindAll(text, matches);
      SplitByMatches(text.size(), matches, behavior_, invert_, spans);
    });
  }

 private:
  Pattern pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

// Splits on characters for which a predicate holds (Digits, Punctuation, WhitespaceSplit).
class CharSplitPreTokenizer final : public PreTokenizer {
 public:
  CharSplitPreTokenizer(std::function<bool(uint32_t)> pred, SplitBehavior behavior)
      : pred_(std::move(pred)), behavior_(behavior) {}
  void PreTokenize(std::vector<PreToken>& pieces) const override {
    std::vector<Regex::Match> matches;
    SplitEach(pieces, [&](const std::string& text, std::vector<Span>& spans) {
      matches.clear();
      CharMatches(text, pred_, matches);
      SplitByMatches(text.size(), matches, behavior_, false, spans);
    });
  }

 private:
  std::function<bool(uint32_t)> pred_;
  SplitBehavior behavior_;
};

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::unique_ptr<PreTokenizer> split)
      : add_prefix_space_(add_prefix_space), split_(std::move(split)) {}
  void PreTokenize(std::vector<PreToken>& pieces) const override {
    if (add_prefix_space_) {
      for (PreToken& p : pieces) {
        if (p.text.empty() || p.text[0] != ' ') p.text.insert(0, 1, ' ');
      }
    }
    if (split_ != nullptr) split_->PreTokenize(pieces);
    const auto& alphabet = ByteLevelAlphabet();
    std::string mapped;
    for (PreToken& p : pieces) {
      mapped.clear();
      for (char c : p.text) mapped += alphabet[static_cast<uint8_t>(c)];
      p.text.swap(mapped);
    }
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<PreTokenizer> split_;
};

enum class PrependScheme { kAlways, kFirst, kNever };

class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)),
        marker_(Pattern::Literal(replacement_)),
        scheme_(scheme),
        split_(split) {}
  void PreTokenize(std::vector<PreToken>& pieces) const override {
    for (PreToken& p : pieces) {
      std::string replaced;
      replaced.reserve(p.text.size() + replacement_.size());
      for (char c : p.text) {
        if (c == ' ') {
          replaced += replacement_;
        } else {
          replaced += c;
        }
      }
      const bool starts = replaced.compare(0, replacement_.size(), replacement_) == 0;
      if (!starts &&
          (scheme_ == PrependScheme::kAlways || (scheme_ == PrependScheme::kFirst && p.at_start))) {
        replaced.insert(0, replacement_);
      }
      p.text = std::move(replaced);
    }
    if (!split_) return;
    std::vector<Regex::Match> matches;
    SplitEach(pieces, [&](const std::string& text, std::vector<Span>& spans) {
      matches.clear();
      marker_.FindAll(text, matches);
      SplitByMatches(text.size(), matches, SplitBehavior::kMergedWithNext, false, spans);
    });
  }

 private:
  std::string replacement_;
  Pattern marker_;  // replacement_ as a pattern, for split
  PrependScheme scheme_;
  bool split_;
};

StatusOr<std::unique_ptr<PreTokenizer>> MetaspaceFromJson(const nlohmann::json& j) {
  std::string replacement(kMetaspace);
  if (j.contains("replacement")) {
    ASTR_ASSIGN_OR_RETURN(replacement, JsonString(j, "replacement", "Metaspace pre-tokenizer"));
  }
  PrependScheme scheme = PrependScheme::kAlways;
  if (const auto it = j.find("prepend_scheme"); it != j.end() && !it->is_null()) {
    const std::string s = it->is_string() ? it->get<std::string>() : "";
    if (s == "always") {
      scheme = PrependScheme::kAlways;
    } else if (s == "first") {
      scheme = PrependScheme::kFirst;
    } else if (s == "never") {
      scheme = PrependScheme::kNever;
    } else {
      return InvalidArgumentError("Metaspace pre-tokenizer: unknown prepend_scheme " + it->dump());
    }
  } else {
    // Older files: add_prefix_space true/false.
    ASTR_ASSIGN_OR_RETURN(bool add, JsonBool(j, "add_prefix_space", true, "Metaspace"));
    scheme = add ? PrependScheme::kAlways : PrependScheme::kNever;
  }
  ASTR_ASSIGN_OR_RETURN(bool split, JsonBool(j, "split", true, "Metaspace pre-tokenizer"));
  return std::unique_ptr<PreTokenizer>(new MetaspacePreTokenizer(replacement, scheme, split));
}

StatusOr<std::unique_ptr<PreTokenizer>> SplitFromJson(const nlohmann::json& j) {
  ASTR_ASSIGN_OR_RETURN(Pattern pattern, PatternFromJson(j, "Split pre-tokenizer"));
  ASTR_ASSIGN_OR_RETURN(std::string behavior_name,
                        JsonString(j, "behavior", "Split pre-tokenizer"));
  auto behavior = ParseSplitBehavior(behavior_name);
  if (!behavior.ok())
    return InvalidArgumentError("Split pre-tokenizer: " + behavior.status().message());
  ASTR_ASSIGN_OR_RETURN(bool invert, JsonBool(j, "invert", false, "Split pre-tokenizer"));
  return MakeSplitPreTokenizer(std::move(pattern), *behavior, invert);
}

}  // namespace

std::unique_ptr<PreTokenizer> MakeSequencePreTokenizer(
    std::vector<std::unique_ptr<PreTokenizer>> parts) {
  return std::unique_ptr<PreTokenizer>(new SequencePreTokenizer(std::move(parts)));
}

std::unique_ptr<PreTokenizer> MakeSplitPreTokenizer(Pattern pattern, SplitBehavior behavior,
                                                    bool invert) {
  return std::unique_ptr<PreTokenizer>(new SplitPreTokenizer(std::move(pattern), behavior, invert));
}

std::unique_ptr<PreTokenizer> MakeDigitsPreTokenizer(bool individual_digits) {
  return std::unique_ptr<PreTokenizer>(new CharSplitPreTokenizer(
      IsRustNumeric, individual_digits ? SplitBehavior::kIsolated : SplitBehavior::kContiguous));
}

StatusOr<std::unique_ptr<PreTokenizer>> MakeByteLevelPreTokenizer(bool add_prefix_space,
                                                                  bool use_regex) {
  std::unique_ptr<PreTokenizer> split;
  if (use_regex) {
    ASTR_ASSIGN_OR_RETURN(Pattern gpt2, Pattern::FromRegex(kGpt2SplitRegex));
    split = MakeSplitPreTokenizer(std::move(gpt2), SplitBehavior::kIsolated, false);
  }
  return std::unique_ptr<PreTokenizer>(
      new ByteLevelPreTokenizer(add_prefix_space, std::move(split)));
}

StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizerFromJson(const nlohmann::json& j) {
  if (j.is_null()) return std::unique_ptr<PreTokenizer>();
  ASTR_ASSIGN_OR_RETURN(std::string type, JsonType(j, "pre_tokenizer"));
  if (type == "Sequence") {
    ASTR_ASSIGN_OR_RETURN(const nlohmann::json* list,
                          JsonArray(j, "pretokenizers", "Sequence pre-tokenizer"));
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (const auto& item : *list) {
      ASTR_ASSIGN_OR_RETURN(auto part, PreTokenizerFromJson(item));
      if (part != nullptr) parts.push_back(std::move(part));
    }
    return MakeSequencePreTokenizer(std::move(parts));
  }
  if (type == "ByteLevel") {
    ASTR_ASSIGN_OR_RETURN(bool prefix, JsonBool(j, "add_prefix_space", true, "ByteLevel"));
    ASTR_ASSIGN_OR_RETURN(bool use_regex, JsonBool(j, "use_regex", true, "ByteLevel"));
    return MakeByteLevelPreTokenizer(prefix, use_regex);
  }
  if (type == "Split") return SplitFromJson(j);
  if (type == "Digits") {
    ASTR_ASSIGN_OR_RETURN(bool individual, JsonBool(j, "individual_digits", false, "Digits"));
    return MakeDigitsPreTokenizer(individual);
  }
  if (type == "Metaspace") return MetaspaceFromJson(j);
  if (type == "Whitespace") {
    // tokenizers: keep the matches of \w+|[^\w\s]+, drop the rest.
    ASTR_ASSIGN_OR_RETURN(Pattern words, Pattern::FromRegex(R"(\w+|[^\w\s]+)"));
    return MakeSplitPreTokenizer(std::move(words), SplitBehavior::kRemoved, true);
  }
  if (type == "WhitespaceSplit") {
    return std::unique_ptr<PreTokenizer>(
        new CharSplitPreTokenizer(unicode::IsWhitespace, SplitBehavior::kRemoved));
  }
  if (type == "Punctuation") {
    SplitBehavior behavior = SplitBehavior::kIsolated;
    if (j.contains("behavior")) {
      ASTR_ASSIGN_OR_RETURN(std::string name, JsonString(j, "behavior", "Punctuation"));
      ASTR_ASSIGN_OR_RETURN(behavior, ParseSplitBehavior(name));
    }
    // tokenizers' is_punc: ASCII punctuation or a Unicode P* character.
    auto is_punc = [](uint32_t cp) {
      const bool ascii = (cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) ||
                         (cp >= 91 && cp <= 96) || (cp >= 123 && cp <= 126);
      return ascii || unicode::IsPunctuation(cp);
    };
    return std::unique_ptr<PreTokenizer>(new CharSplitPreTokenizer(is_punc, behavior));
  }
  return UnimplementedError("pre_tokenizer type \"" + type + "\" is not supported");
}

}  // namespace astr::tok
