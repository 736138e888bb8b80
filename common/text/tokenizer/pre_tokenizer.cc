#include "common/text/tokenizer/pre_tokenizer.h"

#include <array>
#include <functional>

#include "common/text/tokenizer/byte_level.h"
#include "common/text/tokenizer/json_util.h"
#include "common/text/unicode/unicode.h"

namespace astr::tok {

const char kGpt2SplitRegex[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {

constexpr std::string_view kMetaspace = "\xE2\x96\x81";  // U+2581

// Cuts `text` at `matches` (an object with Next(Regex::Match*)) and hands the pieces to `sink`;
// only the piece at offset 0 of a text that is at the start stays at the start.
template <typename Matches>
bool SplitInto(std::string_view text, bool at_start, Matches& matches, SplitBehavior behavior,
               bool invert, WordSink& sink) {
  SplitStream split(text.size(), behavior, invert);
  auto emit = [&](Span s) {
    return sink.Word(text.substr(s.begin, s.end - s.begin), at_start && s.begin == 0);
  };
  for (regex::Regex::Match m; matches.Next(&m);) {
    if (!split.Add(m, emit)) return false;
  }
  return split.Finish(emit);
}

// Matches of single characters for which `pred` holds.
class CharMatches {
 public:
  CharMatches(std::string_view text, const std::function<bool(uint32_t)>& pred)
      : text_(text), pred_(pred) {}
  bool Next(regex::Regex::Match* m) {
    while (i_ < text_.size()) {
      const size_t begin = i_;
      if (pred_(unicode::NextCodepoint(text_, i_))) {
        *m = {begin, i_};
        return true;
      }
    }
    return false;
  }

 private:
  std::string_view text_;
  const std::function<bool(uint32_t)>& pred_;
  size_t i_ = 0;
};

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
  bool PreTokenize(std::string_view text, bool at_start, WordSink& sink) const override {
    Stage first(*this, 0, sink);
    return first.Word(text, at_start);
  }
  PreTokenizerTraits traits() const override {
    PreTokenizerTraits t;
    int rewriters = 0;
    bool raw_byte_level = false;
    for (const auto& p : parts_) {
      const PreTokenizerTraits pt = p->traits();
      t.keeps_every_byte = t.keeps_every_byte && pt.keeps_every_byte;
      t.only_splits = t.only_splits && pt.only_splits;
      // Byte-level words stay byte-level through later splits, not through later rewrites.
      t.byte_level_words = pt.byte_level_words || (t.byte_level_words && pt.only_splits);
      if (!pt.only_splits) {
        ++rewriters;
        raw_byte_level = pt.raw_byte_level;
      }
    }
    // The raw bytes reach the mapping only if it is the one part that rewrites.
    t.raw_byte_level = rewriters == 1 && raw_byte_level;
    return t;
  }

 private:
  // Runs part `next` on each word of the part before it; past the last part, words go to `out`.
  // Stages live on the stack, one per part: nothing is allocated per word.
  class Stage final : public WordSink {
   public:
    Stage(const SequencePreTokenizer& seq, size_t next, WordSink& out)
        : seq_(seq), next_(next), out_(out) {}
    bool Word(std::string_view word, bool at_start) override {
      if (next_ == seq_.parts_.size()) return out_.Word(word, at_start);
      Stage inner(seq_, next_ + 1, out_);
      return seq_.parts_[next_]->PreTokenize(word, at_start, inner);
    }

   private:
    const SequencePreTokenizer& seq_;
    size_t next_;
    WordSink& out_;
  };

  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(Pattern pattern, SplitBehavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  bool PreTokenize(std::string_view text, bool at_start, WordSink& sink) const override {
    PatternCursor matches(pattern_, text);
    return SplitInto(text, at_start, matches, behavior_, invert_, sink);
  }
  PreTokenizerTraits traits() const override {
    return {.keeps_every_byte = behavior_ != SplitBehavior::kRemoved};
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
  bool PreTokenize(std::string_view text, bool at_start, WordSink& sink) const override {
    CharMatches matches(text, pred_);
    return SplitInto(text, at_start, matches, behavior_, false, sink);
  }
  PreTokenizerTraits traits() const override {
    return {.keeps_every_byte = behavior_ != SplitBehavior::kRemoved};
  }

 private:
  std::function<bool(uint32_t)> pred_;
  SplitBehavior behavior_;
};

// Each byte's stand-in character as at most two UTF-8 bytes (ByteLevelAlphabet is U+0021..U+0143).
struct ByteChar {
  char bytes[2];
  uint8_t size;
};

const std::array<ByteChar, 256>& ByteChars() {
  static const std::array<ByteChar, 256> table = [] {
    std::array<ByteChar, 256> t{};
    const auto& alphabet = ByteLevelAlphabet();
    for (size_t b = 0; b < 256; ++b) {
      t[b].size = static_cast<uint8_t>(alphabet[b].size());
      for (size_t i = 0; i < alphabet[b].size() && i < 2; ++i) t[b].bytes[i] = alphabet[b][i];
    }
    return t;
  }();
  return table;
}

// Maps every word to the byte alphabet, then passes it on. Words up to kInline bytes are mapped
// into a stack buffer, longer ones into a string (reused for the rest of the text).
class ByteLevelMapper final : public WordSink {
 public:
  explicit ByteLevelMapper(WordSink& out) : out_(out) {}
  bool Word(std::string_view word, bool at_start) override {
    const auto& table = ByteChars();
    char* dst = inline_;
    if (word.size() * 2 > kInline) {
      size_t mapped = 0;  // exact, so that a long word costs its mapped size and no more
      for (char c : word) mapped += table[static_cast<uint8_t>(c)].size;
      if (heap_.size() < mapped + 1) heap_.resize(mapped + 1);  // +1: the loop writes 2 bytes
      dst = heap_.data();
    }
    size_t n = 0;
    for (char c : word) {
      const ByteChar& bc = table[static_cast<uint8_t>(c)];
      dst[n] = bc.bytes[0];
      dst[n + 1] = bc.bytes[1];
      n += bc.size;
    }
    return out_.Word(std::string_view(dst, n), at_start);
  }

 private:
  static constexpr size_t kInline = 256;
  WordSink& out_;
  char inline_[kInline];
  std::string heap_;
};

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::unique_ptr<PreTokenizer> split)
      : add_prefix_space_(add_prefix_space), split_(std::move(split)) {}
  bool PreTokenize(std::string_view text, bool at_start, WordSink& sink) const override {
    std::string prefixed;
    if (add_prefix_space_ && (text.empty() || text[0] != ' ')) {
      prefixed.reserve(text.size() + 1);
      prefixed += ' ';
      prefixed += text;
      text = prefixed;
    }
    ByteLevelMapper mapper(sink);
    return split_ != nullptr ? split_->PreTokenize(text, at_start, mapper)
                             : mapper.Word(text, at_start);
  }
  PreTokenizerTraits traits() const override {
    return {.keeps_every_byte = split_ == nullptr || split_->traits().keeps_every_byte,
            .only_splits = false,
            .byte_level_words = true,
            .raw_byte_level = true};
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
  bool PreTokenize(std::string_view text, bool at_start, WordSink& sink) const override {
    std::string replaced;
    replaced.reserve(text.size() + replacement_.size());
    for (char c : text) {
      if (c == ' ') {
        replaced += replacement_;
      } else {
        replaced += c;
      }
    }
    const bool starts = replaced.compare(0, replacement_.size(), replacement_) == 0;
    if (!starts &&
        (scheme_ == PrependScheme::kAlways || (scheme_ == PrependScheme::kFirst && at_start))) {
      replaced.insert(0, replacement_);
    }
    if (!split_) return replaced.empty() || sink.Word(replaced, at_start);
    PatternCursor matches(marker_, replaced);
    return SplitInto(replaced, at_start, matches, SplitBehavior::kMergedWithNext, false, sink);
  }
  PreTokenizerTraits traits() const override {
    // Spaces become the replacement: the words shrink only if it is empty.
    return {.keeps_every_byte = !replacement_.empty(), .only_splits = false};
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
