// GPT-2 byte-level BPE pieces: every byte is written as a printable Unicode character
// (bytes_to_unicode); these helpers map pieces back to raw bytes.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace astr {

// Raw bytes of a byte-level piece ("Ġworld" -> " world"). Characters outside the byte alphabet
// are copied through unchanged.
std::string ByteLevelDecode(std::string_view piece);

// The stand-in character (UTF-8) of every byte: the inverse of ByteLevelDecode.
const std::array<std::string, 256>& ByteLevelAlphabet();

// The byte a code point stands for, or -1 if it is not in the byte alphabet.
int ByteLevelByte(uint32_t codepoint);

}  // namespace astr
