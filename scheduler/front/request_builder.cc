#include "scheduler/front/request_builder.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <utility>

#include "common/base/json_depth.h"
#include "common/base/sampling_params.h"
#include "common/grpc/sampling_proto.h"
#include "common/text/unicode/unicode.h"

namespace astr::front {
namespace {

// GenerateRequest.cache_salt's limit.
constexpr size_t kMaxCacheSaltBytes = 256;

Status Invalid(const std::string& field, const std::string& what) {
  return FieldError(field, " " + what);
}

Status CheckUtf8(const std::string& field, const std::string& s) {
  if (unicode::IsValidUtf8(s)) return OkStatus();
  return FieldError(field, ": invalid UTF-8");
}

Status CheckTokenId(const std::string& field, int32_t id, int32_t vocab_size) {
  if (id >= 0 && id < vocab_size) return OkStatus();
  return FieldError(field, " = " + std::to_string(id) + " is outside the vocabulary [0, " +
                               std::to_string(vocab_size) + ")");
}

// Parses `text` as JSON for `field`; `kind` is "array" or "object".
StatusOr<nlohmann::ordered_json> ParseJson(const std::string& field, const std::string& text,
                                           const char* kind) {
  ASTR_RETURN_IF_ERROR(CheckJsonDepth(text, field));
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    return FieldError(field, ": not valid JSON (byte " + std::to_string(e.byte) + ")");
  } catch (const nlohmann::json::exception& e) {  // out_of_range: a number past the double range
    return FieldError(field, std::string(": not valid JSON (") + e.what() + ")");
  }
  const bool want_array = std::string_view(kind) == "array";
  if (want_array ? !j.is_array() : !j.is_object()) {
    return FieldError(field, std::string(": must be a JSON ") + kind + ", got " + j.type_name());
  }
  return j;
}

// chat.tools_json parsed, at most kMaxTools of them.
StatusOr<nlohmann::ordered_json> ParseTools(const std::string& field, const std::string& text) {
  ASTR_ASSIGN_OR_RETURN(nlohmann::ordered_json tools, ParseJson(field, text, "array"));
  if (tools.size() > kMaxTools) {
    return FieldError(field, ": " + std::to_string(tools.size()) + " tools, at most " +
                                 std::to_string(kMaxTools));
  }
  return tools;
}

StatusOr<nlohmann::ordered_json> ChatMessageJson(const v1::ChatMessage& m,
                                                 const std::string& path) {
  if (m.role().empty()) return FieldError(path + ".role", ": empty");
  ASTR_RETURN_IF_ERROR(CheckUtf8(path + ".role", m.role()));
  ASTR_RETURN_IF_ERROR(CheckUtf8(path + ".content", m.content()));
  ASTR_RETURN_IF_ERROR(CheckUtf8(path + ".name", m.name()));
  ASTR_RETURN_IF_ERROR(CheckUtf8(path + ".tool_call_id", m.tool_call_id()));
  nlohmann::ordered_json msg = {{"role", m.role()}, {"content", m.content()}};
  if (!m.name().empty()) msg["name"] = m.name();
  if (!m.tool_call_id().empty()) msg["tool_call_id"] = m.tool_call_id();
  if (!m.tool_calls_json().empty()) {
    ASTR_ASSIGN_OR_RETURN(msg["tool_calls"],
                          ParseJson(path + ".tool_calls_json", m.tool_calls_json(), "array"));
  }
  return msg;
}

// transformers' continue_final_message: cut the rendering right after the final message's
// content, so that the model continues it instead of starting a new turn.
StatusOr<std::string> CutAfterFinalMessage(std::string rendered, const std::string& content,
                                           const std::string& field) {
  size_t pos = rendered.rfind(content);
  std::string_view final_text = content;
  if (pos == std::string::npos) {  // some templates trim messages; transformers retries stripped
    const size_t b = final_text.find_first_not_of(" \t\n\r");
    final_text = b == std::string_view::npos ? "" : final_text.substr(b);
    final_text = final_text.substr(0, final_text.find_last_not_of(" \t\n\r") + 1);
    pos = rendered.rfind(final_text);
  }
  if (pos == std::string::npos) {
    return FieldError(field + ".continue_final_message",
                      ": the rendered template does not contain "
                      "the final message's content");
  }
  rendered.resize(pos + final_text.size());
  return rendered;
}

Status ValidatePromptIds(const std::vector<int32_t>& ids, const ServedModel& model,
                         const std::string& field) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= model.vocab_size) {
      // The tokenizer and the workers' model disagree: a deployment error, not the client's.
      return FailedPreconditionError(
          field + ": the tokenizer produced id " + std::to_string(ids[i]) +
          " outside the model's vocabulary [0, " + std::to_string(model.vocab_size) + ")");
    }
  }
  return OkStatus();
}

// The text or chat input of a GenerateRequest or TokenizeRequest (their fields share names;
// the caller has checked that one is set). parse_special_tokens = false cannot be honoured for
// chat input: the rendering mixes the template's role markers (which must be parsed) with message
// text, and tokenization cannot tell which is which.
template <typename Request>
StatusOr<Prompt> TextOrChatPrompt(const ServedModel& model, const Request& r) {
  const bool parse_special = !r.has_parse_special_tokens() || r.parse_special_tokens();
  if (r.has_text()) {
    const bool add_special = !r.has_add_special_tokens() || r.add_special_tokens();
    return TokenizeText(model, r.text(), add_special, "text", parse_special);
  }
  if (!parse_special) {
    return FieldError(
        "parse_special_tokens",
        ": false applies to text input only; chat input is rendered by the "
        "chat template, whose role markers are special tokens, and is always tokenized with "
        "special-token parsing on");
  }
  return TokenizeChat(model, r.chat(), "chat");
}

StatusOr<std::vector<int32_t>> PromptOf(const v1::GenerateRequest& r, const ServedModel& model) {
  switch (r.input_case()) {
    case v1::GenerateRequest::kText:
    case v1::GenerateRequest::kChat: {
      ASTR_ASSIGN_OR_RETURN(Prompt p, TextOrChatPrompt(model, r));
      return std::move(p.ids);
    }
    case v1::GenerateRequest::kTokenIds: {
      const auto& ids = r.token_ids().ids();
      if (ids.empty()) return FieldError("token_ids.ids", ": empty");
      for (int i = 0; i < ids.size(); ++i) {
        ASTR_RETURN_IF_ERROR(
            CheckTokenId("token_ids.ids[" + std::to_string(i) + "]", ids[i], model.vocab_size));
      }
      return std::vector<int32_t>(ids.begin(), ids.end());
    }
    case v1::GenerateRequest::INPUT_NOT_SET:
      break;
  }
  return FieldError("input", ": missing (set one of text, token_ids or chat)");
}

// The most prompt tokens worth tokenizing: the context (a prompt of exactly the context is then
// refused by ResolveMaxTokens, which names the exact length). 0 (unknown) means no limit.
size_t PromptTokenLimit(const ServedModel& model) {
  return model.max_context_tokens > 0 ? static_cast<size_t>(model.max_context_tokens) : SIZE_MAX;
}

Status PromptTooLong(const std::string& field, const ServedModel& model, size_t at_least,
                     const std::string& why) {
  return FieldError(field, ": the prompt is at least " + std::to_string(at_least) + " tokens (" +
                               why + ") but the model's context holds " +
                               std::to_string(model.max_context_tokens) + " (prompt + generated)");
}

// Tokenizes `text` up to the context limit; `field` names the input in errors.
StatusOr<std::vector<int32_t>> EncodeWithinContext(const ServedModel& model,
                                                   const std::string& text,
                                                   const tok::EncodeOptions& options,
                                                   const std::string& field) {
  tok::BoundedEncoding e = model.tokenizer->EncodeAtMost(text, PromptTokenLimit(model), options);
  if (e.complete) return std::move(e.ids);
  if (e.from_length) {
    return PromptTooLong(field, model, e.min_tokens,
                         "a lower bound from its " + std::to_string(text.size()) + " bytes");
  }
  return PromptTooLong(field, model, e.min_tokens, "tokenization stopped there");
}

// The generation length: max_tokens checked against the context, or the rest of the context.
StatusOr<int32_t> ResolveMaxTokens(const v1::SamplingParameters& s, int64_t prompt_len,
                                   const ServedModel& model) {
  const int64_t ctx = model.max_context_tokens;
  if (prompt_len >= ctx) {
    return FieldError("input", ": the prompt has " + std::to_string(prompt_len) +
                                   " tokens but the model's context holds " + std::to_string(ctx) +
                                   " (prompt + generated), leaving no room to generate");
  }
  if (!s.has_max_tokens()) {
    const int64_t rest = ctx - prompt_len;
    const auto& preferred = model.generation_defaults.max_tokens;
    return static_cast<int32_t>(preferred ? std::min<int64_t>(*preferred, rest) : rest);
  }
  // max_tokens < 1 is left to ValidateSamplingParams, which names it.
  if (prompt_len + s.max_tokens() > ctx) {
    return FieldError("sampling.max_tokens",
                      ": prompt (" + std::to_string(prompt_len) + " tokens) + max_tokens (" +
                          std::to_string(s.max_tokens()) + ") exceeds the model's context of " +
                          std::to_string(ctx) + " tokens");
  }
  return s.max_tokens();
}

// The request's sampling parameters with the defaults applied (the served model's
// generation_defaults where the request leaves a field unset, else SamplingParams' own) and the
// model's EOS ids, not yet validated.
SamplingParams SamplingParamsOf(const v1::SamplingParameters& s, int32_t max_tokens,
                                const ServedModel& model, uint64_t seed) {
  const model::GenerationDefaults& d = model.generation_defaults;
  SamplingParams p;
  p.temperature = s.has_temperature() ? s.temperature() : d.temperature.value_or(p.temperature);
  p.top_k = s.has_top_k() ? s.top_k() : d.top_k.value_or(p.top_k);
  p.top_p = s.has_top_p() ? s.top_p() : d.top_p.value_or(p.top_p);
  p.min_p = s.has_min_p() ? s.min_p() : d.min_p.value_or(p.min_p);
  p.repetition_penalty =
      s.has_repetition_penalty() ? s.repetition_penalty() : d.repetition_penalty.value_or(1.0f);
  p.frequency_penalty = s.frequency_penalty();
  p.presence_penalty = s.presence_penalty();
  // The model's window goes with its repetition penalty: only when the request sets no penalty.
  const bool own_penalties = s.penalty_window() != 0 || s.has_repetition_penalty() ||
                             s.frequency_penalty() != 0 || s.presence_penalty() != 0;
  p.penalty_window = own_penalties ? s.penalty_window() : d.penalty_window.value_or(0);
  p.logit_bias.insert(s.logit_bias().begin(), s.logit_bias().end());
  p.seed = seed;
  p.stop_token_ids.assign(s.stop_token_ids().begin(), s.stop_token_ids().end());
  p.eos_token_ids = model.eos_token_ids;
  p.ignore_eos = s.ignore_eos();
  p.min_tokens = s.min_tokens();
  p.max_tokens = max_tokens;
  p.return_logprob = s.return_logprobs() || s.top_logprobs() > 0;
  p.logprobs = s.top_logprobs();
  p.logprobs_mode = rpc::LogprobsModeFromProto(s.logprobs_mode());
  p.return_sampling_mask = s.return_sampling_mask();
  return p;
}

// Each id once, in first-seen order: the list goes into every (re)start of every sample on the
// worker stream and is scanned for every token, so repeats (a client may send millions in one
// message) would cost without meaning anything. The ids are valid token ids.
void DropRepeatedIds(std::vector<int32_t>* ids, int32_t vocab_size) {
  if (ids->empty()) return;
  std::vector<bool> seen(static_cast<size_t>(vocab_size), false);
  size_t kept = 0;
  for (int32_t id : *ids) {
    if (seen[id]) continue;
    seen[id] = true;
    (*ids)[kept++] = id;
  }
  ids->resize(kept);
}

// The per-request lists whose size only the limits bound (each entry is also checked against the
// vocabulary): logit_bias, and the distinct stop ids (repeats cost nothing once dropped).
Status CheckListSizes(const v1::SamplingParameters& s, const std::vector<int32_t>& stop_ids,
                      const RequestLimits& limits) {
  if (s.logit_bias_size() > limits.max_logit_bias) {
    return FieldError("sampling.logit_bias", ": " + std::to_string(s.logit_bias_size()) +
                                                 " entries, more than the limit of " +
                                                 std::to_string(limits.max_logit_bias));
  }
  if (stop_ids.size() > static_cast<size_t>(limits.max_stop_token_ids)) {
    return FieldError("sampling.stop_token_ids", ": " + std::to_string(stop_ids.size()) +
                                                     " distinct ids, more than the limit of " +
                                                     std::to_string(limits.max_stop_token_ids));
  }
  return OkStatus();
}

Status ResolveStopStrings(const v1::SamplingParameters& s, const RequestLimits& limits,
                          OutputOptions* output) {
  if (s.stop_size() > limits.max_stop_strings) {
    return FieldError("sampling.stop", ": " + std::to_string(s.stop_size()) +
                                           " stop strings, more than the limit of " +
                                           std::to_string(limits.max_stop_strings));
  }
  for (int i = 0; i < s.stop_size(); ++i) {
    const std::string field = "sampling.stop[" + std::to_string(i) + "]";
    const std::string& stop = s.stop(i);
    if (stop.empty()) return FieldError(field, ": empty");
    if (stop.size() > static_cast<size_t>(limits.max_stop_string_bytes)) {
      return FieldError(field, ": " + std::to_string(stop.size()) +
                                   " bytes, more than the limit of " +
                                   std::to_string(limits.max_stop_string_bytes));
    }
    ASTR_RETURN_IF_ERROR(CheckUtf8(field, stop));
    output->stop.push_back(stop);
  }
  return OkStatus();
}

// logprob_start in [1, prompt size]: position 0 has no logprob (nothing comes before it), and the
// prompt size itself asks for an empty list (a client scoring an empty completion).
Status CheckLogprobStart(const v1::GenerateRequest& r, size_t prompt_len) {
  if (!r.has_logprob_start()) return OkStatus();
  const int64_t start = r.logprob_start();
  if (start >= 1 && start <= static_cast<int64_t>(prompt_len)) return OkStatus();
  return Invalid("logprob_start", "must be in [1, " + std::to_string(prompt_len) +
                                      "] (the prompt has " + std::to_string(prompt_len) +
                                      " tokens; position 0 has no logprob), got " +
                                      std::to_string(start));
}

Status CheckRequestId(const std::string& id, const RequestLimits& limits) {
  if (id.size() > static_cast<size_t>(limits.max_request_id_bytes)) {
    return FieldError("request_id", ": " + std::to_string(id.size()) +
                                        " bytes, more than the limit of " +
                                        std::to_string(limits.max_request_id_bytes));
  }
  return CheckUtf8("request_id", id);
}

}  // namespace

StatusOr<Prompt> TokenizeText(const ServedModel& model, const std::string& text, bool add_special,
                              const std::string& field, bool parse_special) {
  if (text.empty()) return FieldError(field, ": empty");
  ASTR_RETURN_IF_ERROR(CheckUtf8(field, text));
  Prompt p;
  ASTR_ASSIGN_OR_RETURN(
      p.ids,
      EncodeWithinContext(
          model, text, {.add_special_tokens = add_special, .parse_special = parse_special}, field));
  if (p.ids.empty()) return FieldError(field, ": tokenizes to no tokens");
  ASTR_RETURN_IF_ERROR(ValidatePromptIds(p.ids, model, field));
  return p;
}

StatusOr<Prompt> TokenizeChat(const ServedModel& model, const v1::ChatInput& chat,
                              const std::string& field) {
  if (model.chat_template == nullptr) {
    return FieldError(field, ": the model has no chat template (" + model.no_chat_template_reason +
                                 "); send text or token_ids instead");
  }
  if (chat.messages().empty()) return FieldError(field + ".messages", ": empty");
  chat::ChatInputs inputs;
  for (int i = 0; i < chat.messages_size(); ++i) {
    ASTR_ASSIGN_OR_RETURN(auto msg, ChatMessageJson(chat.messages(i), field + ".messages[" +
                                                                          std::to_string(i) + "]"));
    inputs.messages.push_back(std::move(msg));
  }
  if (!chat.tools_json().empty()) {
    ASTR_ASSIGN_OR_RETURN(inputs.tools, ParseTools(field + ".tools_json", chat.tools_json()));
  }
  if (!chat.template_kwargs_json().empty()) {
    ASTR_ASSIGN_OR_RETURN(inputs.extra, ParseJson(field + ".template_kwargs_json",
                                                  chat.template_kwargs_json(), "object"));
  }
  if (chat.has_add_generation_prompt() && chat.add_generation_prompt() &&
      chat.continue_final_message()) {
    return FieldError(field + ".add_generation_prompt",
                      ": cannot be true with "
                      "continue_final_message (the last message is continued, not "
                      "answered)");
  }
  inputs.add_generation_prompt = chat.has_add_generation_prompt() ? chat.add_generation_prompt()
                                                                   : !chat.continue_final_message();
  auto rendered = model.chat_template->Render(inputs);
  if (!rendered.ok()) {
    // A template that runs past its render budget (steps, bytes, nesting) fails the same way
    // every time for these messages: not a transient shortage a client should retry.
    const StatusCode code = rendered.status().code() == StatusCode::kResourceExhausted
                                ? StatusCode::kInvalidArgument
                                : rendered.status().code();
    return Status::FieldError(field, ": " + rendered.status().message(), code);
  }
  Prompt p;
  p.rendered = std::move(*rendered);
  if (chat.continue_final_message()) {
    const std::string& content = chat.messages(chat.messages_size() - 1).content();
    ASTR_ASSIGN_OR_RETURN(p.rendered, CutAfterFinalMessage(std::move(p.rendered), content, field));
  }
  ASTR_ASSIGN_OR_RETURN(
      p.ids, EncodeWithinContext(model, p.rendered,
                                 {.add_special_tokens = false, .parse_special = true}, field));
  if (p.ids.empty()) return FieldError(field, ": the rendered conversation is empty");
  ASTR_RETURN_IF_ERROR(ValidatePromptIds(p.ids, model, field));
  return p;
}

StatusOr<Prompt> TokenizeRequestInput(const ServedModel& model,
                                      const v1::TokenizeRequest& request) {
  if (!request.has_text() && !request.has_chat()) {
    return FieldError("input", ": missing (set text or chat)");
  }
  return TextOrChatPrompt(model, request);
}

Status CheckTools(const v1::GenerateRequest& request) {
  if (!request.has_chat() || request.chat().tools_json().empty()) return OkStatus();
  return ParseTools("chat.tools_json", request.chat().tools_json()).status();
}

StatusOr<std::optional<ConstraintRequest>> ConstraintOf(const v1::SamplingParameters& s,
                                                        const ServedModel& model) {
  if (!s.has_constraint()) return std::optional<ConstraintRequest>();
  const v1::Constraint& c = s.constraint();
  ConstraintRequest r;
  sched::ConstraintSpec& spec = r.spec;
  std::string& field = r.field;
  field = "sampling.constraint";
  switch (c.kind_case()) {
    case v1::Constraint::kJsonSchema:
      spec.kind = sched::ConstraintSpec::Kind::kJsonSchema;
      spec.text = c.json_schema();
      field += ".json_schema";
      break;
    case v1::Constraint::kJsonObject:
      if (!c.json_object()) {
        return Invalid("sampling.constraint.json_object",
                       "must be true when set (unset it for none)");
      }
      spec.kind = sched::ConstraintSpec::Kind::kJsonObject;
      field += ".json_object";
      break;
    case v1::Constraint::kRegex:
      spec.kind = sched::ConstraintSpec::Kind::kRegex;
      spec.text = c.regex();
      field += ".regex";
      break;
    case v1::Constraint::kGrammar:
      spec.kind = sched::ConstraintSpec::Kind::kGrammar;
      spec.text = c.grammar();
      field += ".grammar";
      break;
    case v1::Constraint::kChoice:
      spec.kind = sched::ConstraintSpec::Kind::kChoice;
      spec.choices.assign(c.choice().choices().begin(), c.choice().choices().end());
      field += ".choice.choices";
      break;
    case v1::Constraint::KIND_NOT_SET:
      return Invalid("sampling.constraint",
                     "is set but names no kind (json_schema, json_object, regex, "
                     "grammar or choice)");
  }
  if (spec.kind != sched::ConstraintSpec::Kind::kChoice &&
      spec.kind != sched::ConstraintSpec::Kind::kJsonObject && spec.text.empty()) {
    return FieldError(field, " must not be empty");
  }
  if (s.min_tokens() > 0) {
    return Invalid("sampling.min_tokens",
                   "cannot be combined with a constraint (its end may come first)");
  }
  if (model.constraints == nullptr) {
    return FieldError(field, ": this server serves no constraints");
  }
  return std::optional<ConstraintRequest>(std::move(r));
}

StatusOr<std::unique_ptr<sched::ConstraintCompiler>> MakeConstraintCompiler(
    const tok::Tokenizer& tokenizer, int32_t vocab_size, const std::vector<int32_t>& stop_ids,
    const sched::ConstraintCompilerOptions& options) {
  sched::ConstraintVocab vocab;
  vocab.tokens.resize(static_cast<size_t>(vocab_size));
  bool byte_tokens = false;
  for (int32_t id = 0; id < vocab_size && id < tokenizer.vocab_size(); ++id) {
    if (tokenizer.IsSpecial(id)) continue;  // "": never allowed (stop ids apart)
    vocab.tokens[static_cast<size_t>(id)] = tokenizer.IdToToken(id);
    byte_tokens = byte_tokens || tokenizer.IsByteFallbackToken(id);
  }
  const std::string& kind = tokenizer.kind();
  if (kind.find("byte-level") != std::string::npos) {
    vocab.encoding = sched::VocabEncoding::kByteLevel;
  } else if (kind.rfind("SentencePiece", 0) == 0 || byte_tokens) {
    vocab.encoding = sched::VocabEncoding::kByteFallback;
    vocab.add_prefix_space = kind.rfind("SentencePiece", 0) == 0;
  }
  for (int32_t id : stop_ids) {
    if (id >= 0 && id < vocab_size) vocab.stop_ids.push_back(id);
  }
  return sched::ConstraintCompiler::Create(vocab, options);
}

StatusOr<BuiltRequest> BuildRequest(const v1::GenerateRequest& request, const ServedModel& model,
                                    const RequestLimits& limits, uint64_t drawn_seed,
                                    std::optional<sched::Clock::time_point> deadline,
                                    std::shared_ptr<const sched::CompiledConstraint> compiled) {
  ASTR_RETURN_IF_ERROR(CheckRequestId(request.request_id(), limits));
  if (request.n() < 0 || request.n() > limits.max_n) {
    return Invalid("n", "must be in [0, " + std::to_string(limits.max_n) + "] (0 means 1), got " +
                            std::to_string(request.n()));
  }
  ASTR_ASSIGN_OR_RETURN(std::vector<int32_t> prompt, PromptOf(request, model));
  ASTR_RETURN_IF_ERROR(CheckLogprobStart(request, prompt.size()));

  const v1::SamplingParameters& s = request.sampling();
  BuiltRequest out;
  ASTR_ASSIGN_OR_RETURN(const int32_t max_tokens,
                        ResolveMaxTokens(s, static_cast<int64_t>(prompt.size()), model));
  out.seed = s.has_seed() ? s.seed() : drawn_seed;
  SamplingParams params = SamplingParamsOf(s, max_tokens, model, out.seed);
  ASTR_RETURN_IF_ERROR(ValidateSamplingParams(params, model.vocab_size, "sampling."));
  ASTR_RETURN_IF_ERROR(ResolveStopStrings(s, limits, &out.output));
  DropRepeatedIds(&params.stop_token_ids, model.vocab_size);
  ASTR_RETURN_IF_ERROR(CheckListSizes(s, params.stop_token_ids, limits));
  out.sched.sampling = params;
  out.output.return_logprobs = params.return_logprob;
  out.output.top_logprobs = params.logprobs;
  out.output.return_sampling_mask = params.return_sampling_mask;
  out.output.include_stop_str_in_output = s.include_stop_str_in_output();
  out.output.skip_special_tokens = !s.has_skip_special_tokens() || s.skip_special_tokens();
  out.output.min_tokens = s.min_tokens();
  out.output.return_prompt_ids = request.return_prompt_ids();
  out.output.logprob_start = request.has_logprob_start() ? request.logprob_start() : 0;

  sched::SchedRequest& sr = out.sched;
  sr.request_id = request.request_id();
  sr.prompt = std::move(prompt);
  sr.max_tokens = max_tokens;
  sr.n = request.n() == 0 ? 1 : request.n();
  sr.priority = request.priority();
  if (request.kv_on_weight_update() != v1::KV_ON_WEIGHT_UPDATE_RECOMPUTE &&
      request.kv_on_weight_update() != v1::KV_ON_WEIGHT_UPDATE_REUSE) {
    return FieldError("kv_on_weight_update",
                      ": unknown value " + std::to_string(request.kv_on_weight_update()));
  }
  sr.reuse_kv_on_weight_update = request.kv_on_weight_update() == v1::KV_ON_WEIGHT_UPDATE_REUSE;
  sr.logprob_start = out.output.logprob_start;
  if (request.cache_salt().size() > kMaxCacheSaltBytes) {
    return FieldError("cache_salt", ": " + std::to_string(request.cache_salt().size()) +
                                        " bytes, at most " + std::to_string(kMaxCacheSaltBytes));
  }
  sr.cache_salt = request.cache_salt();
  // The constraint is checked again when it came compiled: the compile was for this request's
  // text, and min_tokens may not come with it.
  ASTR_ASSIGN_OR_RETURN(std::optional<ConstraintRequest> constraint, ConstraintOf(s, model));
  if (constraint && compiled != nullptr) {
    sr.constraint = std::move(compiled);
  } else if (constraint) {
    ASTR_ASSIGN_OR_RETURN(sr.constraint,
                          model.constraints->Compile(constraint->spec, constraint->field));
  }
  sr.arrival = sched::Clock::now();
  sr.deadline = deadline;
  return out;
}

}  // namespace astr::front
