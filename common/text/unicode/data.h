// The generated Unicode tables (common/text/unicode/data.cc, from scripts/gen_unicode_data.py), for
// unicode.cc and the regex compiler only; everyone else uses common/text/unicode/unicode.h.
//
// Two-level tables: value(cp) = Stage2[(Stage1[cp >> 8] << 8) | (cp & 0xFF)].
// Decomposition-style tables: Keys sorted; for Keys[k], Spans[k] = offset << 5 | length into Pool.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/text/unicode/unicode.h"

namespace astr::unicode::internal {

// Normalize's body (unicode_normalize.cc).
std::string NormalizeImpl(std::string_view utf8, NormalForm form);

extern const char kUnicodeVersion[];

extern const uint8_t kCategoryStage1[];
extern const uint8_t kCategoryStage2[];

// Inclusive [lo, hi] pairs, sorted.
extern const uint32_t kWhiteSpaceRanges[];
extern const size_t kWhiteSpaceRangesSize;
extern const uint32_t kWordExtraRanges[];
extern const size_t kWordExtraRangesSize;
extern const uint32_t kWordExtraOutsideClassRanges[];
extern const size_t kWordExtraOutsideClassRangesSize;

// Simple case folding, sorted by key.
extern const uint32_t kFoldKeys[];
extern const uint32_t kFoldValues[];
extern const size_t kFoldKeysSize;

// Full lowercase mappings.
extern const uint32_t kLowerKeys[];
extern const uint32_t kLowerSpans[];
extern const uint32_t kLowerPool[];
extern const size_t kLowerKeysSize;

// [lo, hi, kind] triples, kind 1 = Cased, 2 = Case_Ignorable, sorted, for the Final_Sigma rule.
extern const uint32_t kCaseKindRanges[];
extern const size_t kCaseKindRangesSize;

extern const uint8_t kCombiningClassStage1[];
extern const uint8_t kCombiningClassStage2[];

// Full (recursive) canonical and compatibility decompositions; Hangul syllables are algorithmic.
// kCompat holds only code points whose NFKD differs from their NFD.
extern const uint32_t kCanonicalKeys[];
extern const uint32_t kCanonicalSpans[];
extern const uint32_t kCanonicalPool[];
extern const size_t kCanonicalKeysSize;
extern const uint32_t kCompatKeys[];
extern const uint32_t kCompatSpans[];
extern const uint32_t kCompatPool[];
extern const size_t kCompatKeysSize;

// Primary composites: kComposePairs[k] = first << 21 | second (sorted) composes to
// kComposeResults[k].
extern const uint64_t kComposePairs[];
extern const uint32_t kComposeResults[];
extern const size_t kComposePairsSize;

}  // namespace astr::unicode::internal
