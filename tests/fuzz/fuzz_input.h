// Reads a fuzz input piece by piece: the targets split one byte string into the several values
// their API takes (a template and its messages, a pattern and its subject, a stream of messages).
// libFuzzer's FuzzedDataProvider does the same, but its header ships with clang only, and the
// corpus-replay builds use g++. Every read is total: past the end it returns zeros or empty
// strings, so that any input maps to some values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace astr::fuzz {

class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size)
      : data_(reinterpret_cast<const char*>(data)), size_(size) {}

  bool empty() const { return pos_ >= size_; }
  size_t remaining() const { return size_ - pos_; }

  uint8_t Byte() { return empty() ? 0 : static_cast<uint8_t>(data_[pos_++]); }
  bool Bool() { return (Byte() & 1) != 0; }
  // Little-endian, so that seeds written by hand stay readable.
  uint16_t U16() { return static_cast<uint16_t>(Byte() | (Byte() << 8)); }
  uint32_t U32() { return U16() | (static_cast<uint32_t>(U16()) << 16); }
  // The next `n` bytes (fewer at the end).
  std::string_view Bytes(size_t n) {
    n = n < remaining() ? n : remaining();
    std::string_view out(data_ + pos_, n);
    pos_ += n;
    return out;
  }
  // A record framed by a u16 length: how the targets that take a stream of protobuf messages cut
  // the input (a protobuf's bytes may hold any value, so no separator can mark its end).
  std::string_view Record() { return Bytes(U16()); }
  // Up to the next `separator` (which is consumed), or the rest when there is none.
  std::string_view Until(std::string_view separator) {
    const std::string_view rest(data_ + pos_, remaining());
    const size_t at = rest.find(separator);
    if (at == std::string_view::npos) return Rest();
    pos_ += at + separator.size();
    return rest.substr(0, at);
  }
  std::string_view Rest() { return Bytes(remaining()); }

 private:
  const char* data_;
  size_t size_;
  size_t pos_ = 0;
};

}  // namespace astr::fuzz
