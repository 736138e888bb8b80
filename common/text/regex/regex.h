// A backtracking regular-expression engine with Oniguruma's (Ruby syntax) semantics, for the
// pre-tokenizer patterns of Hugging Face `tokenizers`, which runs them on Oniguruma. It must split
// text exactly as that library does, so the semantics are Oniguruma's: leftmost match; alternatives
// tried in order and the first that leads to a match wins (not POSIX longest); greedy quantifiers
// give back one character at a time; lookarounds and possessive quantifiers are atomic.
//
// Supported syntax (anything else is rejected with kInvalidArgument naming the construct and its
// byte offset in the pattern):
//   literals; escapes \t \n \r \f \v \a \e \\ \xHH \x{H..} \uHHHH \o{..} \0oo \cX; an escaped
//   symbol stands for itself; '.' is any character but \n ((?m) lets it match \n, as in Ruby)
//   [...] [^...]: ranges, nested classes, && intersection, escapes and properties inside
//   \d \D \s \S \w \W \h \H \R; \p{..} \P{..} \p{^..} over the general categories (one- and
//   two-letter and long names such as Letter or Uppercase_Letter, matched ignoring case, ' ', '_'
//   and '-'), LC / Cased_Letter, Any, Assigned and ASCII
//   | ( ) (?: ) (?> ) (?imx-imx) (?imx-imx: ) (?#...); (?i) uses simple case folding
//   * + ? {n} {n,} {,m} {n,m}, lazy (*? +? ?? {n,m}?) and possessive (*+ ++ ?+) forms
//   (?= ) (?! ), and (?<= ) (?<! ) whose alternatives each match a fixed number of characters
//   anchors ^ $ (line anchors, as in Ruby) \A \z \Z \b \B \G
// Not supported: reporting captures (groups match but only whole matches are returned),
// backreferences, named groups, \K \X \y, script and binary properties (\p{Greek}, \p{Alpha}),
// POSIX brackets, multi-character case folds (ß vs "ss"), variable-length lookbehind.
//
// Work bounds: matching starts as plain backtracking. When a search's work outgrows the text it
// has covered (a pattern/input pair like `\s+$` on a long run of spaces), the matcher switches to
// memoizing the (instruction, position) states it has shown to fail, which keeps the tokenizer
// patterns linear on any input. States inside lookarounds and inside loops whose body can match
// empty are not memoized, so patterns such as `(?=(a|aa)*c)` can still blow up; a FindAll call
// therefore has a step budget (about 2^24 + 64 * text bytes * memo slots) and a backtrack-stack
// cap, past which it stops and leaves the rest of the text unmatched: a degraded answer instead of
// a hang. No pattern in `tokenizers`' zoo comes near either limit.
#pragma once

#include <cstddef>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "common/base/status.h"

namespace astr::regex {

namespace internal {
struct Program;
struct CursorState;
}  // namespace internal

class Regex {
 public:
  // Parses and compiles an Oniguruma (Ruby syntax) pattern.
  static StatusOr<Regex> Compile(std::string_view pattern);

  // A match as byte offsets into the UTF-8 text: [begin, end).
  struct Match {
    size_t begin;
    size_t end;
  };

  // Appends all non-overlapping leftmost matches, scanning left to right exactly like the find
  // iteration `tokenizers` uses (onig's FindMatches): after a match ending at e the next search
  // starts at e; an empty match is reported, except one at the end of the previous match, which is
  // skipped by advancing the search start by one character. Lookbehind and \b see the text before
  // each search start. Matching runs on code points; an invalid UTF-8 byte is a one-byte U+FFFD.
  // Thread-safe: const, no shared mutable state.
  void FindAll(std::string_view text, std::vector<Match>& out) const;

  // The pattern this was compiled from.
  std::string_view pattern() const;

 private:
  friend class RegexCursor;
  explicit Regex(std::shared_ptr<const internal::Program> program) : program_(std::move(program)) {}

  std::shared_ptr<const internal::Program> program_;
};

// The matches of Regex::FindAll one at a time (same matches, same work budget), for a caller that
// may stop early or must not hold them all: a pre-tokenizer streaming a long text keeps one match
// at a time instead of 16 bytes per match. `regex` and `text` must outlive the cursor. A cursor
// holds per-thread scratch buffers while alive (taken from a pool, so that short texts allocate
// nothing); cursors on one thread may nest, and must be destroyed on the thread that made them.
class RegexCursor {
 public:
  RegexCursor(const Regex& regex, std::string_view text);
  ~RegexCursor();
  RegexCursor(const RegexCursor&) = delete;
  RegexCursor& operator=(const RegexCursor&) = delete;

  // The next match; false once there is none (or the work budget ran out).
  bool Next(Regex::Match* m);

 private:
  internal::CursorState* state_ = nullptr;  // null for a default-constructed Regex
};

}  // namespace astr::regex
