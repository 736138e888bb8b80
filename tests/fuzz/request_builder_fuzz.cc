// Fuzz target: the gRPC front's request validation and tokenization
// (scheduler/front/request_builder.h): the input is a serialized astr.v1.GenerateRequest (inputs
// that do not parse are skipped), built against the served model of served_model.h: every field
// checked, text tokenized, chat rendered with the template and tokenized, constraints compiled.
// The same bytes are also tried as a TokenizeRequest (the Tokenize RPC's input).
#include <cstddef>
#include <cstdint>
#include <optional>

#include "astr/v1/generate.pb.h"
#include "scheduler/front/request_builder.h"
#include "tests/fuzz/fuzz_support.h"
#include "tests/fuzz/served_model.h"

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** argv) {
  astr::fuzz::InitQuietLogging((*argv)[0]);
  (void)astr::fuzz::FuzzServedModel();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace astr;
  const front::ServedModel& model = fuzz::FuzzServedModel();
  if (v1::GenerateRequest request; request.ParseFromArray(data, static_cast<int>(size))) {
    (void)front::BuildRequest(request, model, fuzz::FuzzRequestLimits(), /*drawn_seed=*/7,
                              std::nullopt);
  }
  if (v1::TokenizeRequest request; request.ParseFromArray(data, static_cast<int>(size))) {
    (void)front::TokenizeRequestInput(model, request);
  }
  return 0;
}
