// GPT-2 byte-level BPE pieces: every byte is written as a printable Unicode character
// (bytes_to_unicode); these helpers map pieces back to raw bytes.
#pragma once

#include <string>
#include <string_view>

namespace astr {

// Raw bytes of a byte-level piece ("Ġworld" -> " world"). Characters outside the byte alphabet
// are copied through unchanged.
std::string ByteLevelDecode(std::string_view piece);

}  // namespace astr
