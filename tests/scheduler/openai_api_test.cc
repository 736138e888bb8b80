// scheduler/front/openai_api: OpenAI JSON bodies become the GenerateRequests the gRPC front takes
// (field by field), type errors name the OpenAI field, the shared validation's errors are mapped
// back to OpenAI names, and responses have OpenAI's shapes. Expected values are written by hand
// from OpenAI's API reference.
#include "scheduler/front/openai_api.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "scheduler/front/request_builder.h"
#include "tests/support/test_util.h"

namespace astr::front::openai {
namespace {

using json = nlohmann::json;

ApiRequest MustParse(Endpoint e, const std::string& body) {
  ParseResult r = ParseRequest(e, body, "");
  EXPECT_TRUE(r.request.has_value()) << body << ": " << r.error.message;
  return r.request.value_or(ApiRequest{});
}

ApiError MustFail(Endpoint e, const std::string& body) {
  ParseResult r = ParseRequest(e, body, "");
  EXPECT_FALSE(r.request.has_value()) << body;
  return r.error;
}

TEST(OpenAiParse, CompletionFieldsBecomeTheGenerateRequest) {
  const ApiRequest r = MustParse(Endpoint::kCompletions, R"({
    "model": "m", "prompt": "hi", "max_tokens": 7, "temperature": 0.5, "top_p": 0.9, "n": 2,
    "stop": ["a", "b"], "seed": 42, "presence_penalty": 0.1, "frequency_penalty": -0.2,
    "logit_bias": {"5": 3}, "logprobs": 3, "top_k": 4, "min_p": 0.05,
    "repetition_penalty": 1.1, "min_tokens": 2, "ignore_eos": true, "stop_token_ids": [9],
    "include_stop_str_in_output": true, "skip_special_tokens": false, "priority": 3,
    "request_id": "abc", "return_token_ids": true, "user": "u"})");
  ASSERT_EQ(r.prompts.size(), 1u);
  const v1::GenerateRequest& g = r.prompts[0];
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(g.text(), "hi");
  EXPECT_EQ(g.n(), 2);
  EXPECT_EQ(g.priority(), 3);
  EXPECT_EQ(g.request_id(), "abc");
  EXPECT_TRUE(g.return_prompt_ids());
  const v1::SamplingParameters& s = g.sampling();
  EXPECT_EQ(s.max_tokens(), 7);
  EXPECT_FLOAT_EQ(s.temperature(), 0.5f);
  EXPECT_FLOAT_EQ(s.top_p(), 0.9f);
  EXPECT_EQ(s.stop_size(), 2);
  EXPECT_EQ(s.seed(), 42u);
  EXPECT_FLOAT_EQ(s.presence_penalty(), 0.1f);
  EXPECT_FLOAT_EQ(s.frequency_penalty(), -0.2f);
  EXPECT_FLOAT_EQ(s.logit_bias().at(5), 3.0f);
  EXPECT_TRUE(s.return_logprobs());
  EXPECT_EQ(s.top_logprobs(), 3);
  EXPECT_EQ(r.logprobs, 3);
  EXPECT_EQ(s.top_k(), 4);
  EXPECT_FLOAT_EQ(s.min_p(), 0.05f);
  EXPECT_FLOAT_EQ(s.repetition_penalty(), 1.1f);
  EXPECT_EQ(s.min_tokens(), 2);
  EXPECT_TRUE(s.ignore_eos());
  EXPECT_EQ(s.stop_token_ids(0), 9);
  EXPECT_TRUE(s.include_stop_str_in_output());
  EXPECT_FALSE(s.skip_special_tokens());
}

TEST(OpenAiParse, CompletionDefaultsAreOpenAis) {
  const ApiRequest r = MustParse(Endpoint::kCompletions, R"({"prompt": "hi"})");
  EXPECT_EQ(r.prompts[0].sampling().max_tokens(), 16);  // OpenAI's completions default
  EXPECT_FALSE(r.prompts[0].sampling().has_temperature());
  EXPECT_EQ(r.logprobs, -1);
  EXPECT_FALSE(r.stream);
  // Chat runs to the context's end unless told.
  const ApiRequest c =
      MustParse(Endpoint::kChat, R"({"messages": [{"role": "user", "content": "x"}]})");
  EXPECT_FALSE(c.prompts[0].sampling().has_max_tokens());
}

TEST(OpenAiParse, PromptForms) {
  EXPECT_EQ(MustParse(Endpoint::kCompletions, R"({"prompt": ["a", "b", "c"]})").prompts.size(), 3u);
  const ApiRequest ids = MustParse(Endpoint::kCompletions, R"({"prompt": [1, 2, 3]})");
  ASSERT_EQ(ids.prompts.size(), 1u);
  EXPECT_EQ(ids.prompts[0].token_ids().ids_size(), 3);
  const ApiRequest lists = MustParse(Endpoint::kCompletions, R"({"prompt": [[1, 2], [3]]})");
  ASSERT_EQ(lists.prompts.size(), 2u);
  EXPECT_EQ(lists.prompts[1].token_ids().ids(0), 3);
  // Several prompts with a request id: one id per prompt.
  const ApiRequest named =
      MustParse(Endpoint::kCompletions, R"({"prompt": ["a", "b"], "request_id": "r"})");
  EXPECT_EQ(named.prompts[0].request_id(), "r-0");
  EXPECT_EQ(named.prompts[1].request_id(), "r-1");
}

TEST(OpenAiParse, ChatMessagesToolsAndTemplateFields) {
  const ApiRequest r = MustParse(Endpoint::kChat, R"({
    "messages": [
      {"role": "system", "content": "be brief"},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
       "function": {"name": "f", "arguments": "{}"}}]},
      {"role": "tool", "content": "42", "tool_call_id": "c1", "name": "f"}],
    "tools": [{"type": "function", "function": {"name": "f"}}],
    "chat_template_kwargs": {"enable_thinking": false}, "add_generation_prompt": false,
    "max_completion_tokens": 5, "logprobs": true, "top_logprobs": 2})");
  const v1::ChatInput& chat = r.prompts[0].chat();
  ASSERT_EQ(chat.messages_size(), 4);
  EXPECT_EQ(chat.messages(1).content(), "a\nb");
  EXPECT_EQ(json::parse(chat.messages(2).tool_calls_json())[0]["id"], "c1");
  EXPECT_EQ(chat.messages(3).tool_call_id(), "c1");
  EXPECT_EQ(chat.messages(3).name(), "f");
  EXPECT_EQ(json::parse(chat.tools_json())[0]["function"]["name"], "f");
  EXPECT_EQ(json::parse(chat.template_kwargs_json())["enable_thinking"], false);
  EXPECT_TRUE(chat.has_add_generation_prompt());
  EXPECT_FALSE(chat.add_generation_prompt());
  EXPECT_EQ(r.prompts[0].sampling().max_tokens(), 5);
  EXPECT_TRUE(r.max_completion_tokens);
  EXPECT_EQ(r.logprobs, 2);
  // tool_choice "none": the template gets no tools.
  const ApiRequest none = MustParse(Endpoint::kChat, R"({"messages": [{"role": "user",
    "content": "x"}], "tools": [{"type": "function", "function": {"name": "f"}}],
    "tool_choice": "none"})");
  EXPECT_TRUE(none.prompts[0].chat().tools_json().empty());
  EXPECT_EQ(none.tool_choice, ApiRequest::ToolChoice::kNone);
  EXPECT_EQ(r.tool_choice, ApiRequest::ToolChoice::kAuto);  // tools given, no tool_choice
  EXPECT_FALSE(r.prompts[0].sampling().has_constraint());
}

// tool_choice required / named: the constraint that makes the output the calls, from the tools'
// schemas in the body's key order.
TEST(OpenAiParse, RequiredAndNamedToolChoiceBecomeConstraints) {
  const std::string tools = R"("tools": [
      {"type": "function", "function": {"name": "f", "parameters": {"type": "object",
        "properties": {"z": {"type": "integer"}, "a": {"type": "string"}}}}},
      {"type": "function", "function": {"name": "g"}}])";
  const ApiRequest req = MustParse(Endpoint::kChat, R"({"messages": [{"role": "user",
    "content": "x"}], "tool_choice": "required", )" + tools +
                                                        "}");
  EXPECT_EQ(req.tool_choice, ApiRequest::ToolChoice::kRequired);
  EXPECT_EQ(req.prompts[0].sampling().constraint().json_schema(),
            R"({"type":"array","minItems":1,"items":{"anyOf":[)"
            R"({"type":"object","properties":{"name":{"const":"f"},"arguments":{"type":"object",)"
            R"("properties":{"z":{"type":"integer"},"a":{"type":"string"}}}},)"
            R"("required":["name","arguments"],"additionalProperties":false},)"
            R"({"type":"object","properties":{"name":{"const":"g"},"arguments":{"type":"object"}},)"
            R"("required":["name","arguments"],"additionalProperties":false}]}})");
  const ApiRequest named = MustParse(Endpoint::kChat, R"({"messages": [{"role": "user",
    "content": "x"}], "tool_choice": {"type": "function", "function": {"name": "f"}}, )" +
                                                          tools + "}");
  EXPECT_EQ(named.tool_choice, ApiRequest::ToolChoice::kNamed);
  EXPECT_EQ(named.tool_name, "f");
  EXPECT_EQ(named.prompts[0].sampling().constraint().json_schema(),
            R"({"type":"object","properties":{"z":{"type":"integer"},"a":{"type":"string"}}})");
  EXPECT_EQ(ApiErrorFromStatus(FieldError("sampling.constraint.json_schema", ": bad"), named).param,
            "tools");
}

TEST(OpenAiParse, StreamOptions) {
  EXPECT_TRUE(MustParse(Endpoint::kChat, R"({"messages": [{"role": "user", "content": "x"}],
    "stream": true, "stream_options": {"include_usage": true}})")
                  .include_usage);
  EXPECT_EQ(MustFail(Endpoint::kChat, R"({"messages": [{"role": "user", "content": "x"}],
    "stream_options": {"include_usage": true}})")
                .param,
            "stream_options");
}

TEST(OpenAiParse, TypeErrorsNameTheField) {
  struct Case {
    Endpoint e;
    std::string body;
    std::string param;
  };
  const Case cases[] = {
      {Endpoint::kCompletions, R"({"prompt": "x", "temperature": "hot"})", "temperature"},
      {Endpoint::kCompletions, R"({"prompt": "x", "n": 1.5})", "n"},
      {Endpoint::kCompletions, R"({"prompt": "x", "n": 0})", "n"},
      {Endpoint::kCompletions, R"({"prompt": "x", "max_tokens": 0})", "max_tokens"},
      {Endpoint::kCompletions, R"({"prompt": "x", "stream": "yes"})", "stream"},
      {Endpoint::kCompletions, R"({"prompt": "x", "stop": 5})", "stop"},
      {Endpoint::kCompletions, R"({"prompt": "x", "stop": ["a", 1]})", "stop[1]"},
      {Endpoint::kCompletions, R"({"prompt": "x", "logit_bias": {"abc": 1}})", "logit_bias"},
      {Endpoint::kCompletions, R"({"prompt": "x", "logit_bias": {"1": "a"}})", "logit_bias"},
      {Endpoint::kCompletions, R"({"prompt": "x", "logprobs": 21})", "logprobs"},
      {Endpoint::kCompletions, R"({"prompt": "x", "seed": "s"})", "seed"},
      {Endpoint::kCompletions, R"({"prompt": "x", "best_of": 3})", "best_of"},
      {Endpoint::kCompletions, R"({"prompt": "x", "suffix": "end"})", "suffix"},
      {Endpoint::kCompletions, R"({"prompt": 5})", "prompt"},
      {Endpoint::kCompletions, R"({"prompt": []})", "prompt"},
      {Endpoint::kCompletions, R"({"prompt": ["a", 1]})", "prompt[1]"},
      {Endpoint::kCompletions, R"({"prompt": [[1], []]})", "prompt[1]"},
      {Endpoint::kCompletions, R"({})", "prompt"},
      {Endpoint::kChat, R"({})", "messages"},
      {Endpoint::kChat, R"({"messages": []})", "messages"},
      {Endpoint::kChat, R"({"messages": "hi"})", "messages"},
      {Endpoint::kChat, R"({"messages": [{"content": "x"}]})", "messages[0].role"},
      {Endpoint::kChat, R"({"messages": [{"role": "wizard", "content": "x"}]})",
       "messages[0].role"},
      {Endpoint::kChat, R"({"messages": [{"role": "user"}]})", "messages[0].content"},
      {Endpoint::kChat, R"({"messages": [{"role": "user", "content": 3}]})",
       "messages[0].content"},
      {Endpoint::kChat,
       R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]})",
       "messages[0].content[0].type"},
      {Endpoint::kChat, R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})",
       "top_logprobs"},
      {Endpoint::kChat, R"({"messages": [{"role": "user", "content": "x"}], "tools": {}})",
       "tools"},
      {Endpoint::kChat,
       R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "xml"}})",
       "response_format.type"},
      {Endpoint::kChat,
       R"({"messages": [{"role": "user", "content": "x"}], "response_format": "json"})",
       "response_format"},
      {Endpoint::kCompletions,
       R"({"prompt": "x", "response_format": {"type": "json_schema", "json_schema": {"schema": {}}}})",
       "response_format.json_schema.name"},
      {Endpoint::kCompletions,
       R"({"prompt": "x", "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": 3}}})",
       "response_format.json_schema.schema"},
      {Endpoint::kCompletions,
       R"({"prompt": "x", "structured_outputs": {"regex": "a", "choice": ["a"]}})",
       "structured_outputs"},
      {Endpoint::kCompletions, R"({"prompt": "x", "structured_outputs": {}})",
       "structured_outputs"},
      {Endpoint::kCompletions, R"({"prompt": "x", "structured_outputs": {"choice": ["a", 2]}})",
       "structured_outputs.choice[1]"},
      {Endpoint::kCompletions, R"({"prompt": "x", "structured_outputs": {"regex": 5}})",
       "structured_outputs.regex"},
      {Endpoint::kCompletions,
       R"({"prompt": "x", "structured_outputs": {"regex": "a"}, "response_format": {"type": "json_object"}})",
       "structured_outputs"},
  };
  for (const Case& c : cases) {
    const ApiError e = MustFail(c.e, c.body);
    EXPECT_EQ(e.status, 400) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body << ": " << e.message;
    EXPECT_NE(e.message.find(c.param), std::string::npos) << c.body << ": " << e.message;
  }
}

// astr's return_sampling_mask: a boolean, and only with logprobs (the mask is returned in each
// token's logprobs entry).
TEST(OpenAiParse, ReturnSamplingMaskNeedsABooleanAndLogprobs) {
  ApiRequest c = MustParse(Endpoint::kCompletions,
                           R"({"prompt": "x", "logprobs": 0, "return_sampling_mask": true})");
  EXPECT_TRUE(c.return_sampling_mask);
  EXPECT_TRUE(c.prompts[0].sampling().return_sampling_mask());
  ApiRequest chat = MustParse(Endpoint::kChat, R"({"messages": [{"role": "user", "content": "x"}],
    "logprobs": true, "return_sampling_mask": true})");
  EXPECT_TRUE(chat.return_sampling_mask);
  EXPECT_TRUE(chat.prompts[0].sampling().return_sampling_mask());
  ApiRequest off = MustParse(Endpoint::kCompletions, R"({"prompt": "x", "logprobs": 2,
    "return_sampling_mask": false})");
  EXPECT_FALSE(off.return_sampling_mask);
  EXPECT_FALSE(off.prompts[0].sampling().return_sampling_mask());

  const std::pair<Endpoint, std::string> bad[] = {
      {Endpoint::kCompletions, R"({"prompt": "x", "logprobs": 0, "return_sampling_mask": 1})"},
      {Endpoint::kCompletions, R"({"prompt": "x", "logprobs": 0, "return_sampling_mask": "yes"})"},
      {Endpoint::kCompletions, R"({"prompt": "x", "return_sampling_mask": true})"},
      {Endpoint::kChat,
       R"({"messages": [{"role": "user", "content": "x"}], "return_sampling_mask": true})"},
      {Endpoint::kChat, R"({"messages": [{"role": "user", "content": "x"}], "logprobs": false,
        "return_sampling_mask": true})"},
  };
  for (const auto& [endpoint, body] : bad) {
    const ApiError e = MustFail(endpoint, body);
    EXPECT_EQ(e.status, 400) << body;
    EXPECT_EQ(e.param, "return_sampling_mask") << body << ": " << e.message;
    EXPECT_EQ(e.message.rfind("return_sampling_mask", 0), 0u) << e.message;
  }
  EXPECT_NE(MustFail(Endpoint::kCompletions, R"({"prompt": "x", "return_sampling_mask": true})")
                .message.find("requires logprobs"),
            std::string::npos);
}

TEST(OpenAiParse, ConstraintsFromResponseFormatAndStructuredOutputs) {
  auto constraint = [](const std::string& body) {
    return MustParse(Endpoint::kCompletions, body).prompts.at(0).sampling();
  };
  EXPECT_FALSE(constraint(R"({"prompt": "x"})").has_constraint());
  EXPECT_FALSE(
      constraint(R"({"prompt": "x", "response_format": {"type": "text"}})").has_constraint());
  EXPECT_TRUE(constraint(R"({"prompt": "x", "response_format": {"type": "json_object"}})")
                  .constraint()
                  .json_object());
  // The schema keeps the body's key order (property order is output order).
  const v1::SamplingParameters s = constraint(
      R"({"prompt": "x", "response_format": {"type": "json_schema", "json_schema": {"name": "n",
          "strict": true, "schema": {"type": "object", "properties": {"z": {}, "a": {}}}}}})");
  EXPECT_EQ(s.constraint().json_schema(), R"({"type":"object","properties":{"z":{},"a":{}}})");
  EXPECT_EQ(constraint(R"({"prompt": "x", "structured_outputs": {"json": {"b": 1, "a": 2}}})")
                .constraint()
                .json_schema(),
            R"({"b":1,"a":2})");
  EXPECT_EQ(
      constraint(R"({"prompt": "x", "structured_outputs": {"json": "{\"type\": \"string\"}"}})")
          .constraint()
          .json_schema(),
      R"({"type": "string"})");
  EXPECT_EQ(constraint(R"({"prompt": "x", "structured_outputs": {"regex": "[a-z]+"}})")
                .constraint()
                .regex(),
            "[a-z]+");
  EXPECT_EQ(constraint(R"({"prompt": "x", "structured_outputs": {"grammar": "root ::= \"a\""}})")
                .constraint()
                .grammar(),
            "root ::= \"a\"");
  const v1::SamplingParameters c =
      constraint(R"({"prompt": "x", "structured_outputs": {"choice": ["yes", "no"]}})");
  ASSERT_EQ(c.constraint().choice().choices_size(), 2);
  EXPECT_EQ(c.constraint().choice().choices(1), "no");
}

TEST(OpenAiErrors, ConstraintCompileErrorsNameTheFieldTheyCameFrom) {
  ApiRequest fmt;
  fmt.constraint_param = "response_format";
  ApiRequest so;
  so.constraint_param = "structured_outputs";
  struct Case {
    const ApiRequest* req;
    std::string field, rest, param, shown;
  };
  const Case cases[] = {
      {&fmt, "sampling.constraint.json_schema", ": not valid JSON at byte 3",
       "response_format.json_schema.schema",
       "response_format.json_schema.schema: not valid JSON at byte 3"},
      {&so, "sampling.constraint.json_schema", ": bad", "structured_outputs.json",
       "structured_outputs.json: bad"},
      {&so, "sampling.constraint.grammar", ": EBNF parser error at line 1, column 4",
       "structured_outputs.grammar",
       "structured_outputs.grammar: EBNF parser error at line 1, column 4"},
      {&so, "sampling.constraint.choice.choices[1]", " must not be empty",
       "structured_outputs.choice[1]", "structured_outputs.choice[1] must not be empty"},
      {&fmt, "sampling.min_tokens", " cannot be combined with a constraint", "min_tokens",
       "min_tokens cannot be combined with a constraint"},
  };
  for (const Case& c : cases) {
    const ApiError e = ApiErrorFromStatus(FieldError(c.field, c.rest), *c.req);
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, c.param) << c.field;
    EXPECT_EQ(e.message, c.shown) << c.field;
  }
}

TEST(OpenAiParse, BodiesThatAreNotJsonObjects) {
  for (const char* body : {"", "{", "[1,2]", "\"x\"", "{\"prompt\": \"\xff\"}"}) {
    const ApiError e = MustFail(Endpoint::kCompletions, body);
    EXPECT_EQ(e.status, 400) << body;
    EXPECT_TRUE(e.param.empty()) << body;
    EXPECT_FALSE(e.message.empty());
  }
  const ApiError deep =
      MustFail(Endpoint::kCompletions, std::string(1000, '[') + std::string(1000, ']'));
  EXPECT_NE(deep.message.find("nested deeper"), std::string::npos) << deep.message;
}

TEST(OpenAiErrors, SharedValidationErrorsMapToOpenAiNames) {
  ApiRequest chat;
  chat.endpoint = Endpoint::kChat;
  ApiRequest completions;
  completions.endpoint = Endpoint::kCompletions;
  struct Case {
    const ApiRequest* req;
    std::string field, rest, param, shown;
  };
  const Case cases[] = {
      {&chat, "sampling.top_p", " must be in (0, 1], got 0", "top_p",
       "top_p must be in (0, 1], got 0"},
      {&chat, "chat.messages[0].role", ": empty", "messages[0].role", "messages[0].role: empty"},
      {&completions, "text", ": the prompt is at least 70 tokens", "prompt",
       "prompt: the prompt is at least 70 tokens"},
      {&completions, "token_ids.ids[3]", " = 900 is outside the vocabulary [0, 512)", "prompt",
       "prompt = 900 is outside the vocabulary [0, 512)"},
      {&completions, "sampling.top_logprobs", " must be in [0, 20], got 30", "logprobs",
       "top_logprobs must be in [0, 20], got 30"},
      {&chat, "sampling.stop[2]", ": 2000 bytes", "stop", "stop[2]: 2000 bytes"},
      {&completions, "n", ": 99 is more than --max-n 16", "n", "n: 99 is more than --max-n 16"},
      {&chat, "sampling.return_sampling_mask", " needs temperature >= 1e-05",
       "return_sampling_mask", "return_sampling_mask needs temperature >= 1e-05"},
  };
  for (const Case& c : cases) {
    const ApiError e = ApiErrorFromStatus(FieldError(c.field, c.rest), *c.req);
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, c.param) << c.field;
    EXPECT_EQ(e.message, c.shown) << c.field;
  }
  ApiRequest mct = chat;
  mct.max_completion_tokens = true;
  const ApiError e = ApiErrorFromStatus(
      FieldError("sampling.max_tokens", ": prompt (10) + max_tokens (9000) > 2048"), mct);
  EXPECT_EQ(e.param, "max_completion_tokens");
  EXPECT_EQ(e.message.rfind("max_completion_tokens:", 0), 0u) << e.message;
}

TEST(OpenAiErrors, AdmissionErrorsAreRetryableOrNot) {
  ApiRequest r;
  const ApiError full = ApiErrorFromStatus(
      ResourceExhaustedError("the queue is full (--max-queued-requests 1024)"), r);
  EXPECT_EQ(full.status, 429);
  EXPECT_GT(full.retry_after_s, 0);
  const ApiError never = ApiErrorFromStatus(
      ResourceExhaustedError("prompt (5 tokens) + max_tokens (9) = 14 tokens do not fit in the "
                             "KV pool of any worker (largest: 8 tokens)")
          .WithKind(ErrorKind::kNeverFits),
      r);
  // The kind decides, never the text: the same words without it are a retryable 429.
  EXPECT_EQ(
      ApiErrorFromStatus(ResourceExhaustedError("x tokens do not fit in the KV pool"), r).status,
      429);
  // A message that merely looks like a field path names no param.
  const ApiError untyped = ApiErrorFromStatus(InvalidArgumentError("top_p must be in (0, 1]"), r);
  EXPECT_EQ(untyped.status, 400);
  EXPECT_TRUE(untyped.param.empty());
  EXPECT_EQ(never.status, 400);
  EXPECT_EQ(never.param, "max_tokens");
  const ApiError draining = ApiErrorFromStatus(UnavailableError("draining"), r);
  EXPECT_EQ(draining.status, 503);
  EXPECT_GT(draining.retry_after_s, 0);
  EXPECT_EQ(ApiErrorFromStatus(Status(StatusCode::kInternal, "boom"), r).status, 500);
}

TEST(OpenAiErrors, ErrorJsonHasOpenAisShape) {
  ApiError e;
  e.message = "bad \"x\"";
  e.param = "x";
  const json j = json::parse(e.Json());
  EXPECT_EQ(j["error"]["message"], "bad \"x\"");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["param"], "x");
  EXPECT_TRUE(j["error"]["code"].is_null());
}

class OpenAiResponse : public ::testing::Test {
 protected:
  void SetUp() override {
    ASTR_REQUIRE_SHARED_FILE(path, "models/stories260K.gguf");
    auto tok = tok::Tokenizer::Load(path);
    ASSERT_TRUE(tok.ok()) << tok.status().ToString();
    tokenizer_ = *tok;
    texts_ = std::make_unique<TokenTexts>(*tokenizer_);
  }
  std::shared_ptr<const tok::Tokenizer> tokenizer_;
  std::unique_ptr<TokenTexts> texts_;
};

TEST_F(OpenAiResponse, TokenTextsKeepTheSpaceADecodeAloneDrops) {
  const std::vector<int32_t> ids = tokenizer_->Encode("Once upon", {.add_special_tokens = false});
  ASSERT_GE(ids.size(), 2u);
  std::string joined;
  for (int32_t id : ids) joined += (*texts_)[id];
  // The pieces join to the text the tokenizer decodes (SentencePiece's leading space included).
  EXPECT_EQ(joined, " Once upon");
  EXPECT_EQ((*texts_)[1], "<s>");  // special tokens are written out
  EXPECT_EQ((*texts_)[-1], "");
}

TEST_F(OpenAiResponse, ChatUnaryAndStreamShapes) {
  ApiRequest req = MustParse(Endpoint::kChat, R"({"messages": [{"role": "user", "content": "x"}],
    "logprobs": true, "top_logprobs": 1, "return_token_ids": true})");
  ResponseContext ctx{texts_.get(), &req, "chatcmpl-1", "m", 100, 7};
  const std::vector<int32_t> ids = tokenizer_->Encode("Once upon", {.add_special_tokens = false});
  ChoiceOutput c;
  SampleDelta d;
  d.text = " Once upon";
  d.token_ids = ids;
  d.logprobs.assign(ids.size(), -0.5f);
  d.top.assign(ids.size(), {TokenLogprob{ids[0], -0.5f}});
  d.finished = true;
  d.finish_reason = v1::FINISH_REASON_EOS;
  c.Append(d);
  PromptInfo p;
  p.ids = {1, 2};
  const json u = json::parse(UnaryResponse(ctx, {c}, {p}, 1, UsageTotals{2, 2, 0}));
  EXPECT_EQ(u["object"], "chat.completion");
  EXPECT_EQ(u["id"], "chatcmpl-1");
  EXPECT_EQ(u["created"], 100);
  EXPECT_EQ(u["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(u["choices"][0]["message"]["content"], " Once upon");
  EXPECT_EQ(u["choices"][0]["finish_reason"], "stop");  // EOS is "stop" to OpenAI
  const json& lp = u["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(lp.size(), ids.size());
  EXPECT_EQ(lp[0]["token"], " Once");
  EXPECT_EQ(lp[0]["bytes"], json::array({32, 79, 110, 99, 101}));
  EXPECT_EQ(lp[0]["top_logprobs"][0]["token"], " Once");
  EXPECT_EQ(u["choices"][0]["token_ids"], ids);
  EXPECT_EQ(u["prompt_token_ids"], json::array({1, 2}));
  EXPECT_EQ(u["usage"]["total_tokens"], 4);
  EXPECT_EQ(u["usage"]["prompt_tokens_details"]["cached_tokens"], 0);

  req.stream = true;
  req.include_usage = true;
  const std::string first = StreamChunk(ctx, 0, ChoiceOutput{}, &p, true);
  ASSERT_EQ(first.rfind("data: ", 0), 0u);
  ASSERT_EQ(first.substr(first.size() - 2), "\n\n");
  const json f = json::parse(first.substr(6));
  EXPECT_EQ(f["object"], "chat.completion.chunk");
  EXPECT_EQ(f["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(f["choices"][0]["finish_reason"].is_null());
  EXPECT_TRUE(f["usage"].is_null());
  const json last = json::parse(StreamChunk(ctx, 0, c, &p, false).substr(6));
  EXPECT_FALSE(last["choices"][0]["delta"].contains("role"));
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  const json usage = json::parse(UsageChunk(ctx, UsageTotals{2, 2, 0}).substr(6));
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 2);
}

TEST_F(OpenAiResponse, CompletionLogprobsAndEcho) {
  ApiRequest req = MustParse(Endpoint::kCompletions, R"({"prompt": "x", "logprobs": 1,
    "echo": true})");
  EXPECT_EQ(req.prompts[0].logprob_start(), 1);  // echo with logprobs scores the prompt too
  ResponseContext ctx{texts_.get(), &req, "cmpl-1", "m", 100, 7};
  const std::vector<int32_t> gen = tokenizer_->Encode("upon", {.add_special_tokens = false});
  ASSERT_EQ(gen.size(), 1u);
  ChoiceOutput c;
  SampleDelta d;
  d.text = " upon";
  d.token_ids = gen;
  d.logprobs = {-0.25f};
  d.top = {{TokenLogprob{gen[0], -0.25f}}};
  d.finished = true;
  d.finish_reason = v1::FINISH_REASON_LENGTH;
  c.Append(d);
  PromptInfo p;
  p.ids = tokenizer_->Encode("Once", {.add_special_tokens = false});
  ASSERT_EQ(p.ids.size(), 1u);
  p.text = "Once";
  const json u = json::parse(UnaryResponse(ctx, {c}, {p}, 1, UsageTotals{1, 1, 0}));
  EXPECT_EQ(u["object"], "text_completion");
  EXPECT_EQ(u["choices"][0]["text"], "Once upon");
  EXPECT_EQ(u["choices"][0]["finish_reason"], "length");
  const json& lp = u["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"], json::array({" Once", " upon"}));
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());  // the first prompt token has no logprob
  EXPECT_FLOAT_EQ(lp["token_logprobs"][1].get<float>(), -0.25f);
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  EXPECT_FLOAT_EQ(lp["top_logprobs"][1][" upon"].get<float>(), -0.25f);
  EXPECT_EQ(lp["text_offset"], json::array({0, 4}));

  // Streamed, offsets continue across chunks: the first chunk carries the echoed prompt, a later
  // one starts where the text streamed so far ends.
  req.stream = true;
  const json first = json::parse(StreamChunk(ctx, 0, ChoiceOutput{}, &p, true, 0).substr(6));
  EXPECT_EQ(first["choices"][0]["text"], "Once");
  EXPECT_EQ(first["choices"][0]["logprobs"]["text_offset"], json::array({0}));
  const json later = json::parse(StreamChunk(ctx, 0, c, &p, false, 4).substr(6));
  EXPECT_EQ(later["choices"][0]["text"], " upon");
  EXPECT_EQ(later["choices"][0]["logprobs"]["text_offset"], json::array({4}));
}

// Each token's logprobs entry carries {"count", "token_ids"}; a mask that removed nothing has the
// vocabulary's size and no ids; an echoed prompt token has none (null).
TEST_F(OpenAiResponse, SamplingMaskInEachTokensLogprobsEntry) {
  const std::vector<int32_t> ids = tokenizer_->Encode("Once upon", {.add_special_tokens = false});
  ASSERT_EQ(ids.size(), 2u);
  SampleDelta d;
  d.text = " Once upon";
  d.token_ids = ids;
  d.logprobs = {-0.5f, -0.25f};
  d.masks = {SamplingMask{3, {ids[0], 300, 400}}, SamplingMask{512, {}}};
  d.finished = true;
  d.finish_reason = v1::FINISH_REASON_LENGTH;
  ChoiceOutput c;
  c.Append(d);
  PromptInfo p;
  p.ids = {1};
  p.text = "";

  ApiRequest chat = MustParse(Endpoint::kChat, R"({"messages": [{"role": "user", "content": "x"}],
    "logprobs": true, "return_sampling_mask": true})");
  ResponseContext ctx{texts_.get(), &chat, "chatcmpl-1", "m", 100, 7};
  const json want0 = {{"count", 3}, {"token_ids", {ids[0], 300, 400}}};
  const json want1 = {{"count", 512}, {"token_ids", json::array()}};
  const json u = json::parse(UnaryResponse(ctx, {c}, {p}, 1, UsageTotals{1, 2, 0}));
  const json& content = u["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 2u);
  EXPECT_EQ(content[0]["sampling_mask"], want0);
  EXPECT_EQ(content[1]["sampling_mask"], want1);
  chat.stream = true;
  const json chunk = json::parse(StreamChunk(ctx, 0, c, &p, false).substr(6));
  EXPECT_EQ(chunk["choices"][0]["logprobs"]["content"][1]["sampling_mask"], want1);

  ApiRequest cmpl = MustParse(Endpoint::kCompletions, R"({"prompt": "x", "logprobs": 0,
    "echo": true, "return_sampling_mask": true})");
  ctx.request = &cmpl;
  const json v = json::parse(UnaryResponse(ctx, {c}, {p}, 1, UsageTotals{1, 2, 0}));
  EXPECT_EQ(v["choices"][0]["logprobs"]["sampling_mask"], json::array({nullptr, want0, want1}));

  // Not asked: no field.
  ApiRequest plain = MustParse(Endpoint::kChat, R"({"messages": [{"role": "user", "content": "x"}],
    "logprobs": true})");
  ctx.request = &plain;
  const json w = json::parse(UnaryResponse(ctx, {c}, {p}, 1, UsageTotals{1, 2, 0}));
  EXPECT_FALSE(w["choices"][0]["logprobs"]["content"][0].contains("sampling_mask"));
}

}  // namespace
}  // namespace astr::front::openai
