// Added tokens (tokenizer.json "added_tokens", GGUF control / user-defined tokens): they are cut
// out of the text before normalization and become one id each, like tokenizers' AddedVocabulary.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace astr::tok {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;
  bool single_word = false;  // only matches as a whole word
  bool lstrip = false;       // swallows whitespace on its left
  bool rstrip = false;       // swallows whitespace on its right
  bool normalized = false;   // matched in the normalized text rather than the raw text
};

// A piece of text: either an added token's id or a run of text for the model.
struct Segment {
  int32_t id = -1;  // >= 0: an added token
  size_t begin = 0;
  size_t end = 0;
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  explicit AddedTokenMatcher(std::vector<AddedToken> tokens);

  // Cuts a text at the leftmost-longest occurrences of the tokens (special ones only when
  // parse_special), applying single_word / lstrip / rstrip, one segment at a time. Text segments
  // are never empty unless the text itself is (then it is the only segment). The matcher and the
  // text must outlive the cursor.
  class Cursor {
   public:
    Cursor(const AddedTokenMatcher& matcher, std::string_view text, bool parse_special)
        : m_(matcher), text_(text), parse_special_(parse_special) {}
    bool Next(Segment* s);

   private:
    const AddedTokenMatcher& m_;
    std::string_view text_;
    bool parse_special_;
    size_t pos_ = 0;           // where the search for the next token goes on
    size_t start_offset_ = 0;  // where the pending text segment starts
    bool have_token_ = false;  // token_ is found but not yet returned
    Segment token_;
    bool emitted_ = false;  // any segment returned
    bool done_ = false;
  };

  bool empty() const { return tokens_.empty(); }
  // The most bytes one match covers: the longest token matched with `parse_special`; 0 when none
  // can match; SIZE_MAX when a matchable one has lstrip / rstrip (it swallows any whitespace).
  size_t MaxMatchBytes(bool parse_special) const;

 private:
  struct Node {
    std::unordered_map<uint8_t, int32_t> next;
    int32_t token = -1;  // index into tokens_ of the token ending here
  };
  // Length and token index of the longest token starting at text[pos]; {0, -1} if none.
  std::pair<size_t, int32_t> LongestAt(std::string_view text, size_t pos) const;

  std::vector<AddedToken> tokens_;
  std::vector<Node> trie_;
  bool first_byte_[256] = {};
};

}  // namespace astr::tok
