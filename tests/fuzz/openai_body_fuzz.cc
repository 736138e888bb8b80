// Fuzz target: the OpenAI-compatible API's body parsers (scheduler/front/openai_api.h). Input: one
// byte picks the endpoint (completions, chat completions, /tokenize, /detokenize), the rest is the
// JSON body. A body that parses goes on as the HTTP front sends it: each prompt through
// BuildRequest (tokenize prompts through TokenizeRequestInput) against the served model of
// served_model.h, and every error, the parser's or the validation's, is rendered as OpenAI's error
// JSON.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "scheduler/front/openai_api.h"
#include "scheduler/front/request_builder.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/fuzz_support.h"
#include "tests/fuzz/served_model.h"

namespace astr::fuzz {
namespace {

void Generate(front::openai::Endpoint endpoint, const std::string& body) {
  front::openai::ParseResult parsed = front::openai::ParseRequest(endpoint, body, "fuzz-request");
  if (!parsed.request) {
    (void)parsed.error.Json();
    return;
  }
  for (const v1::GenerateRequest& prompt : parsed.request->prompts) {
    auto built = front::BuildRequest(prompt, FuzzServedModel(), FuzzRequestLimits(),
                                     /*drawn_seed=*/7, std::nullopt);
    if (!built.ok()) {
      (void)front::openai::ApiErrorFromStatus(built.status(), *parsed.request).Json();
    }
  }
}

void Tokenize(const std::string& body) {
  front::openai::TokenizeParse parsed = front::openai::ParseTokenize(body);
  if (!parsed.request) {
    (void)parsed.error.Json();
    return;
  }
  (void)front::TokenizeRequestInput(FuzzServedModel(), *parsed.request);
}

void Detokenize(const std::string& body) {
  front::openai::DetokenizeParse parsed = front::openai::ParseDetokenize(body);
  if (!parsed.request) (void)parsed.error.Json();
}

}  // namespace
}  // namespace astr::fuzz

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** argv) {
  astr::fuzz::InitQuietLogging((*argv)[0]);
  (void)astr::fuzz::FuzzServedModel();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace astr;
  fuzz::FuzzInput in(data, size);
  const uint8_t which = in.Byte();
  const std::string body(in.Rest());
  switch (which % 4) {
    case 0:
      fuzz::Generate(front::openai::Endpoint::kCompletions, body);
      break;
    case 1:
      fuzz::Generate(front::openai::Endpoint::kChat, body);
      break;
    case 2:
      fuzz::Tokenize(body);
      break;
    default:
      fuzz::Detokenize(body);
      break;
  }
  return 0;
}
