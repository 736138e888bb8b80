// Unicode normalization forms (UAX #15): full decomposition from the generated tables plus the
// Hangul algorithm, canonical ordering, then canonical composition for NFC / NFKC.
#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "common/text/unicode/data.h"
#include "common/text/unicode/unicode.h"

namespace astr::unicode {
namespace {

constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28;
constexpr uint32_t kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

// Below these no code point has a canonical / compatibility decomposition (U+00C0, U+00A0).
constexpr uint32_t kFirstCanonical = 0xC0;
constexpr uint32_t kFirstCompat = 0xA0;

struct DecompositionTable {
  const uint32_t* keys;
  const uint32_t* spans;
  const uint32_t* pool;
  size_t size;

  // Appends the full decomposition of cp and returns true, or returns false if it has none.
  bool Append(uint32_t cp, std::vector<uint32_t>& out) const {
    const uint32_t* end = keys + size;
    const uint32_t* it = std::lower_bound(keys, end, cp);
    if (it == end || *it != cp) return false;
    const uint32_t span = spans[it - keys];
    out.insert(out.end(), pool + (span >> 5), pool + (span >> 5) + (span & 31));
    return true;
  }
};

DecompositionTable Canonical() {
  return {internal::kCanonicalKeys, internal::kCanonicalSpans, internal::kCanonicalPool,
          internal::kCanonicalKeysSize};
}

DecompositionTable Compat() {
  return {internal::kCompatKeys, internal::kCompatSpans, internal::kCompatPool,
          internal::kCompatKeysSize};
}

void Decompose(uint32_t cp, bool compat, std::vector<uint32_t>& out) {
  if (cp < kFirstCompat || (!compat && cp < kFirstCanonical)) {
    out.push_back(cp);
    return;
  }
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const uint32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  if (compat && Compat().Append(cp, out)) return;
  if (Canonical().Append(cp, out)) return;
  out.push_back(cp);
}

// Stable sort of each run of non-starters by combining class (the canonical ordering algorithm).
void CanonicalOrder(std::vector<uint32_t>& cps) {
  for (size_t i = 1; i < cps.size(); ++i) {
    const uint8_t cc = CombiningClass(cps[i]);
    if (cc == 0) continue;
    size_t j = i;
    const uint32_t cp = cps[i];
    while (j > 0) {
      const uint8_t prev = CombiningClass(cps[j - 1]);
      if (prev <= cc) break;  // starters (0) stop the run; equal classes keep their order
      cps[j] = cps[j - 1];
      --j;
    }
    cps[j] = cp;
  }
}

// The primary composite of (first, second), or 0.
uint32_t ComposePair(uint32_t first, uint32_t second) {
  if (first >= kLBase && first < kLBase + kLCount && second >= kVBase &&
      second < kVBase + kVCount) {
    return kSBase + ((first - kLBase) * kVCount + (second - kVBase)) * kTCount;
  }
  if (first >= kSBase && first < kSBase + kSCount && (first - kSBase) % kTCount == 0 &&
      second > kTBase && second < kTBase + kTCount) {
    return first + (second - kTBase);
  }
  const uint64_t key = (uint64_t{first} << 21) | second;
  const uint64_t* end = internal::kComposePairs + internal::kComposePairsSize;
  const uint64_t* it = std::lower_bound(internal::kComposePairs, end, key);
  return (it != end && *it == key) ? internal::kComposeResults[it - internal::kComposePairs] : 0;
}

// Canonical composition in place: each character that is not blocked from the last starter and
// forms a primary composite with it is merged into the starter.
void Compose(std::vector<uint32_t>& cps) {
  size_t out = 0;
  int64_t starter = -1;
  uint8_t prev_cc = 0;
  for (size_t i = 0; i < cps.size(); ++i) {
    const uint32_t cp = cps[i];
    const uint8_t cc = CombiningClass(cp);
    if (starter >= 0) {
      const bool adjacent = static_cast<size_t>(starter) + 1 == out;
      if (adjacent || (prev_cc != 0 && prev_cc < cc)) {
        const uint32_t composite = ComposePair(cps[starter], cp);
        if (composite != 0) {
          cps[starter] = composite;
          continue;
        }
      }
    }
    if (cc == 0) starter = static_cast<int64_t>(out);
    prev_cc = cc;
    cps[out++] = cp;
  }
  cps.resize(out);
}

}  // namespace

namespace internal {

// Normalizes in chunks that end before an ASCII byte, so that the code point buffer stays small
// (it was 4 bytes per input byte, for the whole text). Cutting there changes nothing: an ASCII
// character is a starter that never decomposes and is never the second half of a composition, so
// no reordering or composition reaches across it, and decomposition is per character.
std::string NormalizeImpl(std::string_view utf8, NormalForm form) {
  const bool all_ascii = std::all_of(utf8.begin(), utf8.end(),
                                     [](char c) { return static_cast<unsigned char>(c) < 0x80; });
  if (all_ascii) return std::string(utf8);  // ASCII is invariant under every form
  constexpr size_t kChunkBytes = 64 * 1024;
  const bool compat = form == NormalForm::kNFKC || form == NormalForm::kNFKD;
  const bool compose = form == NormalForm::kNFC || form == NormalForm::kNFKC;
  std::string out;
  out.reserve(utf8.size() + utf8.size() / 8);
  std::vector<uint32_t> cps;
  for (size_t begin = 0; begin < utf8.size();) {
    size_t end = std::min(utf8.size(), begin + kChunkBytes);
    while (end < utf8.size() && static_cast<unsigned char>(utf8[end]) >= 0x80) ++end;
    const std::string_view chunk = utf8.substr(begin, end - begin);
    begin = end;
    cps.clear();
    for (size_t i = 0; i < chunk.size();) Decompose(NextCodepoint(chunk, i), compat, cps);
    CanonicalOrder(cps);
    if (compose) Compose(cps);
    for (uint32_t cp : cps) AppendUtf8(cp, out);
  }
  return out;
}

}  // namespace internal

}  // namespace astr::unicode
