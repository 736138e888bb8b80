// What one render of a template may spend. A chat template comes with the model file and every
// chat request runs it, so a hostile one must end with an error, not take the process down:
//   - steps: units of work (statements, expressions, loop iterations, and work in proportion to
//     the values and text a builtin copies or scans), which bound the time a render takes;
//   - bytes: the memory held at once by the values (str, list, tuple, dict, iterators, namespaces,
//     callables) and by the output text the render builds;
//   - depth: the nesting of the containers a template builds, which bounds the C++ stack of every
//     recursive walker (repr, ==, <, tojson, hashing, and the destruction of a nested value).
//
// A RenderBudget belongs to one render; RenderBudget::Scope makes it the current budget of the
// thread, which value construction (value.cc) charges without the budget being threaded through
// every Value factory. Bytes are charged when a value is built and given back when it is freed, so
// the temporaries a template creates and drops cost nothing lasting. Exceeding a limit marks the
// budget exhausted; the interpreter checks that at every step and fails the render. Operations
// whose result can be much larger than their inputs (`*`, join, replace, widths, indent, tojson)
// call ReserveBytes() before they allocate, so that no single operation even tries to allocate
// past the budget.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

#include "common/base/status.h"

namespace astr::jinja {

// Defaults of RenderOptions and InterpreterOptions; docs/chat_templates.md ("Errors and limits")
// gives the measurements behind them.
// Steps of one render. The costliest steps (a loop iteration, case mapping, sorting) take up to
// about 1 us on a slow core, so a render that runs out ends within 1-2 s; a 1000-message
// conversation takes at most 128,000 with the shared templates.
inline constexpr int64_t kDefaultMaxSteps = 2'000'000;
// Bytes the values and output buffers of one render may hold at once; a 1000-message, 1 MB
// conversation peaks at 2 MB with the shared templates.
inline constexpr size_t kDefaultMaxBytes = size_t{64} << 20;
// Length of the rendered text (8 million tokens or so, more than any model's context). Output
// buffers count against kDefaultMaxBytes as well.
inline constexpr size_t kDefaultMaxOutputBytes = size_t{32} << 20;
// Container nesting a template may build; JSON inputs are at most kMaxJsonDepth (128) deep.
inline constexpr int kDefaultMaxDepth = 256;
// Copying this many bytes of values costs one step: about what a step of evaluation costs in
// time (0.5 us), so that a builtin working on large values stays inside the time bound.
inline constexpr size_t kBytesPerStep = 1024;
// Work of one item in a builtin's loop (map, select, sort, tojson, repr, ...), and of decoding,
// case-mapping or escaping one byte of text, in bytes-copied equivalents (measured: 25-120 ns an
// item, 5-40 ns a byte of text, against 0.5 ns a byte copied).
inline constexpr size_t kItemWork = 128;
inline constexpr size_t kTextByteWork = 32;

class RenderBudget {
 public:
  RenderBudget(int64_t max_steps, size_t max_bytes, int max_depth)
      : max_steps_(max_steps), max_bytes_(max_bytes), max_depth_(max_depth) {}
  RenderBudget(const RenderBudget&) = delete;
  RenderBudget& operator=(const RenderBudget&) = delete;

  // The budget of the render running on this thread; nullptr outside a render.
  static RenderBudget* Current() { return current_; }

  // Makes `budget` the thread's current budget while it lives (and restores the previous one).
  class Scope {
   public:
    explicit Scope(RenderBudget* budget) : previous_(current_) { current_ = budget; }
    ~Scope() { current_ = previous_; }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    RenderBudget* previous_;
  };

  // Spends `n` steps; false once the budget is exhausted (by steps or by anything else).
  bool Step(int64_t n = 1) {
    steps_ += n;
    if (steps_ > max_steps_) Exhaust(Limit::kSteps);
    return ok();
  }
  // Work proportional to copying or scanning `bytes` of values (fractions of a step add up).
  bool StepBytes(size_t bytes) {
    work_bytes_ += bytes;
    if (work_bytes_ < kBytesPerStep) return ok();
    int64_t steps = static_cast<int64_t>(work_bytes_ / kBytesPerStep);
    work_bytes_ %= kBytesPerStep;
    return Step(steps);
  }
  // Bookkeeping of an allocation that has been made; exhausts the budget when the live bytes
  // pass the limit (the caller's next step then fails).
  void Charge(size_t bytes) {
    live_bytes_ += bytes;
    if (live_bytes_ > peak_bytes_) peak_bytes_ = live_bytes_;
    if (live_bytes_ > max_bytes_) Exhaust(Limit::kBytes);
    StepBytes(bytes);
  }
  void Release(size_t bytes) { live_bytes_ -= bytes; }
  // Before allocating `bytes` more: ResourceExhausted, and the budget exhausted, when they would
  // not fit or the budget is exhausted already.
  Status Reserve(size_t bytes);
  // A container built `depth` levels deep; exhausts the budget past the limit.
  void CheckDepth(int depth) {
    if (depth > max_depth_) Exhaust(Limit::kDepth);
  }

  bool ok() const { return exhausted_ == Limit::kNone; }
  // OK, or ResourceExhausted naming the limit that was passed.
  Status status() const;

  int64_t steps() const { return steps_; }
  size_t live_bytes() const { return live_bytes_; }
  size_t peak_bytes() const { return peak_bytes_; }
  size_t max_bytes() const { return max_bytes_; }
  int max_depth() const { return max_depth_; }
  // The depth a namespace counts for in the containers holding it. Its attributes change after
  // it is put in a container, so it cannot report their depth; instead they must stay below this
  // (Interpreter::Assign and namespace() refuse deeper values).
  int namespace_depth() const { return max_depth_ / 2; }
  // ResourceExhausted: a namespace attribute would hold a value of depth `depth`.
  Status NamespaceTooDeep(int depth) const;
  // Bytes that may still be allocated.
  size_t remaining_bytes() const { return live_bytes_ < max_bytes_ ? max_bytes_ - live_bytes_ : 0; }

 private:
  enum class Limit { kNone, kSteps, kBytes, kDepth };
  void Exhaust(Limit limit) {
    if (exhausted_ == Limit::kNone) exhausted_ = limit;
  }

  static inline thread_local RenderBudget* current_ = nullptr;
  const int64_t max_steps_;
  const size_t max_bytes_;
  const int max_depth_;
  int64_t steps_ = 0;
  size_t work_bytes_ = 0;  // work below one step, carried over
  size_t live_bytes_ = 0;
  size_t peak_bytes_ = 0;
  Limit exhausted_ = Limit::kNone;
};

// RenderBudget::Current()->Reserve(bytes); outside a render, the default byte limit applies.
Status ReserveBytes(size_t bytes);
// Work of scanning or copying `bytes` (of text or values) outside any allocation, charged to the
// current render's budget; a no-op outside a render.
inline void SpendBytes(size_t bytes) {
  if (RenderBudget* budget = RenderBudget::Current()) budget->StepBytes(bytes);
}
inline void SpendItems(size_t items) { SpendBytes(items * kItemWork); }
inline void SpendText(size_t bytes) { SpendBytes(bytes * kTextByteWork); }
// OK, or the error of the current render's exhausted budget. Builtins that loop over a value
// without evaluating template expressions check it per item, so that they stop early too.
inline Status BudgetStatus() {
  RenderBudget* budget = RenderBudget::Current();
  return budget == nullptr || budget->ok() ? OkStatus() : budget->status();
}
// Text builders whose output can be several times their input (escaping, repr, json) check their
// growth every 64 KiB: false (and the budget exhausted) once the text would not fit.
class GrowthCheck {
 public:
  bool Fits(size_t size) {
    if (size < next_check_) return true;
    next_check_ = size + (size_t{64} << 10);
    return ReserveBytes(size).ok();
  }

 private:
  size_t next_check_ = size_t{64} << 10;
};
// `a * b` bytes, saturating instead of overflowing (sizes computed from template integers).
size_t SaturatingMul(size_t a, size_t b);

namespace internal {

// An object and the bytes it was charged; freeing it gives them back to its budget.
template <typename T>
struct Charged {
  template <typename... Args>
  explicit Charged(RenderBudget* b, Args&&... args)
      : value(std::forward<Args>(args)...), budget(b) {}
  ~Charged() { budget->Release(bytes); }
  T value;
  RenderBudget* budget;
  size_t bytes = 0;
};

}  // namespace internal

// std::make_shared<T>(args...) whose object (plus `heap_bytes` it owns outside itself) counts
// against the current render's budget until the last reference goes; a plain make_shared outside
// a render. Values never outlive their render (Interpreter::Render frees every frame and value it
// made before it returns), so the budget outlives every object charged to it.
template <typename T, typename... Args>
std::shared_ptr<T> MakeCharged(size_t heap_bytes, Args&&... args) {
  RenderBudget* budget = RenderBudget::Current();
  if (budget == nullptr) return std::make_shared<T>(std::forward<Args>(args)...);
  auto holder = std::make_shared<internal::Charged<T>>(budget, std::forward<Args>(args)...);
  // The shared_ptr control block shares the allocation; count it as two pointers and two counts.
  holder->bytes = sizeof(internal::Charged<T>) + 4 * sizeof(void*) + heap_bytes;
  budget->Charge(holder->bytes);
  return std::shared_ptr<T>(holder, &holder->value);
}

}  // namespace astr::jinja
