// The model the front-end targets (request_builder_fuzz, openai_body_fuzz) build requests
// against, made once: stories260K's tokenizer (a SentencePiece vocabulary of 512 ids) with the
// Qwen2.5 chat template of the shared test data (one with tools), a constraint compiler over that
// vocabulary, and a context of 1024 tokens, as the scheduler would serve it.
#pragma once

#include "scheduler/front/request_builder.h"

namespace astr::fuzz {

// Exits with kSkipExitCode (fuzz_support.h) when the shared files are missing.
const front::ServedModel& FuzzServedModel();
// The scheduler's default limits (scheduler flags), as a server runs by default.
const front::RequestLimits& FuzzRequestLimits();

}  // namespace astr::fuzz
