// Turns a public v1::GenerateRequest into a scheduler request: validates every field (errors are
// INVALID_ARGUMENT naming the field path, e.g. "sampling.top_p must be in (0, 1], got 0"),
// tokenizes or renders the input, applies the documented defaults, and keeps what the output side
// needs (stop strings, detokenization options) next to the scheduler request.
//
// Nothing here touches gRPC: the HTTP front and the tests call it the same way.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "astr/v1/generate.pb.h"
#include "common/base/status.h"
#include "common/chat/chat_template.h"
#include "common/model/generation_defaults.h"
#include "common/text/tokenizer/tokenizer.h"
#include "scheduler/constraint.h"
#include "scheduler/scheduler.h"

namespace astr::front {

// What the front end knows about the served model. Built once at start; read by every call.
struct ServedModel {
  std::shared_ptr<const tok::Tokenizer> tokenizer;  // never null
  // Null when the model has no chat template; chat input is then INVALID_ARGUMENT (a request
  // this server can never serve) and `no_chat_template_reason` says why.
  std::shared_ptr<const chat::ChatTemplate> chat_template;
  std::string no_chat_template_reason;
  int32_t vocab_size = 0;              // rows of the output projection (worker Info)
  int32_t max_context_tokens = 0;      // prompt + generated tokens of one sequence (worker Info)
  std::vector<int32_t> eos_token_ids;  // the tokenizer's and the model file's, deduplicated
  // Sampling defaults of requests that leave a field unset (the scheduler's --generation-config).
  model::GenerationDefaults generation_defaults;
  // Compiles structured-output constraints against this vocabulary (MakeConstraintCompiler);
  // null: a constraint is INVALID_ARGUMENT ("this server serves no constraints").
  std::shared_ptr<const sched::ConstraintCompiler> constraints;
};

// The constraint compiler of `tokenizer` over vocab_size logits rows (ids the tokenizer lacks are
// never allowed), with `stop_ids` ending a constrained sample, compiling under `options` (threads,
// cache, budget).
StatusOr<std::unique_ptr<sched::ConstraintCompiler>> MakeConstraintCompiler(
    const tok::Tokenizer& tokenizer, int32_t vocab_size, const std::vector<int32_t>& stop_ids,
    const sched::ConstraintCompilerOptions& options = {});

// Per-request limits the operator sets (scheduler flags) or that bound memory per request.
struct RequestLimits {
  int32_t max_n = 16;
  int32_t max_stop_strings = 16;
  int32_t max_stop_string_bytes = 1024;
  int32_t max_logit_bias = 1024;      // entries of sampling.logit_bias
  int32_t max_stop_token_ids = 1024;  // entries of sampling.stop_token_ids
  int32_t max_request_id_bytes = 256;
};

// What the output side (detokenizer, stop strings, response assembly) needs per request.
struct OutputOptions {
  std::vector<std::string> stop;  // non-empty, valid UTF-8
  bool include_stop_str_in_output = false;
  bool skip_special_tokens = true;
  int32_t min_tokens = 0;  // stop strings do not count before this many tokens
  bool return_logprobs = false;
  int32_t top_logprobs = 0;
  bool return_sampling_mask = false;  // one SamplingMask per generated token
  bool return_prompt_ids = false;
  // Prompt scoring: the scores of prompt positions [logprob_start, prompt size) are returned;
  // 0 = none (GenerateRequest.logprob_start unset).
  int32_t logprob_start = 0;
};

struct BuiltRequest {
  sched::SchedRequest sched;  // prompt, resolved sampling params, max_tokens, n, priority
  OutputOptions output;
  uint64_t seed = 0;  // the request's seed or the drawn one (also in sched.sampling.seed)
};

// A tokenized prompt and, for chat input, the rendered template text.
struct Prompt {
  std::vector<int32_t> ids;
  std::string rendered;  // chat input only
};

// Tokenizes a text prompt (add_special: BOS etc.; parse_special: special tokens written in the
// text become their ids, else they are plain text). `field` names the input in errors ("text").
// A prompt longer than model.max_context_tokens is INVALID_ARGUMENT, found without tokenizing all
// of it: at once from its byte length when the tokenizer bounds bytes per token
// (Tokenizer::MinTokens), else as soon as tokenization passes the context.
StatusOr<Prompt> TokenizeText(const ServedModel& model, const std::string& text, bool add_special,
                              const std::string& field, bool parse_special = true);
// Renders a conversation with the model's chat template and tokenizes it without adding special
// tokens (the template writes them) and with special-token parsing on (the template's role
// markers are special tokens written as text). `field` names the input in errors ("chat"). The
// context limit is as for TokenizeText.
StatusOr<Prompt> TokenizeChat(const ServedModel& model, const v1::ChatInput& chat,
                              const std::string& field);
// The input of a Tokenize call: text (add_special_tokens and parse_special_tokens default true)
// or chat (parse_special_tokens = false is INVALID_ARGUMENT: see TokenizeChat).
StatusOr<Prompt> TokenizeRequestInput(const ServedModel& model, const v1::TokenizeRequest& request);

// Tools one chat request may declare (chat.tools_json; OpenAI allows 128). Each is rendered into
// the prompt, and a required or named tool choice compiles them all into one constraint.
inline constexpr size_t kMaxTools = 1024;
// chat.tools_json, when set, is a JSON array of at most kMaxTools (the check TokenizeChat makes,
// for a caller that wants it before a compile).
Status CheckTools(const v1::GenerateRequest& request);

// A request's constraint to compile, and the field path its errors name
// ("sampling.constraint.json_schema").
struct ConstraintRequest {
  sched::ConstraintSpec spec;
  std::string field;
};
// sampling.constraint checked as far as it can be without compiling (a kind is set, its text is
// not empty, no min_tokens, the server serves constraints); nullopt when there is none.
StatusOr<std::optional<ConstraintRequest>> ConstraintOf(const v1::SamplingParameters& sampling,
                                                        const ServedModel& model);

// Validates and resolves `request`. `drawn_seed` is used when sampling.seed is unset; `deadline`
// is the call's (none when the client set none). The request id is used as given (the caller
// makes one when it is empty). `compiled` is the request's constraint compiled already
// (GenerateService::PrepareConstraint); when null, a constraint is compiled here, on the calling
// thread.
StatusOr<BuiltRequest> BuildRequest(const v1::GenerateRequest& request, const ServedModel& model,
                                    const RequestLimits& limits, uint64_t drawn_seed,
                                    std::optional<sched::Clock::time_point> deadline,
                                    std::shared_ptr<const sched::CompiledConstraint> compiled = {});

}  // namespace astr::front
