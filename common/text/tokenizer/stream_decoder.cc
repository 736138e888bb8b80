#include "common/text/tokenizer/stream_decoder.h"

namespace astr::tok {
namespace {

constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";

// Context tokens before the first generated one (vLLM uses 5 too): enough for any decoder rule
// that looks at neighbours.
constexpr size_t kPromptContext = 5;

bool EndsWithReplacement(const std::string& s) {
  return s.size() >= kReplacementChar.size() &&
         s.compare(s.size() - kReplacementChar.size(), kReplacementChar.size(), kReplacementChar) ==
             0;
}

}  // namespace

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens,
                             std::span<const int32_t> prompt)
    : tokenizer_(tokenizer), skip_special_(skip_special_tokens) {
  const size_t keep = std::min(prompt.size(), kPromptContext);
  ids_.assign(prompt.end() - static_cast<std::ptrdiff_t>(keep), prompt.end());
  read_offset_ = ids_.size();
}

std::string StreamDecoder::NewText() const {
  const std::span<const int32_t> all(ids_);
  const std::string emitted = tokenizer_.Decode(all.first(read_offset_), skip_special_);
  std::string full = tokenizer_.Decode(all, skip_special_);
  if (full.size() <= emitted.size() || full.compare(0, emitted.size(), emitted) != 0) return "";
  return full.substr(emitted.size());
}

std::string StreamDecoder::Push(int32_t id) {
  ids_.push_back(id);
  // A byte token may still join with the next ones: wait for the run to end. Tokens the decode
  // drops (skipped special tokens, unknown ids) do not end a run.
  const bool dropped =
      tokenizer_.IdToToken(id).empty() || (skip_special_ && tokenizer_.IsSpecial(id));
  if (!dropped) in_byte_run_ = tokenizer_.IsByteFallbackToken(id);
  if (in_byte_run_) return "";
  std::string out = NewText();
  if (out.empty() || EndsWithReplacement(out)) return "";
  // The ids before the old read offset are no longer needed as context.
  ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(read_offset_));
  read_offset_ = ids_.size();
  return out;
}

std::string StreamDecoder::Finish() {
  std::string out = NewText();
  read_offset_ = ids_.size();
  return out;
}

}  // namespace astr::tok
