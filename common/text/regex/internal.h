// Internals of common/text/regex/regex.h shared by the parser, the compiler and the matcher.
//
// Pipeline: pattern --ParsePattern--> Node tree --CompileProgram--> Program (flat instructions)
// --regex_match.cc--> matches.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/base/status.h"
#include "common/text/unicode/unicode.h"

namespace astr::regex::internal {

// ---- Character sets -----------------------------------------------------------------------------

// Inclusive code point range.
struct CpRange {
  uint32_t lo;
  uint32_t hi;
};

// An exact set of code points in 0..U+10FFFF, closed under union, intersection and complement:
// the code points whose general category is in `categories`, with membership flipped for those in
// `flips` (sorted, disjoint, non-adjacent ranges). Category-based sets such as [^\s\p{L}\p{N}]
// stay small this way (a mask and a couple of ranges) while literal ranges are exact.
class CharSet {
 public:
  static CharSet Empty() { return CharSet(); }
  static CharSet Categories(uint32_t mask) { return CharSet(mask, {}); }
  static CharSet Ranges(std::vector<CpRange> ranges);
  static CharSet Single(uint32_t cp) { return Ranges({{cp, cp}}); }

  bool Contains(uint32_t cp) const;
  CharSet Complement() const;
  CharSet Union(const CharSet& other) const;
  CharSet Intersect(const CharSet& other) const;
  // Adds every code point that has the same simple case folding as a member.
  CharSet CaseClosure() const;

  uint32_t categories() const { return categories_; }
  const std::vector<CpRange>& flips() const { return flips_; }

 private:
  CharSet() = default;
  CharSet(uint32_t categories, std::vector<CpRange> flips)
      : categories_(categories), flips_(std::move(flips)) {}
  bool InFlips(uint32_t cp) const;
  // The set {cp : op(this->Contains(cp), other.Contains(cp))} with category mask `mask`.
  template <typename Op>
  CharSet Combine(const CharSet& other, uint32_t mask, Op op) const;

  uint32_t categories_ = 0;
  std::vector<CpRange> flips_;
};

// The set for a \p{name} property name (without the braces and without '^'), or NotFound.
StatusOr<CharSet> PropertySet(std::string_view name);
CharSet DigitSet();              // \d: Nd
CharSet SpaceSet();              // \s: White_Space
CharSet WordSet(bool in_class);  // \w; Oniguruma's differs slightly inside brackets
CharSet HexDigitSet();           // \h: [0-9A-Fa-f]
CharSet NotNewlineSet();         // .: everything but \n

// The matcher's form of a CharSet: a bitmap for ASCII, the category mask plus the flip ranges for
// the rest. An invalid UTF-8 byte decodes to U+FFFD and is tested as such.
struct ClassMatcher {
  uint64_t ascii[2] = {0, 0};
  uint32_t categories = 0;
  uint32_t flips_lo = 1, flips_hi = 0;  // bounds of `flips` (empty: lo > hi)
  std::vector<CpRange> flips;

  explicit ClassMatcher(const CharSet& set);
  bool Matches(uint32_t cp) const {
    if (cp < 128) return (ascii[cp >> 6] >> (cp & 63)) & 1;
    bool in = (categories >> static_cast<int>(unicode::GetCategory(cp))) & 1;
    if (cp >= flips_lo && cp <= flips_hi) in ^= InFlips(cp);
    return in;
  }
  bool InFlips(uint32_t cp) const;
};

// ---- Syntax tree --------------------------------------------------------------------------------

enum class AssertKind : uint8_t {
  kLineBegin,     // ^
  kLineEnd,       // $
  kTextBegin,     // \A
  kTextEnd,       // \z
  kTextEndNl,     // \Z: end, or before a final \n
  kWordBoundary,  // \b
  kNotWordBoundary,
  kSearchStart,  // \G
};

enum class RepeatMode : uint8_t { kGreedy, kLazy, kPossessive };

struct Node {
  enum class Kind : uint8_t {
    kEmpty,
    kSet,     // one character from set (a literal is a single-code-point set)
    kConcat,  // children in order
    kAlt,     // children tried in order
    kRepeat,  // children[0] {min, max}; max < 0: unbounded
    kAtomic,  // (?>...): children[0] without backtracking into it
    kLook,    // lookaround on children[0]
    kAssert,
  };
  Kind kind = Kind::kEmpty;
  int set = -1;  // kSet: index into ParsedPattern::sets
  int min = 0, max = 0;
  RepeatMode mode = RepeatMode::kGreedy;
  bool negate = false;  // kLook: (?! / (?<!
  bool behind = false;  // kLook: (?<= / (?<!
  AssertKind assert_kind = AssertKind::kLineBegin;
  size_t offset = 0;  // in the pattern, for error messages
  std::vector<std::unique_ptr<Node>> children;
};

struct ParsedPattern {
  std::unique_ptr<Node> root;
  std::vector<CharSet> sets;
};

StatusOr<ParsedPattern> ParsePattern(std::string_view pattern);

// ---- Program ------------------------------------------------------------------------------------

enum class Op : uint8_t {
  kSet,          // consume one character in classes[arg]
  kRepeat,       // consume {min, max} characters of classes[arg], mode; then next
  kAlt,          // try branches[x .. x + y) in order; arg: its rows in alt_ascii
  kJump,         // goto x
  kMatch,        // success
  kAssert,       // AssertKind(arg)
  kAtomicBegin,  // push a barrier
  kAtomicEnd,    // drop everything above the innermost barrier
  kLookBegin,    // lookaround: arg = fixed length in characters (lookbehind); x = resume pc
  kLookEnd,      // end of lookaround body
  kMark,         // registers[arg] = position (undone on backtracking); empty-loop detection
  kCheckEmpty,   // if position == registers[arg], the iteration matched nothing: goto x
};

struct Inst {
  Op op;
  RepeatMode mode = RepeatMode::kGreedy;
  bool negate = false;      // kLookBegin
  bool behind = false;      // kLookBegin
  bool memoizable = false;  // arrival at this pc may be memoized (see regex_match.cc)
  uint32_t arg = 0;
  uint32_t x = 0;
  uint32_t y = 0;
  uint32_t min = 0;
  uint32_t max = 0;        // kRepeat: UINT32_MAX for unbounded
  uint32_t memo_slot = 0;  // row in the memo bitmap, when memoizable
};

// One branch of a kAlt: where it starts and a filter on the next character (index into
// `classes`, or -1 when the branch can start without consuming, e.g. with an assertion).
struct Branch {
  uint32_t pc;
  int first;
};

// For a kAlt and an ASCII next character: the first and the second branch (relative indices)
// whose filter accepts it, or kNone.
struct AltChoice {
  static constexpr uint8_t kNone = 0xFF;
  uint8_t first;
  uint8_t second;
};
inline constexpr uint32_t kNoAsciiTable = UINT32_MAX;

struct Program {
  std::string pattern;
  std::vector<Inst> insts;
  std::vector<Branch> branches;
  std::vector<ClassMatcher> classes;
  // 128 entries per kAlt with fewer than 255 branches, at Inst::arg (else kNoAsciiTable).
  std::vector<AltChoice> alt_ascii;
  int start_class = -1;  // every match starts with a character of this class; -1: none known
  uint32_t num_registers = 0;
  uint32_t num_memo_slots = 0;  // memoizable instructions (Inst::memo_slot)
};

// Limit on the compiled size, which counted repetitions of groups multiply.
inline constexpr size_t kMaxInstructions = 1 << 16;

StatusOr<Program> CompileProgram(const ParsedPattern& parsed, std::string_view pattern);

}  // namespace astr::regex::internal
