// The OpenAI-compatible API's JSON, independent of HTTP: request bodies of /v1/completions and
// /v1/chat/completions become v1::GenerateRequests (the same message the gRPC front takes, so both
// fronts share BuildRequest's validation, tokenization, templates, stop strings and
// detokenizer), and the output of admitted calls becomes OpenAI's response and stream-chunk
// JSON. Errors are OpenAI's shape and name the OpenAI field (`param`), also for errors the shared
// validation finds (ApiErrorFromStatus maps its field paths back). See docs/http.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "astr/v1/generate.pb.h"
#include "common/base/status.h"
#include "common/text/tokenizer/tokenizer.h"
#include "scheduler/front/output_processor.h"
#include "scheduler/front/tool_calls.h"

namespace astr::front::openai {

enum class Endpoint { kCompletions, kChat };

// An error answered as {"error": {"message", "type", "param", "code"}}.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // empty: null
  std::string code;   // empty: null
  int retry_after_s = 0;  // > 0: a Retry-After header (429 / 503)

  std::string Json() const;
};

// A parsed request: one GenerateRequest per prompt (completions take a list; chat has one).
struct ApiRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;  // as sent; empty when absent
  std::vector<v1::GenerateRequest> prompts;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool echo = false;           // completions: the prompt's text precedes each choice's
  // Logprobs: completions `logprobs: k` (k alternatives) or chat `logprobs: true` with
  // `top_logprobs: k`. -1: not asked.
  int32_t logprobs = -1;
  bool return_token_ids = false;        // vLLM: choices[].token_ids, prompt_token_ids
  bool return_weight_versions = false;  // astr: choices[].weight_versions
  // astr: each token's sampling mask in its logprobs entry ("sampling_mask"; needs logprobs).
  bool return_sampling_mask = false;
  bool max_completion_tokens = false;   // the limit was sent as max_completion_tokens (errors)
  std::string request_id;               // body request_id or X-Request-Id; may be empty
  // Where the constraint came from: "response_format", "structured_outputs", or "" (none).
  std::string constraint_param;
  // Chat tools (docs/tools.md): `tools` given, `tool_choice` (auto unless told; none when there
  // are no tools), the function a named choice names, and the format tool calls are parsed in
  // from the output (set by the front: the model's for auto, kForced / kNamed for required / a
  // named function, whose constraint ParseRequest sets).
  enum class ToolChoice { kNone, kAuto, kRequired, kNamed };
  bool has_tools = false;
  ToolChoice tool_choice = ToolChoice::kNone;
  std::string tool_name;
  ToolCallFormat tool_format = ToolCallFormat::kNone;
};

// Parses and checks the body's JSON types and the fields only this API has; the rest of the
// validation happens in BuildRequest (through GenerateService::Admit). `request_id_header`: the
// X-Request-Id header, used when the body has no request_id.
struct ParseResult {
  std::optional<ApiRequest> request;
  ApiError error;
};
ParseResult ParseRequest(Endpoint endpoint, const std::string& body,
                         const std::string& request_id_header);

// POST /tokenize: {"prompt": text} or {"messages": [...]} (with add_generation_prompt, tools,
// chat_template_kwargs as in chat requests), add_special_tokens (default true for a prompt),
// return_token_strs. POST /detokenize: {"tokens": [ids]}.
struct TokenizeParse {
  std::optional<v1::TokenizeRequest> request;
  std::string model;
  bool return_token_strs = false;
  ApiError error;
};
TokenizeParse ParseTokenize(const std::string& body);
struct DetokenizeParse {
  std::optional<v1::DetokenizeRequest> request;
  std::string model;
  ApiError error;
};
DetokenizeParse ParseDetokenize(const std::string& body);

// An error of the shared validation or admission as this API answers it: INVALID_ARGUMENT and
// FAILED_PRECONDITION are 400 with `param` the OpenAI name of the field the message starts with
// (e.g. "sampling.top_p must be ..." -> param "top_p", message "top_p must be ..."); a request
// that can never fit the KV pool is 400 too; RESOURCE_EXHAUSTED otherwise 429 and UNAVAILABLE 503
// (both with Retry-After); DEADLINE_EXCEEDED 504; others 500.
ApiError ApiErrorFromStatus(const Status& status, const ApiRequest& request);

// One choice's output accumulated from deltas (unary responses, and one delta of a stream).
struct ChoiceOutput {
  std::string text;
  std::vector<int32_t> token_ids;
  std::vector<float> logprobs;
  std::vector<std::vector<TokenLogprob>> top;
  std::vector<SamplingMask> masks;  // when return_sampling_mask, one per token
  std::vector<VersionSpan> versions;
  bool finished = false;
  v1::FinishReason finish_reason = v1::FINISH_REASON_UNSPECIFIED;
  std::optional<std::string> stop_string;
  std::optional<int32_t> stop_token_id;

  void Append(const SampleDelta& d);
};

// The text of every token as logprobs show it: its bytes as they appear inside a text (a
// SentencePiece "▁the" is " the", not the "the" a decode of that token alone gives), special
// tokens written out, byte tokens as their byte. May be invalid UTF-8 (a token holding part of a
// character): the JSON shows U+FFFD in `token` and the exact bytes in `bytes`.
class TokenTexts {
 public:
  explicit TokenTexts(const tok::Tokenizer& tokenizer);
  const std::string& operator[](int32_t id) const;

 private:
  std::vector<std::string> texts_;
  std::string empty_;
};

// What every response of one request shares.
struct ResponseContext {
  const TokenTexts* texts = nullptr;
  const ApiRequest* request = nullptr;
  std::string id;     // "cmpl-..." / "chatcmpl-..."
  std::string model;  // the served name
  int64_t created = 0;
  uint64_t seed = 0;  // of the first prompt's request
};

// Per prompt: what echo and the prompt's ids need.
struct PromptInfo {
  std::vector<int32_t> ids;
  std::string text;                 // the prompt's text (echo): as sent, or decoded from its ids
  std::vector<float> logprobs;      // echo with logprobs: positions 1.. (position 0 has none)
  std::vector<std::vector<TokenLogprob>> top;
};

struct UsageTotals {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;
};

// "stop", "length" or "abort" (EOS and stop strings / ids are all "stop" to OpenAI).
const char* FinishReasonName(v1::FinishReason reason);

// The whole unary response. choices[i] is choice index i (prompt-major: prompt p, sample j is
// p * n + j); prompts[p] is prompt p.
std::string UnaryResponse(const ResponseContext& ctx, const std::vector<ChoiceOutput>& choices,
                          const std::vector<PromptInfo>& prompts, int32_t n,
                          const UsageTotals& usage);

// One stream event ("data: {...}\n\n") for new output of choice `index`. `first`: the choice's
// first event (chat: the assistant role; completions with echo: the prompt's text first).
// `sent_bytes`: text of this choice already streamed (the echoed prompt included), where the
// delta's text starts (completions' text_offset). `tools` (chat with a tool-call format): the
// delta's text as ToolCallStream split it: its content and tool_calls deltas (OpenAI's shape:
// index, id, type and name first, then argument fragments); finish_reason "tool_calls" once the
// choice made a call.
struct ToolChunk {
  std::string content;
  std::vector<ToolCallDelta> deltas;
  bool any_call = false;  // this choice has made a call (in this chunk or before)
};
std::string StreamChunk(const ResponseContext& ctx, int32_t index, const ChoiceOutput& delta,
                        const PromptInfo* echo_prompt, bool first, size_t sent_bytes = 0,
                        const ToolChunk* tools = nullptr);
// The final usage event (stream_options.include_usage): choices [] and usage.
std::string UsageChunk(const ResponseContext& ctx, const UsageTotals& usage);
// A mid-stream failure: "data: {"error": ...}\n\n".
std::string ErrorEvent(const ApiError& error);
inline constexpr const char* kDoneEvent = "data: [DONE]\n\n";


}  // namespace astr::front::openai
