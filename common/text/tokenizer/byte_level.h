// GPT-2 byte-level BPE pieces: every byte is written as a printable Unicode character
// (bytes_to_unicode); these helpers map bytes to those characters and back.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace astr::tok {

// The stand-in character (UTF-8) of every byte.
const std::array<std::string, 256>& ByteLevelAlphabet();

// The byte a code point stands for, or -1 if it is not in the byte alphabet.
int ByteLevelByte(uint32_t codepoint);

}  // namespace astr::tok
