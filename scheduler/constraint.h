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

// Compiles constraints against one vocabulary; thread-safe. Compiled constraints are cached by
// their text (XGrammar's cache, bounded by cache_bytes), so repeated schemas compile once.
class ConstraintCompiler {
 public:
  static StatusOr<std::unique_ptr<ConstraintCompiler>> Create(const ConstraintVocab& vocab,
                                                              int threads, int64_t cache_bytes);
  ~ConstraintCompiler();

  // INVALID_ARGUMENT naming `field` and what XGrammar reports (with its position for grammars
  // and regexes) when `spec` does not compile.
  StatusOr<std::shared_ptr<const CompiledConstraint>> Compile(const ConstraintSpec& spec,
                                                              std::string_view field) const;

  int32_t vocab_size() const { return vocab_size_; }
  // Compilations done and time spent in them (cache hits included: they take microseconds).
  int64_t compiles() const { return compiles_.load(std::memory_order_relaxed); }
  int64_t compile_ns() const { return compile_ns_.load(std::memory_order_relaxed); }

 private:
  struct Impl;
  explicit ConstraintCompiler(std::unique_ptr<Impl> impl, int32_t vocab_size);
  std::unique_ptr<Impl> impl_;
  int32_t vocab_size_;
  mutable std::atomic<int64_t> compiles_{0};
  mutable std::atomic<int64_t> compile_ns_{0};
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
