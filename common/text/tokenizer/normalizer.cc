#include "common/text/tokenizer/normalizer.h"

#include <algorithm>

#include "common/text/tokenizer/json_util.h"
#include "common/text/unicode/unicode.h"

namespace astr::tok {
namespace {

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts)
      : parts_(std::move(parts)) {}
  void Normalize(std::string& text) const override {
    for (const auto& p : parts_) p->Normalize(text);
  }
  size_t MaxShrink() const override {
    size_t f = 1;
    for (const auto& p : parts_) {
      const size_t part = p->MaxShrink();
      if (part == 0) return 0;
      f *= part;
    }
    return f;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

// Prepends to non-empty text only (tokenizers' Prepend).
class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  void Normalize(std::string& text) const override {
    if (text.empty()) return;
    // A new string of the exact size: insert() would grow the capacity to twice the text.
    std::string out;
    out.reserve(prefix_.size() + text.size());
    out += prefix_;
    out += text;
    text = std::move(out);
  }
  size_t MaxShrink() const override { return 1; }

 private:
  std::string prefix_;
};

class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(Pattern pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void Normalize(std::string& text) const override { text = ReplaceAll(pattern_, text, content_); }
  // A literal of m bytes becomes content_ (c bytes) at non-overlapping matches: at worst every
  // byte is in a match, giving B * c / m bytes. A regex match has no length limit.
  size_t MaxShrink() const override {
    if (!pattern_.is_literal() || content_.empty()) return 0;
    const size_t m = pattern_.source().size();
    return std::max<size_t>(1, (m + content_.size() - 1) / content_.size());
  }

 private:
  Pattern pattern_;
  std::string content_;
};

class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(unicode::NormalForm form) : form_(form) {}
  void Normalize(std::string& text) const override { text = unicode::Normalize(text, form_); }
  size_t MaxShrink() const override { return kUnicodeNormalizerMaxShrink; }

 private:
  unicode::NormalForm form_;
};

// tokenizers lowercases character by character (no final-sigma rule), hence ToLowerChars.
class LowercaseNormalizer final : public Normalizer {
 public:
  void Normalize(std::string& text) const override { text = unicode::ToLowerChars(text); }
  size_t MaxShrink() const override { return kLowercaseMaxShrink; }
};

// Strips Unicode whitespace from the left and/or right end.
class StripNormalizer final : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void Normalize(std::string& text) const override {
    size_t begin = 0;
    size_t end = text.size();
    if (left_) {
      while (begin < end) {
        size_t i = begin;
        if (!unicode::IsWhitespace(unicode::NextCodepoint(text, i))) break;
        begin = i;
      }
    }
    if (right_) {
      while (end > begin) {
        const size_t start = unicode::PrevCodepointStart(text, end, begin);
        size_t i = start;
        if (!unicode::IsWhitespace(unicode::NextCodepoint(text, i))) break;
        end = start;
      }
    }
    text = text.substr(begin, end - begin);
  }
  size_t MaxShrink() const override { return 0; }  // a text of spaces strips to nothing

 private:
  bool left_;
  bool right_;
};

}  // namespace

StatusOr<std::unique_ptr<Normalizer>> NormalizerFromJson(const nlohmann::json& j) {
  if (j.is_null()) return std::unique_ptr<Normalizer>();
  ASTR_ASSIGN_OR_RETURN(std::string type, JsonType(j, "normalizer"));
  if (type == "Sequence") {
    ASTR_ASSIGN_OR_RETURN(const nlohmann::json* list, JsonArray(j, "normalizers", "normalizer"));
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (const auto& item : *list) {
      ASTR_ASSIGN_OR_RETURN(auto part, NormalizerFromJson(item));
      if (part != nullptr) parts.push_back(std::move(part));
    }
    return std::unique_ptr<Normalizer>(new SequenceNormalizer(std::move(parts)));
  }
  if (type == "Prepend") {
    ASTR_ASSIGN_OR_RETURN(std::string prefix, JsonString(j, "prepend", "Prepend normalizer"));
    return std::unique_ptr<Normalizer>(new PrependNormalizer(std::move(prefix)));
  }
  if (type == "Replace") {
    ASTR_ASSIGN_OR_RETURN(Pattern pattern, PatternFromJson(j, "Replace normalizer"));
    ASTR_ASSIGN_OR_RETURN(std::string content, JsonString(j, "content", "Replace normalizer"));
    return std::unique_ptr<Normalizer>(new ReplaceNormalizer(std::move(pattern), content));
  }
  if (type == "NFC") return MakeNfcNormalizer();
  if (type == "NFD")
    return std::unique_ptr<Normalizer>(new UnicodeNormalizer(unicode::NormalForm::kNFD));
  if (type == "NFKC")
    return std::unique_ptr<Normalizer>(new UnicodeNormalizer(unicode::NormalForm::kNFKC));
  if (type == "NFKD")
    return std::unique_ptr<Normalizer>(new UnicodeNormalizer(unicode::NormalForm::kNFKD));
  if (type == "Lowercase") return std::unique_ptr<Normalizer>(new LowercaseNormalizer());
  if (type == "Strip") {
    const bool left = j.value("strip_left", true);
    const bool right = j.value("strip_right", true);
    return std::unique_ptr<Normalizer>(new StripNormalizer(left, right));
  }
  return UnimplementedError("normalizer type \"" + type + "\" is not supported");
}

std::unique_ptr<Normalizer> MakeSentencePieceNormalizer(bool add_prefix) {
  constexpr char kMarker[] = "\xE2\x96\x81";
  std::vector<std::unique_ptr<Normalizer>> parts;
  if (add_prefix) parts.emplace_back(new PrependNormalizer(kMarker));
  parts.emplace_back(new ReplaceNormalizer(Pattern::Literal(" "), kMarker));
  return std::unique_ptr<Normalizer>(new SequenceNormalizer(std::move(parts)));
}

std::unique_ptr<Normalizer> MakeNfcNormalizer() {
  return std::unique_ptr<Normalizer>(new UnicodeNormalizer(unicode::NormalForm::kNFC));
}

}  // namespace astr::tok
