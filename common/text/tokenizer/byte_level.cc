#include "common/text/tokenizer/byte_level.h"

#include <array>

namespace astr::tok {
namespace {

// code point -> byte for the 256 characters of GPT-2's bytes_to_unicode, -1 elsewhere.
const std::array<int, 324>& UnicodeToByte() {
  static const std::array<int, 324> table = [] {
    std::array<int, 324> t;
    t.fill(-1);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      const int cp = printable ? b : 256 + extra++;
      t[cp] = b;
    }
    return t;
  }();
  return table;
}

}  // namespace

const std::array<std::string, 256>& ByteLevelAlphabet() {
  static const std::array<std::string, 256> alphabet = [] {
    std::array<std::string, 256> a;
    const auto& table = UnicodeToByte();
    for (int cp = 0; cp < static_cast<int>(table.size()); ++cp) {
      if (table[cp] < 0) continue;
      std::string& s = a[table[cp]];
      if (cp < 0x80) {
        s.push_back(static_cast<char>(cp));
      } else {
        s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
      }
    }
    return a;
  }();
  return alphabet;
}

int ByteLevelByte(uint32_t codepoint) {
  const auto& table = UnicodeToByte();
  return codepoint < table.size() ? table[codepoint] : -1;
}

}  // namespace astr::tok
