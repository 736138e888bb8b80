// The backtracking matcher: runs a Program over UTF-8 text with an explicit stack.
//
// Backtrack frames record what to try next on failure (the next branch of an alternation, giving
// back one character of a greedy repeat, taking one more for a lazy one) plus barriers for atomic
// groups and lookarounds and register restores for empty-loop checks.
//
// Work bound (see regex.h): a FindAll call first runs plainly. When a search's steps grow faster
// than its scan (a quadratic pattern/input pair such as `\s+$` on a long run of spaces), it turns
// on memoization for the rest of the call: a bit per (memoizable instruction, position) records
// that arriving there cannot lead to a match, so each is explored once. That is sound because,
// outside lookarounds and empty-checked loops and without \G, what follows from a state depends
// only on the instruction and the position. States on the successful path of a search are the
// exception (they did lead to a match); they all lie at or before the match end, and the next
// search starts at or after it, so clearing the bits at the match end keeps the table valid across
// searches.
#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>

#include "common/text/regex/internal.h"
#include "common/text/regex/regex.h"

namespace astr::regex {
namespace internal {
namespace {

enum class FrameKind : uint32_t {
  kBranch,         // pc = kAlt, pos, aux = next branch index
  kRepeatGreedy,   // pc = kRepeat, pos = current end, aux = position after the minimum count
  kRepeatLazy,     // pc = kRepeat, pos = current end, aux = count so far
  kAtomicBarrier,  // popped on failure: nothing to retry
  kLookBarrier,    // pc = kLookBegin, pos = where the lookaround began
  kRestore,        // pc = register, aux = value to restore
};

struct Frame {
  FrameKind kind;
  uint32_t pc;
  size_t pos;
  size_t aux;
};

// Buffers of one live match iteration. They come from a per-thread pool (CursorState below), so
// that iterating over a short piece allocates nothing and nested cursors never share them.
struct Scratch {
  std::vector<Frame> stack;
  std::vector<size_t> registers;
  std::vector<uint64_t> memo;
};

// The backtrack stack over Scratch::stack, with an inlined push: the vector's own push_back is not
// reliably inlined and pushes are on the hot path.
class FrameStack {
 public:
  explicit FrameStack(std::vector<Frame>& storage) : storage_(storage) {
    if (storage_.size() < 64) storage_.resize(64);
  }
  void push_back(const Frame& f) {
    if (size_ == storage_.size()) Grow();
    storage_[size_++] = f;
  }
  Frame& back() { return storage_[size_ - 1]; }
  void pop_back() { --size_; }
  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }
  void clear() { size_ = 0; }
  void shrink_to(size_t n) { size_ = n; }
  const Frame& operator[](size_t i) const { return storage_[i]; }

 private:
  [[gnu::noinline]] void Grow() { storage_.resize(storage_.size() * 2); }

  std::vector<Frame>& storage_;
  size_t size_ = 0;
};

// Memo bitmap rows are `memo_width_` positions wide starting at `memo_base_`; positions outside
// the window are simply not memoized (correct, just slower).
constexpr size_t kMaxMemoBits = size_t{1} << 27;  // 16 MiB
constexpr size_t kMaxStackFrames = size_t{1} << 22;
// Switch to memoization when a search has taken more than this many steps plus kMemoStepsPerByte
// per byte it has scanned.
constexpr uint64_t kMemoBaseSteps = 4096;
constexpr uint64_t kMemoStepsPerByte = 64;
constexpr uint64_t kBaseBudget = uint64_t{1} << 24;
constexpr uint64_t kBudgetPerByteAndSlot = 64;
// Limits are checked at least this often (in steps).
constexpr uint64_t kCheckInterval = 65536;

enum class RunResult { kMatch, kNoMatch, kGiveUp, kNeedMemo };

class Matcher {
 public:
  Matcher(const Program& prog, std::string_view text, Scratch& scratch)
      : prog_(prog), text_(text), n_(text.size()), scratch_(scratch), stack_(scratch.stack) {
    scratch_.registers.assign(prog_.num_registers, 0);
    stack_.clear();
    // Total work for the whole call; beyond it the rest of the text is left unmatched. Memoized
    // matching visits each (memoizable instruction, position) once, with a few steps per visit.
    budget_ = kBaseBudget + kBudgetPerByteAndSlot * static_cast<uint64_t>(n_) *
                                (uint64_t{1} + prog_.num_memo_slots);
  }

  // The next match of the FindAll iteration; false once there is none.
  bool Next(Regex::Match* out);

 private:
  // Searches for the leftmost match starting at or after `from`.
  RunResult Search(size_t from, Regex::Match* match);
  RunResult Run(size_t start, size_t* end);
  RunResult CheckLimits(size_t pos);
  bool PossessiveMemo(const Inst& in, size_t p, size_t* pos);
  bool Assert(AssertKind kind, size_t pos) const;
  bool WordBefore(size_t pos) const;
  bool WordAt(size_t pos) const;
  bool Step(const ClassMatcher& cls, size_t* pos) const;
  size_t ConsumeRun(const ClassMatcher& cls, size_t p, uint32_t limit);
  bool ExecRepeat(uint32_t pc, size_t* pos);
  bool RepeatGreedy(uint32_t pc, size_t min_pos, size_t* pos);
  bool Backtrack(uint32_t* pc, size_t* pos);
  bool EndLook(uint32_t* pc, size_t* pos);
  bool TakeBranch(uint32_t alt_pc, size_t first, size_t pos, uint32_t* pc);
  void EnableMemo(size_t from);
  bool MemoTestAndSet(uint32_t slot, size_t pos);
  void MemoClearColumn(size_t pos);

  uint32_t Decode(size_t* pos) const { return unicode::NextCodepoint(text_, *pos); }

  const Program& prog_;
  std::string_view text_;
  size_t n_;
  Scratch& scratch_;
  FrameStack stack_;
  size_t search_start_ = 0;
  uint64_t steps_ = 0;
  uint64_t budget_ = 0;
  uint64_t search_steps0_ = 0;  // steps_ when the current search began
  uint64_t check_at_ = 0;       // steps_ at which Run next checks its limits
  bool give_up_ = false;
  bool done_ = false;
  // FindAll iteration state: where the next search starts, and the end of the last match.
  size_t last_end_ = 0;
  bool have_last_ = false;
  size_t last_match_end_ = 0;
  bool memo_on_ = false;
  size_t memo_base_ = 0;
  size_t memo_width_ = 0;
};

bool Matcher::WordBefore(size_t pos) const {
  if (pos == 0) return false;
  size_t start = unicode::PrevCodepointStart(text_, pos, 0);
  return unicode::IsWordChar(unicode::NextCodepoint(text_, start));
}

bool Matcher::WordAt(size_t pos) const {
  if (pos >= n_) return false;
  return unicode::IsWordChar(unicode::NextCodepoint(text_, pos));
}

bool Matcher::Assert(AssertKind kind, size_t pos) const {
  switch (kind) {
    case AssertKind::kLineBegin:
      return pos == 0 || (text_[pos - 1] == '\n' && pos != n_);
    case AssertKind::kLineEnd:
      return pos == n_ || text_[pos] == '\n';
    case AssertKind::kTextBegin:
      return pos == 0;
    case AssertKind::kTextEnd:
      return pos == n_;
    case AssertKind::kTextEndNl:
      return pos == n_ || (pos + 1 == n_ && text_[pos] == '\n');
    case AssertKind::kWordBoundary:
      return WordBefore(pos) != WordAt(pos);
    case AssertKind::kNotWordBoundary:
      return WordBefore(pos) == WordAt(pos);
    case AssertKind::kSearchStart:
      return pos == search_start_;
  }
  return false;
}

void Matcher::EnableMemo(size_t from) {
  const size_t slots = prog_.num_memo_slots;
  if (slots == 0) return;
  memo_on_ = true;
  memo_base_ = from;
  memo_width_ = std::min(n_ - from + 1, kMaxMemoBits / slots);
  scratch_.memo.assign((slots * memo_width_ + 63) / 64, 0);
}

// Returns true if (slot, pos) was already marked; marks it.
bool Matcher::MemoTestAndSet(uint32_t slot, size_t pos) {
  if (pos < memo_base_ || pos - memo_base_ >= memo_width_) return false;
  const size_t bit = slot * memo_width_ + (pos - memo_base_);
  uint64_t& word = scratch_.memo[bit >> 6];
  const uint64_t mask = uint64_t{1} << (bit & 63);
  if (word & mask) return true;
  word |= mask;
  return false;
}

void Matcher::MemoClearColumn(size_t pos) {
  if (pos < memo_base_ || pos - memo_base_ >= memo_width_) return;
  for (uint32_t slot = 0; slot < prog_.num_memo_slots; ++slot) {
    const size_t bit = slot * memo_width_ + (pos - memo_base_);
    scratch_.memo[bit >> 6] &= ~(uint64_t{1} << (bit & 63));
  }
}

// Picks the first branch of the kAlt at alt_pc, from index `first`, whose filter accepts the
// character at pos; pushes a frame for the rest if another could also match. False if none.
bool Matcher::TakeBranch(uint32_t alt_pc, size_t first, size_t pos, uint32_t* pc) {
  const Inst& in = prog_.insts[alt_pc];
  if (first == 0 && in.arg != kNoAsciiTable && pos < n_ &&
      static_cast<unsigned char>(text_[pos]) < 0x80) {
    const AltChoice choice = prog_.alt_ascii[in.arg + static_cast<unsigned char>(text_[pos])];
    if (choice.first == AltChoice::kNone) return false;
    if (choice.second != AltChoice::kNone) {
      stack_.push_back({FrameKind::kBranch, alt_pc, pos, choice.second});
    }
    *pc = prog_.branches[in.x + choice.first].pc;
    return true;
  }
  const size_t end = in.x + in.y;
  uint32_t cp = 0;
  const bool at_end = pos >= n_;
  if (!at_end) {
    size_t p = pos;
    cp = Decode(&p);
  }
  auto accepts = [&](const Branch& b) {
    return b.first < 0 || (!at_end && prog_.classes[b.first].Matches(cp));
  };
  size_t k = in.x + first;
  while (k < end && !accepts(prog_.branches[k])) ++k;
  if (k == end) return false;
  size_t next = k + 1;
  while (next < end && !accepts(prog_.branches[next])) ++next;
  if (next < end) stack_.push_back({FrameKind::kBranch, alt_pc, pos, next - in.x});
  *pc = prog_.branches[k].pc;
  return true;
}

// Consumes greedily from min_pos (the minimum count already taken) and pushes the give-back
// frame. In memo mode each position reached is a loop-head state: a marked one was explored
// before and failed, so the run stops short of it. False if the state at min_pos itself failed.
bool Matcher::RepeatGreedy(uint32_t pc, size_t min_pos, size_t* pos) {
  const Inst& in = prog_.insts[pc];
  const ClassMatcher& cls = prog_.classes[in.arg];
  const bool memo = memo_on_ && in.memoizable;
  if (memo && MemoTestAndSet(in.memo_slot, min_pos)) return false;
  size_t p = min_pos;
  const uint32_t extra = in.max == UINT32_MAX ? UINT32_MAX : in.max - in.min;
  for (uint32_t count = 0; count < extra && p < n_; ++count) {
    size_t q = p;
    if (static_cast<unsigned char>(text_[p]) < 0x80) {
      if (!cls.Matches(static_cast<unsigned char>(text_[p]))) break;
      ++q;
    } else if (!cls.Matches(Decode(&q))) {
      break;
    }
    if (memo && MemoTestAndSet(in.memo_slot, q)) break;
    p = q;
  }
  if (p > min_pos) stack_.push_back({FrameKind::kRepeatGreedy, pc, p, min_pos});
  steps_ += p - min_pos;
  *pos = p;
  return true;
}

// Consumes one character of cls at *pos.
inline bool Matcher::Step(const ClassMatcher& cls, size_t* pos) const {
  if (*pos >= n_) return false;
  const auto b = static_cast<unsigned char>(text_[*pos]);
  if (b < 0x80) {
    if (!cls.Matches(b)) return false;
    ++*pos;
    return true;
  }
  size_t q = *pos;
  if (!cls.Matches(Decode(&q))) return false;
  *pos = q;
  return true;
}

// Consumes up to `limit` characters of cls from p; returns the end.
size_t Matcher::ConsumeRun(const ClassMatcher& cls, size_t p, uint32_t limit) {
  const size_t start = p;
  for (uint32_t count = 0; count < limit && p < n_; ++count) {
    const auto b = static_cast<unsigned char>(text_[p]);
    if (b < 0x80) {
      if (!cls.Matches(b)) break;
      ++p;
      continue;
    }
    size_t q = p;
    if (!cls.Matches(Decode(&q))) break;
    p = q;
  }
  steps_ += p - start;  // long runs count as work, so that rescanning them triggers memoization
  return p;
}

// An unbounded possessive run in memo mode. Every run that passes through a position ends at the
// same place, so a position marked by an earlier arrival means this run's continuation already
// failed.
bool Matcher::PossessiveMemo(const Inst& in, size_t p, size_t* pos) {
  const ClassMatcher& cls = prog_.classes[in.arg];
  if (MemoTestAndSet(in.memo_slot, p)) return false;
  const size_t start = p;
  while (Step(cls, &p)) {
    if (MemoTestAndSet(in.memo_slot, p)) return false;
  }
  steps_ += p - start;
  *pos = p;
  return true;
}

bool Matcher::ExecRepeat(uint32_t pc, size_t* pos) {
  const Inst& in = prog_.insts[pc];
  const ClassMatcher& cls = prog_.classes[in.arg];
  size_t p = *pos;
  for (uint32_t count = 0; count < in.min; ++count) {
    if (!Step(cls, &p)) return false;
  }
  switch (in.mode) {
    case RepeatMode::kPossessive:
      if (memo_on_ && in.memoizable) return PossessiveMemo(in, p, pos);
      *pos = ConsumeRun(cls, p, in.max == UINT32_MAX ? UINT32_MAX : in.max - in.min);
      return true;
    case RepeatMode::kGreedy:
      return RepeatGreedy(pc, p, pos);
    case RepeatMode::kLazy:
      if (memo_on_ && in.memoizable && MemoTestAndSet(in.memo_slot, p)) return false;
      if (in.min < in.max) stack_.push_back({FrameKind::kRepeatLazy, pc, p, in.min});
      *pos = p;
      return true;
  }
  return false;
}

// Pops frames until one offers an alternative; sets *pc and *pos to it. False when none is left
// (or the work budget ran out, which sets give_up_).
bool Matcher::Backtrack(uint32_t* pc, size_t* pos) {
  while (!stack_.empty()) {
    if (++steps_ > budget_) {
      give_up_ = true;
      return false;
    }
    Frame& f = stack_.back();
    switch (f.kind) {
      case FrameKind::kBranch: {
        const Frame copy = f;
        stack_.pop_back();
        if (TakeBranch(copy.pc, copy.aux, copy.pos, pc)) {
          *pos = copy.pos;
          return true;
        }
        break;
      }
      case FrameKind::kRepeatGreedy: {
        const size_t back = unicode::PrevCodepointStart(text_, f.pos, f.aux);
        *pc = f.pc + 1;
        *pos = back;
        if (back <= f.aux) {
          stack_.pop_back();
        } else {
          f.pos = back;
        }
        return true;
      }
      case FrameKind::kRepeatLazy: {
        const Inst& in = prog_.insts[f.pc];
        size_t p = f.pos;
        const bool more = Step(prog_.classes[in.arg], &p) &&
                          !(memo_on_ && in.memoizable && MemoTestAndSet(in.memo_slot, p));
        if (!more) {
          stack_.pop_back();
          break;
        }
        *pc = f.pc + 1;
        *pos = p;
        f.pos = p;
        if (++f.aux >= in.max) stack_.pop_back();
        return true;
      }
      case FrameKind::kAtomicBarrier:
        stack_.pop_back();
        break;
      case FrameKind::kLookBarrier: {
        const Frame copy = f;
        stack_.pop_back();
        const Inst& begin = prog_.insts[copy.pc];
        if (begin.negate) {  // the body failed: the negative lookaround holds
          *pc = begin.x;
          *pos = copy.pos;
          return true;
        }
        break;
      }
      case FrameKind::kRestore:
        scratch_.registers[f.pc] = f.aux;
        stack_.pop_back();
        break;
    }
  }
  return false;
}

// Removes the frames above the innermost barrier and the barrier itself; returns the barrier.
static Frame CutToBarrier(FrameStack& stack) {
  while (!stack.empty()) {
    const Frame f = stack.back();
    stack.pop_back();
    if (f.kind == FrameKind::kAtomicBarrier || f.kind == FrameKind::kLookBarrier) return f;
  }
  return Frame{FrameKind::kAtomicBarrier, 0, 0, 0};  // unreachable: barriers are balanced
}

// At the end of a lookaround body, whose barrier is the innermost one on the stack.
bool Matcher::EndLook(uint32_t* pc, size_t* pos) {
  size_t b = stack_.size();
  while (b > 0 && stack_[b - 1].kind != FrameKind::kLookBarrier &&
         stack_[b - 1].kind != FrameKind::kAtomicBarrier) {
    --b;
  }
  if (b == 0) return false;  // unreachable: barriers are balanced
  const Frame barrier = stack_[b - 1];
  const Inst& begin = prog_.insts[barrier.pc];
  // A lookbehind body must end where the lookaround began; otherwise retry inside the body.
  if (begin.behind && *pos != barrier.pos) return false;
  stack_.shrink_to(b - 1);  // lookarounds are atomic
  if (begin.negate) return false;
  *pc = begin.x;
  *pos = barrier.pos;
  return true;
}

// Called when steps_ reaches check_at_: gives up past the budget; asks for memoization when the
// search's work outgrows the text it has covered; else schedules the next check.
RunResult Matcher::CheckLimits(size_t pos) {
  if (steps_ > budget_ || stack_.size() > kMaxStackFrames) return RunResult::kGiveUp;
  const uint64_t covered = pos > search_start_ ? pos - search_start_ : 0;
  const uint64_t allowed = kMemoBaseSteps + kMemoStepsPerByte * covered;
  check_at_ = std::min(budget_, steps_ + kCheckInterval);
  if (!memo_on_ && prog_.num_memo_slots > 0) {
    if (steps_ - search_steps0_ > allowed) return RunResult::kNeedMemo;
    check_at_ = std::min(check_at_, search_steps0_ + allowed);
  }
  return RunResult::kNoMatch;
}

RunResult Matcher::Run(size_t start, size_t* end) {
  stack_.clear();
  uint32_t pc = 0;
  size_t pos = start;
  while (true) {
    if (++steps_ > check_at_) {
      const RunResult r = CheckLimits(pos);
      if (r != RunResult::kNoMatch) return r;
    }
    const Inst& in = prog_.insts[pc];
    bool ok = true;
    switch (in.op) {
      case Op::kSet:
        ok = Step(prog_.classes[in.arg], &pos);
        ++pc;
        break;
      case Op::kRepeat:
        ok = ExecRepeat(pc, &pos);
        ++pc;
        break;
      case Op::kAlt:
        ok = !(memo_on_ && in.memoizable && MemoTestAndSet(in.memo_slot, pos)) &&
             TakeBranch(pc, 0, pos, &pc);
        break;
      case Op::kJump:
        pc = in.x;
        break;
      case Op::kMatch:
        *end = pos;
        return RunResult::kMatch;
      case Op::kAssert:
        ok = Assert(static_cast<AssertKind>(in.arg), pos);
        ++pc;
        break;
      case Op::kAtomicBegin:
        stack_.push_back({FrameKind::kAtomicBarrier, pc, pos, 0});
        ++pc;
        break;
      case Op::kAtomicEnd:
        CutToBarrier(stack_);
        ++pc;
        break;
      case Op::kLookBegin: {
        size_t from = pos;
        bool reachable = true;
        for (uint32_t k = 0; in.behind && k < in.arg; ++k) {
          if (from == 0) {
            reachable = false;
            break;
          }
          from = unicode::PrevCodepointStart(text_, from, 0);
        }
        if (!reachable) {  // not enough text before: the body cannot match
          ok = in.negate;
          pc = in.x;
          break;
        }
        stack_.push_back({FrameKind::kLookBarrier, pc, pos, 0});
        pos = from;
        ++pc;
        break;
      }
      case Op::kLookEnd:
        ok = EndLook(&pc, &pos);
        break;
      case Op::kMark:
        stack_.push_back({FrameKind::kRestore, in.arg, pos, scratch_.registers[in.arg]});
        scratch_.registers[in.arg] = pos;
        ++pc;
        break;
      case Op::kCheckEmpty:
        pc = pos == scratch_.registers[in.arg] ? in.x : pc + 1;
        break;
    }
    if (!ok && !Backtrack(&pc, &pos)) return give_up_ ? RunResult::kGiveUp : RunResult::kNoMatch;
  }
}

RunResult Matcher::Search(size_t from, Regex::Match* match) {
  search_start_ = from;
  if (memo_on_ && memo_width_ < n_ - memo_base_ + 1 && from - memo_base_ > memo_width_ / 2) {
    EnableMemo(from);  // slide the window: positions before `from` are never visited again
  }
  search_steps0_ = steps_;
  check_at_ = steps_;
  const ClassMatcher* start_class =
      prog_.start_class >= 0 ? &prog_.classes[prog_.start_class] : nullptr;
  size_t s = from;
  while (true) {
    if (start_class != nullptr) {  // a match needs a first character from start_class
      while (s < n_) {
        const auto b = static_cast<unsigned char>(text_[s]);
        if (b < 0x80) {
          if (start_class->Matches(b)) break;
          ++s;
          continue;
        }
        size_t next = s;
        if (start_class->Matches(Decode(&next))) break;
        s = next;
      }
      if (s >= n_) return RunResult::kNoMatch;
    }
    size_t end = 0;
    RunResult r = Run(s, &end);
    if (r == RunResult::kNeedMemo) {
      EnableMemo(s);
      r = Run(s, &end);
    }
    if (r == RunResult::kMatch) {
      *match = {s, end};
      return r;
    }
    if (r == RunResult::kGiveUp || s >= n_) return r;
    Decode(&s);
  }
}

bool Matcher::Next(Regex::Match* out) {
  while (!done_ && last_end_ <= n_) {
    Regex::Match m{0, 0};
    if (Search(last_end_, &m) != RunResult::kMatch) break;
    if (m.begin == m.end && have_last_ && last_match_end_ == m.end) {
      // onig's FindMatches: an empty match right where the previous one ended is skipped and the
      // search start moves one character on.
      if (last_end_ >= n_) break;
      Decode(&last_end_);
      continue;
    }
    if (memo_on_) MemoClearColumn(m.end);
    last_end_ = m.end;
    last_match_end_ = m.end;
    have_last_ = true;
    *out = m;
    return true;
  }
  done_ = true;
  return false;
}

}  // namespace

// One live cursor: its buffers and its matcher. Pooled per thread (the matcher is rebuilt for
// every cursor; the buffers are kept).
struct CursorState {
  Scratch scratch;
  std::optional<Matcher> matcher;
};

namespace {

// Free states of this thread. A cursor takes one for its lifetime, so nested cursors (a split
// inside a split) each have their own.
struct CursorPool {
  std::vector<std::unique_ptr<CursorState>> free;
};
thread_local CursorPool tls_pool;

}  // namespace
}  // namespace internal

RegexCursor::RegexCursor(const Regex& regex, std::string_view text) {
  if (regex.program_ == nullptr) return;
  auto& pool = internal::tls_pool.free;
  if (pool.empty()) {
    state_ = new internal::CursorState();
  } else {
    state_ = pool.back().release();
    pool.pop_back();
  }
  state_->matcher.emplace(*regex.program_, text, state_->scratch);
}

RegexCursor::~RegexCursor() {
  if (state_ == nullptr) return;
  state_->matcher.reset();
  // Keep the pooled buffers small after a pathological search.
  internal::Scratch& scratch = state_->scratch;
  if (scratch.stack.capacity() > (size_t{1} << 16))
    std::vector<internal::Frame>().swap(scratch.stack);
  if (scratch.memo.capacity() > (size_t{1} << 16)) std::vector<uint64_t>().swap(scratch.memo);
  internal::tls_pool.free.emplace_back(state_);
}

bool RegexCursor::Next(Regex::Match* m) { return state_ != nullptr && state_->matcher->Next(m); }

void Regex::FindAll(std::string_view text, std::vector<Match>& out) const {
  RegexCursor cursor(*this, text);
  for (Match m; cursor.Next(&m);) out.push_back(m);
}

}  // namespace astr::regex
