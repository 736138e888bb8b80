#include "common/tokenizer/stream_decoder.h"

namespace astr {
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
  prefix_offset_ = 0;
  read_offset_ = ids_.size();
}

std::string StreamDecoder::Push(int32_t id) {
  ids_.push_back(id);
  // A byte token may still join with the next ones: wait for the run to end. Tokens the decode
  // drops (skipped special tokens, unknown ids) do not end a run.
  const bool dropped =
      tokenizer_.IdToToken(id).empty() || (skip_special_ && tokenizer_.IsSpecial(id));
  if (!dropped) in_byte_run_ = tokenizer_.IsByteFallbackToken(id);
  if (in_byte_run_) return "";
  const std::span<const int32_t> all(ids_);
  const std::string prefix_text =
      tokenizer_.Decode(all.subspan(prefix_offset_, read_offset_ - prefix_offset_), skip_special_);
  const std::string new_text = tokenizer_.Decode(all.subspan(prefix_offset_), skip_special_);
  if (new_text.size() <= prefix_text.size() || EndsWithReplacement(new_text) ||
      new_text.compare(0, prefix_text.size(), prefix_text) != 0) {
    return "";
  }
  std::string out = new_text.substr(prefix_text.size());
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  // Drop ids that no window will read again.
  if (prefix_offset_ > 0) {
    ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(prefix_offset_));
    read_offset_ -= prefix_offset_;
    prefix_offset_ = 0;
  }
  return out;
}

std::string StreamDecoder::Finish() {
  const std::span<const int32_t> all(ids_);
  const std::string prefix_text =
      tokenizer_.Decode(all.subspan(prefix_offset_, read_offset_ - prefix_offset_), skip_special_);
  const std::string new_text = tokenizer_.Decode(all.subspan(prefix_offset_), skip_special_);
  read_offset_ = prefix_offset_ = ids_.size();
  if (new_text.size() <= prefix_text.size()) return "";
  return new_text.substr(prefix_text.size());
}

}  // namespace astr
