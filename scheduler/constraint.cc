#include "scheduler/constraint.h"

#include <dlpack/dlpack.h>
#include <xgrammar/xgrammar.h>

#include <chrono>
#include <exception>
#include <nlohmann/json.hpp>
#include <optional>

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

struct ConstraintCompiler::Impl {
  explicit Impl(xgrammar::TokenizerInfo info, int threads, int64_t cache_bytes)
      : compiler(info, threads, /*cache_enabled=*/true, cache_bytes) {}
  xgrammar::GrammarCompiler compiler;
};

ConstraintCompiler::ConstraintCompiler(std::unique_ptr<Impl> impl, int32_t vocab_size)
    : impl_(std::move(impl)), vocab_size_(vocab_size) {}

ConstraintCompiler::~ConstraintCompiler() = default;

StatusOr<std::unique_ptr<ConstraintCompiler>> ConstraintCompiler::Create(
    const ConstraintVocab& vocab, int threads, int64_t cache_bytes) {
  if (vocab.tokens.empty()) return InvalidArgumentError("constraint vocabulary is empty");
  try {
    xgrammar::TokenizerInfo info(vocab.tokens, ToXgrammar(vocab.encoding),
                                 static_cast<int>(vocab.tokens.size()), vocab.stop_ids,
                                 vocab.add_prefix_space);
    return std::unique_ptr<ConstraintCompiler>(
        new ConstraintCompiler(std::make_unique<Impl>(std::move(info), threads, cache_bytes),
                               static_cast<int32_t>(vocab.tokens.size())));
  } catch (const std::exception& e) {
    return InternalError("constraint vocabulary: " + CleanMessage(e.what()));
  }
}

StatusOr<std::shared_ptr<const CompiledConstraint>> ConstraintCompiler::Compile(
    const ConstraintSpec& spec, std::string_view field) const {
  const auto start = std::chrono::steady_clock::now();
  std::optional<xgrammar::CompiledGrammar> grammar;
  try {
    switch (spec.kind) {
      case ConstraintSpec::Kind::kJsonSchema:
        // Its JSON first, for an error that names the byte (1-based).
        try {
          (void)nlohmann::json::parse(spec.text);
        } catch (const nlohmann::json::parse_error& e) {
          return InvalidArgumentError(std::string(field) + ": not valid JSON at byte " +
                                      std::to_string(e.byte) + " (" + CleanJsonError(e.what()) +
                                      ")");
        } catch (const nlohmann::json::exception& e) {  // out_of_range: 1e999
          return InvalidArgumentError(std::string(field) + ": not valid JSON (" +
                                      CleanJsonError(e.what()) + ")");
        }
        grammar = impl_->compiler.CompileJSONSchema(spec.text, /*any_whitespace=*/false);
        break;
      case ConstraintSpec::Kind::kJsonObject:
        grammar = impl_->compiler.CompileJSONSchema(R"({"type": "object"})",
                                                    /*any_whitespace=*/false);
        break;
      case ConstraintSpec::Kind::kRegex:
        grammar = impl_->compiler.CompileRegex(spec.text);
        break;
      case ConstraintSpec::Kind::kGrammar:
        grammar = impl_->compiler.CompileGrammar(spec.text, "root");
        break;
      case ConstraintSpec::Kind::kChoice: {
        if (spec.choices.empty()) {
          return InvalidArgumentError(std::string(field) + " must list at least one choice");
        }
        std::string ebnf = "root ::= ";
        for (size_t i = 0; i < spec.choices.size(); ++i) {
          if (spec.choices[i].empty()) {
            return InvalidArgumentError(std::string(field) + "[" + std::to_string(i) +
                                        "] must not be empty");
          }
          if (i > 0) ebnf += " | ";
          ebnf += EbnfLiteral(spec.choices[i]);
        }
        grammar = impl_->compiler.CompileGrammar(ebnf, "root");
        break;
      }
    }
  } catch (const std::exception& e) {
    return InvalidArgumentError(std::string(field) + ": " + CleanMessage(e.what()));
  }
  compiles_.fetch_add(1, std::memory_order_relaxed);
  compile_ns_.fetch_add(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count(),
      std::memory_order_relaxed);
  return std::shared_ptr<const CompiledConstraint>(
      std::make_shared<CompiledConstraint>(std::move(*grammar), vocab_size_));
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
