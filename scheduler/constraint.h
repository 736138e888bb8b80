// Constrained decoding (structured outputs, docs/structured.md): what a sample's text must match,
// compiled once per distinct constraint, and the per-sample matcher that says which tokens may come
// next. Built on XGrammar's C++ core (JSON schema, regex and EBNF grammars compiled against the
// model's vocabulary into token masks); nothing of XGrammar shows in this header.
//
// The scheduler owns the matchers: a sample's matcher has accepted exactly the tokens in its
// `generated` list, so a preempted or moved sample needs nothing replayed, and the worker only
// applies the mask that comes with a sampling entry (StepEntry.allowed_tokens).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/base/status.h"

namespace astr::sched {

struct ConstraintSpec {
  enum class Kind {
    kJsonSchema,  // text: a JSON schema
    kJsonObject,  // any JSON object
    kRegex,       // text: a regular expression the whole output matches
    kGrammar,     // text: an EBNF grammar (XGrammar's dialect, GBNF-like), rule "root" starts
    kChoice,      // choices: the output is exactly one of them
  };
  Kind kind = Kind::kJsonObject;
  std::string text;
  std::vector<std::string> choices;
};

// How the tokenizer's stored token strings become bytes (the compiler decodes them).
enum class VocabEncoding {
  kRaw,           // stored strings are the bytes
  kByteLevel,     // GPT-2 byte-to-unicode mapping ("Ġworld")
  kByteFallback,  // SentencePiece: "▁" is a space, "<0x0A>" a byte
};

struct ConstraintVocab {
  // One entry per logits row (the model's vocab size): the token's stored string, "" for special
  // tokens and rows the tokenizer has no token for (those are never allowed, except stop ids).
  std::vector<std::string> tokens;
  VocabEncoding encoding = VocabEncoding::kRaw;
  bool add_prefix_space = false;  // SentencePiece models prefix the first word with a space
  // Tokens that end a sample (the model's EOS ids): allowed once the constraint is complete.
  std::vector<int32_t> stop_ids;
};

class CompiledConstraint;

// Equal for specs that compile to the same constraint (the cache's key): the kind, then the text
// or the choices, each length-prefixed.
std::string ConstraintKey(const ConstraintSpec& spec);

// What one compile may cost (docs/structured.md "Limits"). A compile runs first as a trial in a
// child process (scheduler/compile_sandbox.h) that is killed when it passes half the time or the
// memory; one that fits is then compiled in the scheduler itself, the same work now known to be
// bounded, so that an accepted compile also answers within `time`.
struct CompileBudget {
  std::chrono::milliseconds time{5000};
  int64_t memory_bytes = 0;  // 0: DefaultCompileMemoryBytes(the vocabulary's size)
};
// 4 KiB per vocabulary entry, within [128 MiB, 1 GiB]: a compiled grammar's token masks grow with
// the vocabulary (192 MiB for a 49k vocabulary).
int64_t DefaultCompileMemoryBytes(int32_t vocab_size);

// Sizes refused before anything compiles: each costs more than a compile budget allows on any
// vocabulary (docs/structured.md "Limits").
inline constexpr size_t kMaxConstraintTextBytes = size_t{1} << 20;  // json_schema, grammar
inline constexpr size_t kMaxRegexBytes = size_t{64} << 10;
inline constexpr size_t kMaxChoices = 16384;
inline constexpr size_t kMaxChoiceBytes = size_t{1} << 20;  // all choices together
inline constexpr size_t kMaxSchemaEnumValues = 16384;       // enum and const values, all together

struct ConstraintCompilerOptions {
  int threads = 2;                           // threads of one compile's token masks
  int64_t cache_bytes = int64_t{256} << 20;  // compiled constraints kept (-1: unbounded)
  CompileBudget budget{};
};

// Compiles constraints against one vocabulary; thread-safe. Compiled constraints are cached by
// their text (LRU, charged with the heap each really holds, bounded by cache_bytes), so repeated
// schemas compile once.
class ConstraintCompiler {
 public:
  static StatusOr<std::unique_ptr<ConstraintCompiler>> Create(
      const ConstraintVocab& vocab, const ConstraintCompilerOptions& options);
  ~ConstraintCompiler();

  // The size limits above: INVALID_ARGUMENT naming `field`. Compile checks them too; a caller
  // that queues compiles checks them first, for an answer at once.
  Status Check(const ConstraintSpec& spec, std::string_view field) const;
  // The cached compile of `spec`, or null.
  std::shared_ptr<const CompiledConstraint> Lookup(const ConstraintSpec& spec) const;
  // INVALID_ARGUMENT naming `field` and what XGrammar reports (with its position for grammars and
  // regexes) when `spec` does not compile, or naming the budget it went over; CANCELLED once
  // *cancelled (may be null) is true. Blocks the calling thread for at most the budget's time.
  StatusOr<std::shared_ptr<const CompiledConstraint>> Compile(
      const ConstraintSpec& spec, std::string_view field,
      const std::atomic<bool>* cancelled = nullptr) const;

  int32_t vocab_size() const { return vocab_size_; }

  // Counters (metrics).
  struct Stats {
    int64_t compiles = 0;    // compiled (not from the cache)
    int64_t compile_ns = 0;  // wall time of those compiles, trial included
    int64_t cache_hits = 0;
    int64_t over_time = 0;    // refused: the time budget
    int64_t over_memory = 0;  // refused: the memory budget
    int64_t too_large = 0;    // refused: a size limit, before compiling
    int64_t cancelled = 0;
    int64_t refused_busy = 0;  // refused: the client had too many compiles waiting (CountBusy)
    int64_t cache_bytes = 0;   // held by the cache now
  };
  Stats stats() const;
  // A compile its caller refused to queue (the client's share was full): counted with the rest.
  void CountBusy() const;

 private:
  struct Impl;
  explicit ConstraintCompiler(std::unique_ptr<Impl> impl, int32_t vocab_size, CompileBudget budget);
  std::unique_ptr<Impl> impl_;
  int32_t vocab_size_;
  CompileBudget budget_;
};

// Words of a token mask over `vocab_size` tokens: bit (t % 32) of word t / 32 allows token t.
inline int32_t ConstraintMaskWords(int32_t vocab_size) { return (vocab_size + 31) / 32; }

// One sample's position in its constraint. Not thread-safe (the scheduler loop owns it).
class ConstraintMatcher {
 public:
  explicit ConstraintMatcher(std::shared_ptr<const CompiledConstraint> compiled);
  ~ConstraintMatcher();
  ConstraintMatcher(ConstraintMatcher&&) noexcept;
  ConstraintMatcher& operator=(ConstraintMatcher&&) noexcept;

  // The tokens allowed next (mask.size() == ConstraintMaskWords(vocab_size)).
  void FillMask(std::span<uint32_t> mask);
  // Advances past `token`; false when the constraint does not allow it (the state is unchanged).
  bool Accept(int32_t token);
  // A stop token was accepted: the sample is complete (a constraint that is complete allows only
  // stop tokens, so this matters when EOS does not end the sample: ignore_eos).
  bool Terminated() const;
  int32_t vocab_size() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace astr::sched
