#include "tests/fuzz/served_model.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "common/base/file_util.h"
#include "tests/fuzz/fuzz_support.h"

namespace astr::fuzz {
namespace {

constexpr int32_t kVocab = 512;     // stories260K's output rows
constexpr int32_t kContext = 1024;  // half its 2048: long prompts are refused early

template <typename T>
T OrDie(StatusOr<T> v, const char* what) {
  if (!v.ok()) {
    std::fprintf(stderr, "fuzz: %s: %s\n", what, v.status().ToString().c_str());
    std::abort();
  }
  return std::move(*v);
}

front::ServedModel* Make() {
  auto* m = new front::ServedModel;
  m->tokenizer = OrDie(tok::Tokenizer::Load(SharedFileOrSkip("models/stories260K.gguf")),
                       "stories260K tokenizer");
  const std::string template_path = SharedFileOrSkip("templates/Qwen-Qwen2.5-7B-Instruct.jinja");
  const std::string source = OrDie(ReadFileToString(template_path), "chat template");
  tok::ChatSpecialTokens tokens;
  tokens.bos = "<s>";
  tokens.eos = "</s>";
  m->chat_template = std::make_shared<chat::ChatTemplate>(
      OrDie(chat::ChatTemplate::FromString(source, tokens, template_path), "chat template"));
  m->vocab_size = kVocab;
  m->max_context_tokens = kContext;
  m->eos_token_ids = {2};
  // A bounded cache: every fuzzed grammar is new, and the process runs for hours.
  m->constraints =
      OrDie(front::MakeConstraintCompiler(*m->tokenizer, kVocab, m->eos_token_ids,
                                          {.threads = 1, .cache_bytes = int64_t{8} << 20}),
            "constraint compiler");
  return m;
}

}  // namespace

const front::ServedModel& FuzzServedModel() {
  static const front::ServedModel* model = Make();
  return *model;
}

const front::RequestLimits& FuzzRequestLimits() {
  static const front::RequestLimits limits;
  return limits;
}

}  // namespace astr::fuzz
