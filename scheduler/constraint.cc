#include "scheduler/constraint.h"

#include <dlpack/dlpack.h>
#include <glog/logging.h>
#include <malloc.h>
#include <xgrammar/xgrammar.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <list>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <unordered_map>

#include "scheduler/compile_sandbox.h"

namespace astr::sched {

class CompiledConstraint {
 public:
  explicit CompiledConstraint(xgrammar::CompiledGrammar grammar, int32_t vocab_size)
      : grammar_(std::move(grammar)), vocab_size_(vocab_size) {}
  const xgrammar::CompiledGrammar& grammar() const { return grammar_; }
  int32_t vocab_size() const { return vocab_size_; }

 private:
  xgrammar::CompiledGrammar grammar_;
  int32_t vocab_size_;
};

namespace {

xgrammar::VocabType ToXgrammar(VocabEncoding e) {
  switch (e) {
    case VocabEncoding::kByteLevel:
      return xgrammar::VocabType::BYTE_LEVEL;
    case VocabEncoding::kByteFallback:
      return xgrammar::VocabType::BYTE_FALLBACK;
    case VocabEncoding::kRaw:
      break;
  }
  return xgrammar::VocabType::RAW;
}

// An EBNF string literal that reads back as `s` (valid UTF-8).
std::string EbnfLiteral(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "\"";
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20 || c == 0x7f) {
      out += "\\u00";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += ch;
    }
  }
  out += '"';
  return out;
}

// XGrammar's messages end with a newline or carry a "[hh:mm:ss] file:line:" prefix from its
// logging: the part a client needs is after the last ": " of that prefix.
std::string CleanMessage(std::string msg) {
  // XGRAMMAR_CHECK's "Check failed: (cond) is false: " says nothing to a client.
  if (const size_t at = msg.find(" is false: ");
      at != std::string::npos && msg.find("Check failed") < at) {
    msg = msg.substr(at + 11);
  }
  while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
  if (!msg.empty() && msg.front() == '[') {
    const size_t close = msg.find("] ");
    if (close != std::string::npos) {
      const size_t colon = msg.find(": ", close);
      if (colon != std::string::npos) msg = msg.substr(colon + 2);
    }
  }
  return msg;
}

// "[json.exception.parse_error.101] parse error at line 1, column 16: syntax error ..." -> the
// part after the position.
std::string CleanJsonError(std::string msg) {
  const size_t at = msg.find(": ");
  if (at != std::string::npos) msg = msg.substr(at + 2);
  return msg;
}

}  // namespace

int64_t DefaultCompileMemoryBytes(int32_t vocab_size) {
  return std::clamp<int64_t>(int64_t{vocab_size} * 4096, int64_t{128} << 20, int64_t{1} << 30);
}

std::string ConstraintKey(const ConstraintSpec& spec) {
  std::string key(1, static_cast<char>('0' + static_cast<int>(spec.kind)));
  if (spec.kind == ConstraintSpec::Kind::kChoice) {
    for (const std::string& c : spec.choices) {
      key += std::to_string(c.size());
      key += ':';
      key += c;
    }
  } else {
    key += spec.text;
  }
  return key;
}

namespace {

// enum and const values anywhere in a schema (without recursion: a schema may nest deeply).
size_t CountEnumValues(const nlohmann::json& schema) {
  size_t count = 0;
  std::vector<const nlohmann::json*> todo{&schema};
  while (!todo.empty()) {
    const nlohmann::json* node = todo.back();
    todo.pop_back();
    if (node->is_object()) {
      for (auto it = node->begin(); it != node->end(); ++it) {
        if (it.key() == "enum" && it->is_array()) count += it->size();
        if (it.key() == "const") ++count;
        if (it->is_structured()) todo.push_back(&*it);
      }
    } else if (node->is_array()) {
      for (const nlohmann::json& item : *node) {
        if (item.is_structured()) todo.push_back(&item);
      }
    }
  }
  return count;
}

std::string Mib(int64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

}  // namespace

struct ConstraintCompiler::Impl {
  Impl(xgrammar::TokenizerInfo info_in, const ConstraintCompilerOptions& o)
      : info(std::move(info_in)),
        threads(std::max(1, o.threads)),
        cache_limit(o.cache_bytes),
        compiler(info, threads, /*cache_enabled=*/false) {}

  // The compile itself, on `c` (the scheduler's compiler, or a child's own).
  xgrammar::CompiledGrammar Run(xgrammar::GrammarCompiler& c, const ConstraintSpec& spec) const {
    switch (spec.kind) {
      case ConstraintSpec::Kind::kJsonSchema:
        return c.CompileJSONSchema(spec.text, /*any_whitespace=*/false);
      case ConstraintSpec::Kind::kJsonObject:
        return c.CompileJSONSchema(R"({"type": "object"})", /*any_whitespace=*/false);
      case ConstraintSpec::Kind::kRegex:
        return c.CompileRegex(spec.text);
      case ConstraintSpec::Kind::kGrammar:
        return c.CompileGrammar(spec.text, "root");
      case ConstraintSpec::Kind::kChoice:
        break;
    }
    std::string ebnf = "root ::= ";
    for (size_t i = 0; i < spec.choices.size(); ++i) {
      if (i > 0) ebnf += " | ";
      ebnf += EbnfLiteral(spec.choices[i]);
    }
    return c.CompileGrammar(ebnf, "root");
  }

  std::shared_ptr<const CompiledConstraint> Find(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = index.find(key);
    if (it == index.end()) return nullptr;
    lru.splice(lru.begin(), lru, it->second);  // most recent first
    return it->second->compiled;
  }

  // Keeps `compiled` (charged `bytes`), dropping the least recent entries past the limit.
  void Insert(const std::string& key, std::shared_ptr<const CompiledConstraint> compiled,
              int64_t bytes) {
    std::vector<std::shared_ptr<const CompiledConstraint>> dropped;  // freed outside the lock
    {
      std::lock_guard<std::mutex> lock(mu);
      if (index.count(key) != 0 || (cache_limit >= 0 && bytes > cache_limit)) return;
      lru.push_front(Entry{key, std::move(compiled), bytes});
      index[key] = lru.begin();
      held += bytes;
      while (cache_limit >= 0 && held > cache_limit) {
        Entry& last = lru.back();
        held -= last.bytes;
        index.erase(last.key);
        dropped.push_back(std::move(last.compiled));
        lru.pop_back();
      }
    }
    if (!dropped.empty()) {
      dropped.clear();
      malloc_trim(0);  // what the dropped grammars held goes back to the system
    }
  }

  const xgrammar::TokenizerInfo info;
  const int threads;
  const int64_t cache_limit;
  xgrammar::GrammarCompiler compiler;  // no cache of its own: ours below counts real bytes

  struct Entry {
    std::string key;
    std::shared_ptr<const CompiledConstraint> compiled;
    int64_t bytes;
  };
  std::mutex mu;
  std::list<Entry> lru;                                               // guarded by mu
  std::unordered_map<std::string, std::list<Entry>::iterator> index;  // guarded by mu
  int64_t held = 0;                                                   // guarded by mu

  mutable std::atomic<int64_t> compiles{0}, compile_ns{0}, cache_hits{0}, over_time{0},
      over_memory{0}, too_large{0}, cancelled{0}, refused_busy{0};
};

ConstraintCompiler::ConstraintCompiler(std::unique_ptr<Impl> impl, int32_t vocab_size,
                                       CompileBudget budget)
    : impl_(std::move(impl)), vocab_size_(vocab_size), budget_(budget) {}

ConstraintCompiler::~ConstraintCompiler() = default;

StatusOr<std::unique_ptr<ConstraintCompiler>> ConstraintCompiler::Create(
    const ConstraintVocab& vocab, const ConstraintCompilerOptions& options) {
  if (vocab.tokens.empty()) return InvalidArgumentError("constraint vocabulary is empty");
  if (options.budget.time.count() <= 0 || options.budget.memory_bytes < 0) {
    return InvalidArgumentError("constraint compile budget must be positive");
  }
  CompileBudget budget = options.budget;
  const auto vocab_size = static_cast<int32_t>(vocab.tokens.size());
  if (budget.memory_bytes == 0) budget.memory_bytes = DefaultCompileMemoryBytes(vocab_size);
  try {
    xgrammar::TokenizerInfo info(vocab.tokens, ToXgrammar(vocab.encoding), vocab_size,
                                 vocab.stop_ids, vocab.add_prefix_space);
    return std::unique_ptr<ConstraintCompiler>(new ConstraintCompiler(
        std::make_unique<Impl>(std::move(info), options), vocab_size, budget));
  } catch (const std::exception& e) {
    return InternalError("constraint vocabulary: " + CleanMessage(e.what()));
  }
}

Status ConstraintCompiler::Check(const ConstraintSpec& spec, std::string_view field) const {
  const std::string f(field);
  auto too_large = [&](const std::string& what) {
    impl_->too_large.fetch_add(1, std::memory_order_relaxed);
    return FieldError(f, ": " + what);
  };
  switch (spec.kind) {
    case ConstraintSpec::Kind::kChoice: {
      if (spec.choices.empty()) return FieldError(f, " must list at least one choice");
      if (spec.choices.size() > kMaxChoices) {
        return too_large(std::to_string(spec.choices.size()) + " choices, at most " +
                         std::to_string(kMaxChoices));
      }
      size_t bytes = 0;
      for (size_t i = 0; i < spec.choices.size(); ++i) {
        if (spec.choices[i].empty()) {
          return FieldError(f + "[" + std::to_string(i) + "]", " must not be empty");
        }
        bytes += spec.choices[i].size();
      }
      if (bytes > kMaxChoiceBytes) {
        return too_large(std::to_string(bytes) + " bytes of choices, at most " +
                         std::to_string(kMaxChoiceBytes));
      }
      return OkStatus();
    }
    case ConstraintSpec::Kind::kJsonObject:
      return OkStatus();
    case ConstraintSpec::Kind::kRegex:
      if (spec.text.size() > kMaxRegexBytes) {
        return too_large(std::to_string(spec.text.size()) + " bytes, at most " +
                         std::to_string(kMaxRegexBytes));
      }
      return OkStatus();
    case ConstraintSpec::Kind::kGrammar:
    case ConstraintSpec::Kind::kJsonSchema:
      break;
  }
  if (spec.text.size() > kMaxConstraintTextBytes) {
    return too_large(std::to_string(spec.text.size()) + " bytes, at most " +
                     std::to_string(kMaxConstraintTextBytes));
  }
  if (spec.kind != ConstraintSpec::Kind::kJsonSchema) return OkStatus();
  // Its JSON first, for an error that names the byte (1-based).
  nlohmann::json schema;
  try {
    schema = nlohmann::json::parse(spec.text);
  } catch (const nlohmann::json::parse_error& e) {
    return FieldError(f, ": not valid JSON at byte " + std::to_string(e.byte) + " (" +
                             CleanJsonError(e.what()) + ")");
  } catch (const nlohmann::json::exception& e) {  // out_of_range: 1e999
    return FieldError(f, ": not valid JSON (" + CleanJsonError(e.what()) + ")");
  }
  if (const size_t values = CountEnumValues(schema); values > kMaxSchemaEnumValues) {
    return too_large(std::to_string(values) + " enum and const values, at most " +
                     std::to_string(kMaxSchemaEnumValues));
  }
  return OkStatus();
}

std::shared_ptr<const CompiledConstraint> ConstraintCompiler::Lookup(
    const ConstraintSpec& spec) const {
  auto hit = impl_->Find(ConstraintKey(spec));
  if (hit != nullptr) impl_->cache_hits.fetch_add(1, std::memory_order_relaxed);
  return hit;
}

StatusOr<std::shared_ptr<const CompiledConstraint>> ConstraintCompiler::Compile(
    const ConstraintSpec& spec, std::string_view field, const std::atomic<bool>* cancelled) const {
  const std::string key = ConstraintKey(spec);
  if (auto hit = impl_->Find(key)) {
    impl_->cache_hits.fetch_add(1, std::memory_order_relaxed);
    return hit;
  }
  ASTR_RETURN_IF_ERROR(Check(spec, field));
  const std::string f(field);
  const auto start = std::chrono::steady_clock::now();
  // The trial: in a child process, killed past half the time or the memory. (Without a sandbox,
  // in an ASan build, the compile below is the only one.)
  const Impl& impl = *impl_;
  SandboxResult trial;
  trial.outcome = SandboxResult::Outcome::kOk;
  if (kSandboxAvailable) {
    trial = RunInSandbox(
        [&impl, &spec]() {
          SandboxWork w;
          xgrammar::GrammarCompiler own(impl.info, impl.threads, /*cache_enabled=*/false);
          const int64_t before = HeapInUseBytes();
          xgrammar::CompiledGrammar g = impl.Run(own, spec);
          w.retained_bytes = HeapInUseBytes() - before;  // <= 0: no count (see below)
          return w;
        },
        SandboxLimits{budget_.time / 2, budget_.memory_bytes}, cancelled);
  }
  using Outcome = SandboxResult::Outcome;
  switch (trial.outcome) {
    case Outcome::kOk:
      break;
    case Outcome::kFailed:
      return FieldError(f, ": " + CleanMessage(trial.error));
    case Outcome::kOverTime:
      impl_->over_time.fetch_add(1, std::memory_order_relaxed);
      return FieldError(f, ": compiling it takes longer than the budget of " +
                               std::to_string(budget_.time.count()) +
                               " ms (--grammar-max-compile-ms)");
    case Outcome::kOverMemory:
      impl_->over_memory.fetch_add(1, std::memory_order_relaxed);
      return FieldError(f, ": compiling it needs more memory than the budget of " +
                               Mib(budget_.memory_bytes) + " (--grammar-max-compile-mb)");
    case Outcome::kCancelled:
      impl_->cancelled.fetch_add(1, std::memory_order_relaxed);
      return Status(StatusCode::kCancelled, f + ": the compile was cancelled");
    case Outcome::kCrashed:
      LOG(WARNING) << f << ": " << trial.error;
      return FieldError(f, ": the grammar compiler failed on it (" + trial.error + ")");
    case Outcome::kNoSandbox:
      LOG(WARNING) << "constraint compile: " << trial.error;
      return ResourceExhaustedError(f + ": cannot compile now (" + trial.error + ")");
  }
  // The trial fit: the same compile here, bounded by what the trial took.
  std::optional<xgrammar::CompiledGrammar> grammar;
  try {
    grammar = impl_->Run(impl_->compiler, spec);
  } catch (const std::exception& e) {  // the trial compiled it: only without a sandbox
    return FieldError(f, ": " + CleanMessage(e.what()));
  }
  const int64_t charge = trial.retained_bytes > 0
                             ? trial.retained_bytes
                             : static_cast<int64_t>(grammar->MemorySizeBytes());
  auto compiled = std::make_shared<const CompiledConstraint>(std::move(*grammar), vocab_size_);
  malloc_trim(0);  // the compile's scratch goes back to the system
  impl_->compiles.fetch_add(1, std::memory_order_relaxed);
  impl_->compile_ns.fetch_add(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count(),
      std::memory_order_relaxed);
  impl_->Insert(key, compiled, std::max<int64_t>(charge, 1));
  return std::shared_ptr<const CompiledConstraint>(std::move(compiled));
}

void ConstraintCompiler::CountBusy() const {
  impl_->refused_busy.fetch_add(1, std::memory_order_relaxed);
}

ConstraintCompiler::Stats ConstraintCompiler::stats() const {
  constexpr auto kRelaxed = std::memory_order_relaxed;
  Stats s;
  s.compiles = impl_->compiles.load(kRelaxed);
  s.compile_ns = impl_->compile_ns.load(kRelaxed);
  s.cache_hits = impl_->cache_hits.load(kRelaxed);
  s.over_time = impl_->over_time.load(kRelaxed);
  s.over_memory = impl_->over_memory.load(kRelaxed);
  s.too_large = impl_->too_large.load(kRelaxed);
  s.cancelled = impl_->cancelled.load(kRelaxed);
  s.refused_busy = impl_->refused_busy.load(kRelaxed);
  std::lock_guard<std::mutex> lock(impl_->mu);
  s.cache_bytes = impl_->held;
  return s;
}

struct ConstraintMatcher::Impl {
  explicit Impl(std::shared_ptr<const CompiledConstraint> c)
      : compiled(std::move(c)), matcher(compiled->grammar()) {}
  std::shared_ptr<const CompiledConstraint> compiled;
  xgrammar::GrammarMatcher matcher;
};

ConstraintMatcher::ConstraintMatcher(std::shared_ptr<const CompiledConstraint> compiled)
    : impl_(std::make_unique<Impl>(std::move(compiled))) {}
ConstraintMatcher::~ConstraintMatcher() = default;
ConstraintMatcher::ConstraintMatcher(ConstraintMatcher&&) noexcept = default;
ConstraintMatcher& ConstraintMatcher::operator=(ConstraintMatcher&&) noexcept = default;

int32_t ConstraintMatcher::vocab_size() const { return impl_->compiled->vocab_size(); }

void ConstraintMatcher::FillMask(std::span<uint32_t> mask) {
  int64_t shape = static_cast<int64_t>(mask.size());
  DLTensor t{};
  t.data = mask.data();
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = 1;
  t.dtype = xgrammar::GetBitmaskDLType();
  t.shape = &shape;
  t.strides = nullptr;
  t.byte_offset = 0;
  impl_->matcher.FillNextTokenBitmask(&t);
}

bool ConstraintMatcher::Accept(int32_t token) { return impl_->matcher.AcceptToken(token); }

bool ConstraintMatcher::Terminated() const { return impl_->matcher.IsTerminated(); }

}  // namespace astr::sched
