// Incremental detokenization for streaming: feed ids one at a time, get back only text that can no
// longer change. The concatenation of everything Push and Finish return equals
// Decode(all ids) (or, with a prompt, the part of Decode(prompt + ids) after Decode(prompt)).
//
// Method (as vLLM / TGI): decode a window that starts a few tokens back, so that context-dependent
// rules (SentencePiece's leading space, byte-level pieces of one character) see the same
// neighbours as a full decode, and emit only the new suffix. Text is held back while it ends in an
// incomplete UTF-8 sequence (shown as U+FFFD) or in a byte-fallback token, whose bytes the decoder
// joins with the following byte tokens.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/text/tokenizer/tokenizer.h"

namespace astr::tok {

class StreamDecoder {
 public:
  // `prompt`: ids that precede the generated ones (their text is not emitted).
  StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens,
                std::span<const int32_t> prompt = {});

  // Text that became final with `id` (often empty while a character is incomplete).
  std::string Push(int32_t id);
  // Everything still held back; call once at the end of the sequence.
  std::string Finish();

 private:
  // The text of ids_ beyond that of ids_[0, read_offset_); "" when it does not extend it.
  std::string NewText() const;

  const Tokenizer& tokenizer_;
  bool skip_special_;
  // The window: ids already emitted (context for the decoder rules), then ids not yet emitted
  // from read_offset_ on. After each emission the window restarts at the previous read offset.
  std::vector<int32_t> ids_;
  size_t read_offset_ = 0;
  bool in_byte_run_ = false;  // the last token the decode keeps is a joinable byte token
};

}  // namespace astr::tok
