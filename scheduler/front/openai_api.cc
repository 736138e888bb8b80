#include "scheduler/front/openai_api.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <string_view>
#include <utility>

#include "common/base/json_depth.h"

namespace astr::front::openai {
namespace {

using json = nlohmann::json;

std::string Dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// Field readers that stop at the first error. Every reader leaves the target alone when the field
// is absent or null (OpenAI clients send null for "not set").
class Reader {
 public:
  explicit Reader(const json& body) : body_(body) {}
  bool ok() const { return !failed_; }
  const ApiError& error() const { return error_; }

  bool Fail(const std::string& param, const std::string& message) {
    if (failed_) return false;
    failed_ = true;
    error_.status = 400;
    error_.param = param;
    error_.message = message;
    return false;
  }
  bool WrongType(const std::string& param, const char* want, const json& got) {
    return Fail(param, param + ": must be " + want + ", got " + TypeName(got));
  }

  // The field or null when absent / null.
  const json* Get(const char* name) const {
    auto it = body_.find(name);
    if (it == body_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  bool Bool(const char* name, bool* out) {
    const json* v = Get(name);
    if (v == nullptr || failed_) return false;
    if (!v->is_boolean()) return WrongType(name, "a boolean", *v);
    *out = v->get<bool>();
    return true;
  }
  bool Number(const char* name, float* out) {
    const json* v = Get(name);
    if (v == nullptr || failed_) return false;
    if (!v->is_number()) return WrongType(name, "a number", *v);
    const double d = v->get<double>();
    if (!std::isfinite(d) || std::fabs(d) > std::numeric_limits<float>::max()) {
      return Fail(name, std::string(name) + ": must be a finite number");
    }
    *out = static_cast<float>(d);
    return true;
  }
  // An integer (an integral float such as 2.0 is accepted, as OpenAI's server does).
  bool Int(const std::string& name, const json& v, int64_t lo, int64_t hi, int64_t* out) {
    if (failed_) return false;
    int64_t x = 0;
    if (v.is_number_integer()) {
      if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
        return Fail(name, name + ": must be in [" + std::to_string(lo) + ", " +
                              std::to_string(hi) + "], got " + v.dump());
      }
      x = v.get<int64_t>();
    } else if (v.is_number_float()) {
      const double d = v.get<double>();
      if (!(std::floor(d) == d) || std::fabs(d) > 9.0e18) {
        return WrongType(name, "an integer", v);
      }
      x = static_cast<int64_t>(d);
    } else {
      return WrongType(name, "an integer", v);
    }
    if (x < lo || x > hi) {
      return Fail(name, name + ": must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                            "], got " + std::to_string(x));
    }
    *out = x;
    return true;
  }
  bool Int(const char* name, int64_t lo, int64_t hi, int64_t* out) {
    const json* v = Get(name);
    if (v == nullptr) return false;
    return Int(name, *v, lo, hi, out);
  }
  bool String(const char* name, std::string* out) {
    const json* v = Get(name);
    if (v == nullptr || failed_) return false;
    if (!v->is_string()) return WrongType(name, "a string", *v);
    *out = v->get<std::string>();
    return true;
  }

  static std::string TypeName(const json& j) {
    if (j.is_number_integer()) return "an integer";
    if (j.is_number_float()) return "a number";
    if (j.is_string()) return "a string";
    if (j.is_boolean()) return "a boolean";
    if (j.is_array()) return "an array";
    if (j.is_object()) return "an object";
    return "null";
  }

 private:
  const json& body_;
  bool failed_ = false;
  ApiError error_;
};

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

// Structured outputs into s->constraint: OpenAI's response_format (text, json_object,
// json_schema {name, schema, strict}) or vLLM's structured_outputs (json, regex, choice, grammar;
// exactly one). Both at once is an error. What the constraint says is checked when it compiles
// (BuildRequest), with errors under the field it came from (ApiRequest::constraint_param).
void ReadConstraint(Reader& r, v1::SamplingParameters* s, ApiRequest* out) {
  const json* format = r.Get("response_format");
  const json* so = r.Get("structured_outputs");
  if (format != nullptr && so != nullptr) {
    r.Fail("structured_outputs", "structured_outputs: cannot be combined with response_format");
    return;
  }
  if (format != nullptr) {
    out->constraint_param = "response_format";
    v1::Constraint* c = s->mutable_constraint();
    const json* type =
        format->is_object() && format->contains("type") ? &(*format)["type"] : nullptr;
    if (type == nullptr || !type->is_string()) {
      r.Fail("response_format", "response_format: must be an object with a string 'type'");
    } else if (*type == "text") {
      s->clear_constraint();
    } else if (*type == "json_object") {
      c->set_json_object(true);
    } else if (*type == "json_schema") {
      auto it = format->find("json_schema");
      if (it == format->end() || !it->is_object()) {
        r.Fail("response_format.json_schema",
               "response_format.json_schema: must be an object with 'name' and 'schema'");
        return;
      }
      auto name = it->find("name");
      if (name == it->end() || !name->is_string() || name->get<std::string>().empty()) {
        r.Fail("response_format.json_schema.name",
               "response_format.json_schema.name: must be a non-empty string");
        return;
      }
      auto schema = it->find("schema");
      if (schema == it->end() || schema->is_null()) {
        c->set_json_schema("{}");  // OpenAI: no schema = any JSON value
      } else if (!schema->is_object() && !schema->is_boolean()) {
        r.WrongType("response_format.json_schema.schema", "an object", *schema);
        return;
      } else {
        c->set_json_schema(Dump(*schema));
      }
      // strict (true or false): astr always enforces the schema, as OpenAI's strict mode does.
      if (auto strict = it->find("strict");
          strict != it->end() && !strict->is_null() && !strict->is_boolean()) {
        r.WrongType("response_format.json_schema.strict", "a boolean", *strict);
      }
    } else {
      r.Fail("response_format.type",
             "response_format.type: must be 'text', 'json_object' or 'json_schema', got '" +
                 type->get<std::string>() + "'");
    }
    return;
  }
  if (so == nullptr) return;
  out->constraint_param = "structured_outputs";
  v1::Constraint* c = s->mutable_constraint();
  if (!so->is_object()) {
    r.WrongType("structured_outputs", "an object", *so);
    return;
  }
  auto get = [&](const char* k) -> const json* {
    auto it = so->find(k);
    return it != so->end() && !it->is_null() ? &*it : nullptr;
  };
  int kinds = 0;
  for (const char* k : {"json", "regex", "choice", "grammar", "json_object"}) {
    kinds += get(k) != nullptr ? 1 : 0;
  }
  if (kinds != 1) {
    r.Fail("structured_outputs",
           "structured_outputs: must set exactly one of json, regex, "
           "choice, grammar, json_object");
    return;
  }
  if (const json* j = get("json")) {
    if (j->is_string()) {
      c->set_json_schema(j->get<std::string>());
    } else if (j->is_object() || j->is_boolean()) {
      c->set_json_schema(Dump(*j));
    } else {
      r.WrongType("structured_outputs.json", "a schema (an object or its JSON text)", *j);
    }
  } else if (const json* re = get("regex")) {
    if (!re->is_string()) {
      r.WrongType("structured_outputs.regex", "a string", *re);
    } else {
      c->set_regex(re->get<std::string>());
    }
  } else if (const json* g = get("grammar")) {
    if (!g->is_string()) {
      r.WrongType("structured_outputs.grammar", "a string", *g);
    } else {
      c->set_grammar(g->get<std::string>());
    }
  } else if (const json* ch = get("choice")) {
    if (!ch->is_array()) {
      r.WrongType("structured_outputs.choice", "an array of strings", *ch);
      return;
    }
    v1::ChoiceList* list = c->mutable_choice();
    for (size_t k = 0; k < ch->size(); ++k) {
      if (!(*ch)[k].is_string()) {
        r.WrongType("structured_outputs.choice[" + std::to_string(k) + "]", "a string", (*ch)[k]);
        return;
      }
      list->add_choices((*ch)[k].get<std::string>());
    }
  } else if (const json* jo = get("json_object")) {
    if (!jo->is_boolean() || !jo->get<bool>()) {
      r.Fail("structured_outputs.json_object", "structured_outputs.json_object: must be true");
    } else {
      c->set_json_object(true);
    }
  }
}

// Sampling fields both endpoints share, into `s` (proto defaults stand for absent fields).
void ReadSampling(Reader& r, Endpoint endpoint, v1::SamplingParameters* s, ApiRequest* out) {
  float f = 0;
  int64_t i = 0;
  bool b = false;
  if (r.Number("temperature", &f)) s->set_temperature(f);
  if (r.Number("top_p", &f)) s->set_top_p(f);
  if (r.Int("top_k", -1, kInt32Max, &i)) s->set_top_k(i < 0 ? 0 : static_cast<int32_t>(i));
  if (r.Number("min_p", &f)) s->set_min_p(f);
  if (r.Number("repetition_penalty", &f)) s->set_repetition_penalty(f);
  if (r.Number("presence_penalty", &f)) s->set_presence_penalty(f);
  if (r.Number("frequency_penalty", &f)) s->set_frequency_penalty(f);
  if (const json* seed = r.Get("seed")) {
    int64_t v = 0;
    if (r.Int("seed", *seed, std::numeric_limits<int64_t>::min(),
              std::numeric_limits<int64_t>::max(), &v)) {
      s->set_seed(static_cast<uint64_t>(v));
    }
  }
  // max_completion_tokens (the newer name) wins over max_tokens.
  if (r.Int("max_completion_tokens", 1, kInt32Max, &i)) {
    s->set_max_tokens(static_cast<int32_t>(i));
    out->max_completion_tokens = true;
  } else if (r.Int("max_tokens", 1, kInt32Max, &i)) {
    s->set_max_tokens(static_cast<int32_t>(i));
  } else if (endpoint == Endpoint::kCompletions && r.ok()) {
    s->set_max_tokens(16);  // OpenAI's default for completions; chat runs to the context end
  }
  if (r.Int("min_tokens", 0, kInt32Max, &i)) s->set_min_tokens(static_cast<int32_t>(i));
  if (r.Bool("ignore_eos", &b)) s->set_ignore_eos(b);
  if (r.Bool("include_stop_str_in_output", &b)) s->set_include_stop_str_in_output(b);
  if (r.Bool("skip_special_tokens", &b)) s->set_skip_special_tokens(b);
  if (const json* stop = r.Get("stop")) {
    if (stop->is_string()) {
      s->add_stop(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (size_t k = 0; k < stop->size(); ++k) {
        const json& e = (*stop)[k];
        if (!e.is_string()) {
          r.WrongType("stop[" + std::to_string(k) + "]", "a string", e);
          break;
        }
        s->add_stop(e.get<std::string>());
      }
    } else {
      r.WrongType("stop", "a string or an array of strings", *stop);
    }
  }
  if (const json* ids = r.Get("stop_token_ids")) {
    if (!ids->is_array()) {
      r.WrongType("stop_token_ids", "an array of integers", *ids);
    } else {
      for (size_t k = 0; k < ids->size() && r.ok(); ++k) {
        if (r.Int("stop_token_ids[" + std::to_string(k) + "]", (*ids)[k], INT32_MIN, kInt32Max,
                  &i)) {
          s->add_stop_token_ids(static_cast<int32_t>(i));
        }
      }
    }
  }
  if (const json* bias = r.Get("logit_bias")) {
    if (!bias->is_object()) {
      r.WrongType("logit_bias", "an object of token id -> bias", *bias);
    } else {
      for (auto it = bias->begin(); it != bias->end() && r.ok(); ++it) {
        const std::string& key = it.key();
        size_t used = 0;
        long long id = -1;
        try {
          id = std::stoll(key, &used);
        } catch (...) {
          used = 0;
        }
        if (used == 0 || used != key.size() || id < INT32_MIN || id > kInt32Max) {
          r.Fail("logit_bias", "logit_bias: key '" + key + "' is not a token id");
          break;
        }
        if (!it.value().is_number()) {
          r.WrongType("logit_bias", "an object of token id -> number", it.value());
          break;
        }
        (*s->mutable_logit_bias())[static_cast<int32_t>(id)] = it.value().get<float>();
      }
    }
  }
  // Logprobs: completions `logprobs: k`; chat `logprobs: true` + `top_logprobs: k`.
  if (endpoint == Endpoint::kCompletions) {
    if (const json* lp = r.Get("logprobs")) {
      if (lp->is_boolean()) {
        if (lp->get<bool>()) out->logprobs = 0;
      } else if (r.Int("logprobs", *lp, 0, 20, &i)) {
        out->logprobs = static_cast<int32_t>(i);
      }
    }
  } else {
    bool want = false;
    r.Bool("logprobs", &want);
    int64_t top = 0;
    const bool has_top = r.Int("top_logprobs", 0, 20, &top);
    if (has_top && !want && r.ok()) {
      r.Fail("top_logprobs", "top_logprobs: requires logprobs: true");
    }
    if (want) out->logprobs = static_cast<int32_t>(top);
  }
  if (out->logprobs >= 0) {
    s->set_return_logprobs(true);
    s->set_top_logprobs(out->logprobs);
  }
  // astr: each token's sampling mask, in its logprobs entry (so logprobs must be on).
  bool mask = false;
  if (r.Bool("return_sampling_mask", &mask) && mask) {
    if (out->logprobs < 0) {
      r.Fail("return_sampling_mask", std::string("return_sampling_mask: requires logprobs") +
                                         (endpoint == Endpoint::kChat ? ": true" : "") +
                                         " (the mask is returned in each token's logprobs entry)");
    } else {
      s->set_return_sampling_mask(true);
      out->return_sampling_mask = true;
    }
  }
  std::string mode;
  if (r.String("logprobs_mode", &mode)) {
    if (mode == "raw" || mode == "raw_logprobs") {
      s->set_logprobs_mode(v1::LOGPROBS_MODE_RAW);
    } else if (mode == "processed" || mode == "processed_logprobs") {
      s->set_logprobs_mode(v1::LOGPROBS_MODE_PROCESSED);
    } else {
      r.Fail("logprobs_mode", "logprobs_mode: must be \"raw\" or \"processed\", got \"" + mode +
                                  "\"");
    }
  }
}

// Fields every prompt's GenerateRequest shares.
void ReadRequestFields(Reader& r, v1::GenerateRequest* g, ApiRequest* out) {
  int64_t i = 0;
  bool b = false;
  if (r.Int("n", 1, kInt32Max, &i)) g->set_n(static_cast<int32_t>(i));
  if (r.Int("priority", INT32_MIN, kInt32Max, &i)) g->set_priority(static_cast<int32_t>(i));
  if (r.Bool("return_token_ids", &b)) out->return_token_ids = b;
  if (r.Bool("return_weight_versions", &b)) out->return_weight_versions = b;
  g->set_return_prompt_ids(out->return_token_ids);
  std::string salt;
  if (r.String("cache_salt", &salt)) g->set_cache_salt(salt);  // checked by the request builder
  std::string kv;
  if (r.String("kv_on_weight_update", &kv)) {
    if (kv == "recompute") {
      g->set_kv_on_weight_update(v1::KV_ON_WEIGHT_UPDATE_RECOMPUTE);
    } else if (kv == "reuse") {
      g->set_kv_on_weight_update(v1::KV_ON_WEIGHT_UPDATE_REUSE);
    } else {
      r.Fail("kv_on_weight_update",
             "kv_on_weight_update: must be \"recompute\" or \"reuse\", got \"" + kv + "\"");
    }
  }
  if (const json* best_of = r.Get("best_of")) {
    int64_t n = g->n() == 0 ? 1 : g->n();
    if (r.Int("best_of", *best_of, 1, kInt32Max, &i) && i != n) {
      r.Fail("best_of", "best_of: only best_of = n is supported");
    }
  }
  if (const json* suffix = r.Get("suffix")) {
    if (!suffix->is_string() || !suffix->get<std::string>().empty()) {
      r.Fail("suffix", "suffix: not supported");
    }
  }
  ReadConstraint(r, g->mutable_sampling(), out);
}

// Chat message content: a string, or an array of text parts (joined with "\n").
bool ReadContent(Reader& r, const json& content, const std::string& path, std::string* out) {
  if (content.is_string()) {
    *out = content.get<std::string>();
    return true;
  }
  if (!content.is_array()) return r.WrongType(path, "a string or an array of content parts", content);
  std::string text;
  for (size_t k = 0; k < content.size(); ++k) {
    const std::string part_path = path + "[" + std::to_string(k) + "]";
    const json& part = content[k];
    if (!part.is_object()) return r.WrongType(part_path, "an object", part);
    auto type = part.find("type");
    if (type == part.end() || !type->is_string()) {
      return r.Fail(part_path + ".type", part_path + ".type: missing (must be \"text\")");
    }
    if (type->get<std::string>() != "text") {
      return r.Fail(part_path + ".type", part_path + ".type: '" + type->get<std::string>() +
                                             "' is not supported (this model takes text only)");
    }
    auto t = part.find("text");
    if (t == part.end() || !t->is_string()) {
      return r.Fail(part_path + ".text", part_path + ".text: must be a string");
    }
    if (!text.empty()) text += "\n";
    text += t->get<std::string>();
  }
  *out = std::move(text);
  return true;
}

void ReadChat(Reader& r, const json& body, v1::GenerateRequest* g, ApiRequest* out) {
  const json* messages = r.Get("messages");
  if (messages == nullptr) {
    r.Fail("messages", "messages: missing");
    return;
  }
  if (!messages->is_array()) {
    r.WrongType("messages", "an array of messages", *messages);
    return;
  }
  if (messages->empty()) {
    r.Fail("messages", "messages: must not be empty");
    return;
  }
  v1::ChatInput* chat = g->mutable_chat();
  for (size_t k = 0; k < messages->size() && r.ok(); ++k) {
    const std::string path = "messages[" + std::to_string(k) + "]";
    const json& m = (*messages)[k];
    if (!m.is_object()) {
      r.WrongType(path, "an object", m);
      return;
    }
    v1::ChatMessage* msg = chat->add_messages();
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) {
      r.Fail(path + ".role", path + ".role: must be a string");
      return;
    }
    msg->set_role(role->get<std::string>());
    // OpenAI's roles; "developer" is its newer name for "system".
    if (msg->role() == "developer") msg->set_role("system");
    if (msg->role() != "system" && msg->role() != "user" && msg->role() != "assistant" &&
        msg->role() != "tool") {
      r.Fail(path + ".role", path + ".role: '" + msg->role() +
                                 "' is not one of system, developer, user, assistant, tool");
      return;
    }
    auto content = m.find("content");
    if (content != m.end() && !content->is_null()) {
      std::string text;
      if (!ReadContent(r, *content, path + ".content", &text)) return;
      msg->set_content(std::move(text));
    } else if (!(msg->role() == "assistant" && m.contains("tool_calls"))) {
      r.Fail(path + ".content", path + ".content: missing");
      return;
    }
    auto name = m.find("name");
    if (name != m.end() && !name->is_null()) {
      if (!name->is_string()) {
        r.WrongType(path + ".name", "a string", *name);
        return;
      }
      msg->set_name(name->get<std::string>());
    }
    auto call_id = m.find("tool_call_id");
    if (call_id != m.end() && !call_id->is_null()) {
      if (!call_id->is_string()) {
        r.WrongType(path + ".tool_call_id", "a string", *call_id);
        return;
      }
      msg->set_tool_call_id(call_id->get<std::string>());
    }
    auto calls = m.find("tool_calls");
    if (calls != m.end() && !calls->is_null()) {
      if (!calls->is_array()) {
        r.WrongType(path + ".tool_calls", "an array", *calls);
        return;
      }
      msg->set_tool_calls_json(Dump(*calls));
    }
  }
  std::string choice = "auto";
  std::string named;
  if (const json* tool_choice = r.Get("tool_choice")) {
    if (tool_choice->is_string()) {
      choice = tool_choice->get<std::string>();
      if (choice != "none" && choice != "auto" && choice != "required") {
        r.Fail("tool_choice",
               "tool_choice: must be 'none', 'auto', 'required' or "
               "{\"type\": \"function\", \"function\": {\"name\": ...}}, got '" +
                   choice + "'");
      }
    } else if (!tool_choice->is_object()) {
      r.WrongType("tool_choice", "a string or an object", *tool_choice);
    } else {
      auto fn = tool_choice->find("function");
      auto name = fn != tool_choice->end() && fn->is_object() ? fn->find("name") : fn;
      if (fn == tool_choice->end() || !fn->is_object() || name == fn->end() || !name->is_string()) {
        r.Fail("tool_choice.function.name", "tool_choice.function.name: must be a string");
      } else {
        choice = "named";
        named = name->get<std::string>();
      }
    }
  }
  std::vector<std::string> names;
  if (const json* tools = r.Get("tools")) {
    if (!tools->is_array()) {
      r.WrongType("tools", "an array of tools", *tools);
    } else {
      for (size_t k = 0; k < tools->size() && r.ok(); ++k) {
        const json& t = (*tools)[k];
        const std::string path = "tools[" + std::to_string(k) + "]";
        auto fn = t.is_object() ? t.find("function") : t.end();
        auto name = t.is_object() && fn != t.end() && fn->is_object() ? fn->find("name") : t.end();
        if (!t.is_object() || fn == t.end() || !fn->is_object() || name == fn->end() ||
            !name->is_string() || name->get<std::string>().empty()) {
          r.Fail(path + ".function.name", path + ".function.name: must be a non-empty string");
          break;
        }
        names.push_back(name->get<std::string>());
      }
      if (choice != "none") chat->set_tools_json(Dump(*tools));  // "none": the template sees none
    }
  }
  if (!r.ok()) return;
  out->has_tools = !names.empty();
  if ((choice == "required" || choice == "named") && names.empty()) {
    r.Fail("tool_choice", "tool_choice: '" + choice + "' needs tools");
    return;
  }
  if (choice == "named" && std::find(names.begin(), names.end(), named) == names.end()) {
    r.Fail("tool_choice.function.name",
           "tool_choice.function.name: '" + named + "' is not one of the tools");
    return;
  }
  using TC = ApiRequest::ToolChoice;
  out->tool_choice = names.empty() || choice == "none" ? TC::kNone
                     : choice == "required"            ? TC::kRequired
                     : choice == "named"               ? TC::kNamed
                                                       : TC::kAuto;
  out->tool_name = named;
  bool b = false;
  if (r.Bool("add_generation_prompt", &b)) chat->set_add_generation_prompt(b);
  if (r.Bool("continue_final_message", &b)) chat->set_continue_final_message(b);
  if (const json* kwargs = r.Get("chat_template_kwargs")) {
    if (!kwargs->is_object()) {
      r.WrongType("chat_template_kwargs", "an object", *kwargs);
    } else {
      chat->set_template_kwargs_json(Dump(*kwargs));
    }
  }
}

// Completions prompts: a string, strings, token ids, or lists of token ids.
void ReadPrompts(Reader& r, const v1::GenerateRequest& base, std::vector<v1::GenerateRequest>* out) {
  const json* prompt = r.Get("prompt");
  if (prompt == nullptr) {
    r.Fail("prompt", "prompt: missing");
    return;
  }
  auto add_text = [&](const std::string& text) {
    out->push_back(base);
    out->back().set_text(text);
  };
  auto add_ids = [&](const json& ids, const std::string& path) {
    v1::GenerateRequest g = base;
    auto* t = g.mutable_token_ids();
    for (size_t k = 0; k < ids.size(); ++k) {
      int64_t id = 0;
      if (!r.Int(path + "[" + std::to_string(k) + "]", ids[k], INT32_MIN, kInt32Max, &id)) return;
      t->add_ids(static_cast<int32_t>(id));
    }
    if (ids.empty()) {
      r.Fail(path, path + ": must not be empty");
      return;
    }
    out->push_back(std::move(g));
  };
  if (prompt->is_string()) return add_text(prompt->get<std::string>());
  if (!prompt->is_array()) {
    r.WrongType("prompt", "a string, an array of strings or token ids", *prompt);
    return;
  }
  if (prompt->empty()) {
    r.Fail("prompt", "prompt: must not be empty");
    return;
  }
  const json& first = (*prompt)[0];
  if (first.is_number()) return add_ids(*prompt, "prompt");
  for (size_t k = 0; k < prompt->size() && r.ok(); ++k) {
    const json& p = (*prompt)[k];
    const std::string path = "prompt[" + std::to_string(k) + "]";
    if (first.is_string()) {
      if (!p.is_string()) {
        r.WrongType(path, "a string", p);
        return;
      }
      add_text(p.get<std::string>());
    } else if (first.is_array()) {
      if (!p.is_array()) {
        r.WrongType(path, "an array of token ids", p);
        return;
      }
      add_ids(p, path);
    } else {
      r.WrongType(path, "a string or an array of token ids", p);
      return;
    }
  }
}

// The OpenAI name of a field path of the shared validation (v1::GenerateRequest paths).
std::string OpenAiParam(const std::string& path, const ApiRequest& request) {
  const bool chat = request.endpoint == Endpoint::kChat;
  auto starts = [&](std::string_view p) { return path.rfind(p, 0) == 0; };
  if (starts("sampling.constraint")) {
    // Compile errors: under the field the constraint came from.
    std::string rest = path.substr(std::string_view("sampling.constraint").size());
    if (request.constraint_param == "tool_choice") return "tools";
    if (request.constraint_param == "structured_outputs") {
      if (rest.rfind(".json_schema", 0) == 0) return "structured_outputs.json";
      if (rest.rfind(".choice.choices", 0) == 0) {
        return "structured_outputs.choice" +
               rest.substr(std::string_view(".choice.choices").size());
      }
      return "structured_outputs" + rest;
    }
    if (rest.rfind(".json_schema", 0) == 0) return "response_format.json_schema.schema";
    return "response_format";
  }
  if (starts("sampling.min_tokens") && !request.constraint_param.empty()) return "min_tokens";
  if (starts("sampling.")) {
    std::string rest = path.substr(9);
    if (rest.rfind("max_tokens", 0) == 0) {
      return request.max_completion_tokens ? "max_completion_tokens" : "max_tokens";
    }
    if (rest.rfind("top_logprobs", 0) == 0) return chat ? "top_logprobs" : "logprobs";
    if (rest.rfind("stop[", 0) == 0) return "stop";
    if (rest.rfind("logit_bias", 0) == 0) return "logit_bias";
    return rest;
  }
  if (starts("chat.messages")) return path.substr(5);
  if (starts("chat.tools_json")) return "tools";
  if (starts("chat.template_kwargs_json")) return "chat_template_kwargs";
  if (starts("chat.add_generation_prompt")) return "add_generation_prompt";
  if (starts("chat.continue_final_message")) return "continue_final_message";
  if (starts("chat")) return "messages";
  if (starts("text") || starts("token_ids") || starts("input")) return chat ? "messages" : "prompt";
  return path;
}

}  // namespace

std::string ApiError::Json() const {
  json e = {{"message", message},
            {"type", type},
            {"param", param.empty() ? json(nullptr) : json(param)},
            {"code", code.empty() ? json(nullptr) : json(code)}};
  return Dump(json{{"error", std::move(e)}});
}

namespace {

// The body as a JSON object, or the error.
std::optional<json> ParseObject(const std::string& body, ApiError* error) {
  error->status = 400;
  if (Status depth = CheckJsonDepth(body, "body"); !depth.ok()) {
    error->message = depth.message();
    return std::nullopt;
  }
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception& e) {
    // parse_error, and out_of_range for a number past the double range (1e999): neither may
    // escape into the server.
    error->message = std::string("the body is not valid JSON: ") + e.what();
    return std::nullopt;
  }
  if (!j.is_object()) {
    error->message = "the body must be a JSON object, got " + Reader::TypeName(j);
    return std::nullopt;
  }
  return j;
}

}  // namespace

namespace {

// A JSON schema given as an object was dumped from `json`, whose objects sort their keys; the
// order of "properties" is the order a constrained output writes them in, so the schema is dumped
// again from the body parsed with its key order kept.
void KeepSchemaKeyOrder(const std::string& body, v1::GenerateRequest* g) {
  const v1::Constraint& c = g->sampling().constraint();
  if (c.kind_case() != v1::Constraint::kJsonSchema) return;
  const nlohmann::ordered_json* node = nullptr;
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(body);
  } catch (const nlohmann::json::exception&) {
    return;  // cannot happen: the body parsed as json before
  }
  auto child = [](const nlohmann::ordered_json* n,
                  const char* key) -> const nlohmann::ordered_json* {
    if (n == nullptr || !n->is_object()) return nullptr;
    auto it = n->find(key);
    return it == n->end() ? nullptr : &*it;
  };
  node = child(child(child(&j, "response_format"), "json_schema"), "schema");
  if (node == nullptr) node = child(child(&j, "structured_outputs"), "json");
  if (node != nullptr && node->is_object()) {
    g->mutable_sampling()->mutable_constraint()->set_json_schema(
        node->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  }
}

}  // namespace

namespace {

// tool_choice "required" or a named function: the constraint that makes the output the calls
// (a JSON array of {"name", "arguments"} / the named function's arguments), from the tools'
// parameter schemas in the body's key order.
void ForceToolCalls(Reader& r, const std::string& body, v1::GenerateRequest* g, ApiRequest* req) {
  using TC = ApiRequest::ToolChoice;
  if (req->tool_choice != TC::kRequired && req->tool_choice != TC::kNamed) return;
  if (g->sampling().has_constraint()) {
    r.Fail("tool_choice", "tool_choice: a required or named tool call cannot be combined with " +
                              req->constraint_param);
    return;
  }
  using ojson = nlohmann::ordered_json;
  const ojson j = ojson::parse(body);  // parsed as json before: cannot throw
  auto params = [](const ojson& tool) {
    const ojson& fn = tool.at("function");
    auto p = fn.find("parameters");
    return p != fn.end() && p->is_object() ? *p : ojson{{"type", "object"}};
  };
  ojson schema;
  if (req->tool_choice == TC::kNamed) {
    for (const ojson& t : j.at("tools")) {
      if (t.at("function").at("name") == req->tool_name) schema = params(t);
    }
  } else {
    ojson any = ojson::array();
    for (const ojson& t : j.at("tools")) {
      any.push_back(
          {{"type", "object"},
           {"properties",
            {{"name", {{"const", t.at("function").at("name")}}}, {"arguments", params(t)}}},
           {"required", {"name", "arguments"}},
           {"additionalProperties", false}});
    }
    schema = {{"type", "array"}, {"minItems", 1}, {"items", {{"anyOf", any}}}};
  }
  g->mutable_sampling()->mutable_constraint()->set_json_schema(
      schema.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  req->constraint_param = "tool_choice";
}

}  // namespace

ParseResult ParseRequest(Endpoint endpoint, const std::string& body,
                         const std::string& request_id_header) {
  ParseResult result;
  std::optional<json> parsed = ParseObject(body, &result.error);
  if (!parsed) return result;
  const json& j = *parsed;

  ApiRequest req;
  req.endpoint = endpoint;
  Reader r(j);
  r.String("model", &req.model);
  r.Bool("stream", &req.stream);
  if (const json* options = r.Get("stream_options")) {
    if (!options->is_object()) {
      r.WrongType("stream_options", "an object", *options);
    } else if (!req.stream) {
      r.Fail("stream_options", "stream_options: only allowed with stream: true");
    } else {
      auto usage = options->find("include_usage");
      if (usage != options->end() && !usage->is_null()) {
        if (!usage->is_boolean()) {
          r.WrongType("stream_options.include_usage", "a boolean", *usage);
        } else {
          req.include_usage = usage->get<bool>();
        }
      }
    }
  }
  if (endpoint == Endpoint::kCompletions) r.Bool("echo", &req.echo);
  std::string user;
  r.String("user", &user);
  if (!r.String("request_id", &req.request_id)) req.request_id = request_id_header;

  v1::GenerateRequest base;
  ReadSampling(r, endpoint, base.mutable_sampling(), &req);
  ReadRequestFields(r, &base, &req);
  KeepSchemaKeyOrder(body, &base);
  bool add_special = false;
  if (r.Bool("add_special_tokens", &add_special)) base.set_add_special_tokens(add_special);
  if (req.echo && req.logprobs >= 0) base.set_logprob_start(1);  // the prompt's logprobs too
  if (endpoint == Endpoint::kChat) {
    ReadChat(r, j, &base, &req);
    if (r.ok()) ForceToolCalls(r, body, &base, &req);
    req.prompts.push_back(std::move(base));
  } else {
    ReadPrompts(r, base, &req.prompts);
  }
  if (!r.ok()) {
    result.error = r.error();
    return result;
  }
  if (req.prompts.size() > 1 && !req.request_id.empty()) {
    for (size_t k = 0; k < req.prompts.size(); ++k) {
      req.prompts[k].set_request_id(req.request_id + "-" + std::to_string(k));
    }
  } else if (!req.prompts.empty()) {
    req.prompts[0].set_request_id(req.request_id);
  }
  result.request = std::move(req);
  return result;
}

TokenizeParse ParseTokenize(const std::string& body) {
  TokenizeParse out;
  std::optional<json> j = ParseObject(body, &out.error);
  if (!j) return out;
  Reader r(*j);
  r.String("model", &out.model);
  r.Bool("return_token_strs", &out.return_token_strs);
  v1::TokenizeRequest t;
  bool b = false;
  const bool has_special = r.Bool("add_special_tokens", &b);
  if (r.Get("messages") != nullptr) {
    v1::GenerateRequest g;
    ApiRequest unused;
    ReadChat(r, *j, &g, &unused);
    *t.mutable_chat() = g.chat();
  } else {
    std::string prompt;
    if (const json* p = r.Get("prompt"); p == nullptr) {
      r.Fail("prompt", "prompt: missing (send prompt or messages)");
    } else if (r.String("prompt", &prompt)) {
      t.set_text(prompt);
    }
    if (has_special) t.set_add_special_tokens(b);
  }
  if (!r.ok()) {
    out.error = r.error();
    return out;
  }
  out.request = std::move(t);
  return out;
}

DetokenizeParse ParseDetokenize(const std::string& body) {
  DetokenizeParse out;
  std::optional<json> j = ParseObject(body, &out.error);
  if (!j) return out;
  Reader r(*j);
  r.String("model", &out.model);
  v1::DetokenizeRequest d;
  const json* tokens = r.Get("tokens");
  if (tokens == nullptr) {
    r.Fail("tokens", "tokens: missing");
  } else if (!tokens->is_array()) {
    r.WrongType("tokens", "an array of token ids", *tokens);
  } else {
    for (size_t k = 0; k < tokens->size() && r.ok(); ++k) {
      int64_t id = 0;
      if (r.Int("tokens[" + std::to_string(k) + "]", (*tokens)[k], INT32_MIN, kInt32Max, &id)) {
        d.add_token_ids(static_cast<int32_t>(id));
      }
    }
  }
  bool b = false;
  if (r.Bool("skip_special_tokens", &b)) d.set_skip_special_tokens(b);
  if (!r.ok()) {
    out.error = r.error();
    return out;
  }
  out.request = std::move(d);
  return out;
}

ApiError ApiErrorFromStatus(const Status& status, const ApiRequest& request) {
  ApiError e;
  e.message = status.message();
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kFailedPrecondition:
    case StatusCode::kOutOfRange: {
      e.status = 400;
      // The error's field (a v1::GenerateRequest path: "sampling.top_p", "chat.messages[0].role",
      // "text"), which the message starts with; renamed to the OpenAI request's names.
      const std::string& m = status.message();
      const std::string& path = status.field();
      const size_t end = path.size();
      if (!path.empty() && m.compare(0, end, path) == 0) {
        std::string param = OpenAiParam(path, request);
        // "sampling.logit_bias[5]" -> param "logit_bias", message keeps the key.
        std::string shown = path.rfind("sampling.", 0) == 0 ? path.substr(9) : path;
        if (path.rfind("chat.", 0) == 0) shown = path.substr(5);
        if (param == "tools") shown = param;  // chat.tools_json: the body's tools
        if (path == "text" || path.rfind("token_ids", 0) == 0 || path == "input" ||
            path == "chat") {
          shown = param;
        }
        if (path.rfind("sampling.constraint", 0) == 0) shown = param;
        if (shown.rfind("max_tokens", 0) == 0 && request.max_completion_tokens) {
          shown = "max_completion_tokens" + shown.substr(10);
        }
        e.param = std::move(param);
        e.message = shown + m.substr(end);
      }
      break;
    }
    case StatusCode::kResourceExhausted:
      // A request larger than every worker's KV pool can never be served: the client's to fix.
      if (status.kind() == ErrorKind::kNeverFits) {
        e.status = 400;
        e.param = request.max_completion_tokens ? "max_completion_tokens" : "max_tokens";
      } else {
        e.status = 429;
        e.type = "rate_limit_error";
        e.retry_after_s = 1;
      }
      break;
    case StatusCode::kUnauthenticated:
      e.status = 401;
      e.code = "invalid_api_key";
      break;
    case StatusCode::kUnavailable:
      e.status = 503;
      e.type = "service_unavailable";
      e.retry_after_s = 1;
      break;
    case StatusCode::kDeadlineExceeded:
      e.status = 504;
      e.type = "timeout";
      break;
    case StatusCode::kCancelled:
      e.status = 499;
      e.type = "cancelled";
      break;
    default:
      e.status = 500;
      e.type = "internal_error";
      break;
  }
  return e;
}

void ChoiceOutput::Append(const SampleDelta& d) {
  text += d.text;
  token_ids.insert(token_ids.end(), d.token_ids.begin(), d.token_ids.end());
  logprobs.insert(logprobs.end(), d.logprobs.begin(), d.logprobs.end());
  top.insert(top.end(), d.top.begin(), d.top.end());
  masks.insert(masks.end(), d.masks.begin(), d.masks.end());
  for (const VersionSpan& s : d.versions) AppendVersionSpan(&versions, s);
  if (d.finished) {
    finished = true;
    finish_reason = d.finish_reason;
    stop_string = d.stop_string;
    stop_token_id = d.stop_token_id;
  }
}

const char* FinishReasonName(v1::FinishReason reason) {
  switch (reason) {
    case v1::FINISH_REASON_LENGTH:
      return "length";
    case v1::FINISH_REASON_STOP:
    case v1::FINISH_REASON_EOS:
      return "stop";
    case v1::FINISH_REASON_ABORT:
      return "abort";
    default:
      return nullptr;
  }
}

TokenTexts::TokenTexts(const tok::Tokenizer& tokenizer) {
  // A decode drops a leading space at the start of a text (SentencePiece): decode each token
  // after an ordinary one and keep what it added.
  const std::vector<int32_t> anchor_ids = tokenizer.Encode("a", {.add_special_tokens = false});
  const int32_t anchor = anchor_ids.size() == 1 ? anchor_ids[0] : -1;
  const std::string anchor_text =
      anchor >= 0 ? tokenizer.Decode(anchor_ids, /*skip_special_tokens=*/false) : std::string();
  texts_.resize(tokenizer.vocab_size());
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    const std::string& piece = tokenizer.IdToToken(id);
    if (tokenizer.IsByteFallbackToken(id) && piece.size() == 6) {  // "<0xE2>"
      texts_[id] = std::string(1, static_cast<char>(std::stoi(piece.substr(3, 2), nullptr, 16)));
      continue;
    }
    const int32_t one[1] = {id};
    std::string alone = tokenizer.Decode(one, /*skip_special_tokens=*/false);
    if (anchor >= 0 && !tokenizer.IsSpecial(id)) {
      const int32_t pair[2] = {anchor, id};
      std::string joined = tokenizer.Decode(pair, /*skip_special_tokens=*/false);
      if (joined.rfind(anchor_text, 0) == 0) alone = joined.substr(anchor_text.size());
    }
    texts_[id] = std::move(alone);
  }
}

const std::string& TokenTexts::operator[](int32_t id) const {
  return id >= 0 && id < static_cast<int32_t>(texts_.size()) ? texts_[id] : empty_;
}

namespace {

// The alternatives of a position when none were asked for (logprobs: 0): an empty object.
const std::vector<TokenLogprob> kNoTop;

json Bytes(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

json FinishOf(const ChoiceOutput& c) {
  const char* name = c.finished ? FinishReasonName(c.finish_reason) : nullptr;
  return name == nullptr ? json(nullptr) : json(name);
}

// vLLM's stop_reason: the stop string or stop token id that ended the choice, else null.
json StopReasonOf(const ChoiceOutput& c) {
  if (c.stop_string) return *c.stop_string;
  if (c.stop_token_id) return *c.stop_token_id;
  return nullptr;
}

// astr's sampling mask of one token: {"count": n, "token_ids": [ascending ids]} (token_ids empty
// when count is the vocabulary size); null where there is none (an echoed prompt token).
json MaskJson(const ChoiceOutput& c, size_t i) {
  if (i >= c.masks.size()) return nullptr;
  return {{"count", c.masks[i].count}, {"token_ids", c.masks[i].ids}};
}

// Chat: {"content": [{token, logprob, bytes, top_logprobs: [...]}], "refusal": null}, each entry
// with astr's "sampling_mask" when return_sampling_mask.
json ChatLogprobs(const ResponseContext& ctx, const ChoiceOutput& c) {
  json content = json::array();
  for (size_t i = 0; i < c.token_ids.size(); ++i) {
    const std::string text = (*ctx.texts)[c.token_ids[i]];
    json top = json::array();
    if (i < c.top.size()) {
      for (const TokenLogprob& t : c.top[i]) {
        const std::string alt = (*ctx.texts)[t.id];
        top.push_back({{"token", alt}, {"logprob", t.logprob}, {"bytes", Bytes(alt)}});
      }
    }
    content.push_back({{"token", text},
                       {"logprob", i < c.logprobs.size() ? c.logprobs[i] : 0.0f},
                       {"bytes", Bytes(text)},
                       {"top_logprobs", std::move(top)}});
    if (ctx.request->return_sampling_mask) content.back()["sampling_mask"] = MaskJson(c, i);
  }
  return {{"content", std::move(content)}, {"refusal", nullptr}};
}

// Completions: {tokens, token_logprobs, top_logprobs: [{text: logprob}], text_offset}, and with
// return_sampling_mask astr's "sampling_mask": one per token (null for echoed prompt tokens).
// `offset`: where the choice's text starts in the returned text (after an echoed prompt).
json CompletionLogprobs(const ResponseContext& ctx, const ChoiceOutput& c, const PromptInfo* echo,
                        size_t offset) {
  json tokens = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  json masks = json::array();
  size_t at = offset;
  auto add = [&](int32_t id, const json& lp, const std::vector<TokenLogprob>* top) {
    const std::string text = (*ctx.texts)[id];
    tokens.push_back(text);
    lps.push_back(lp);
    if (top == nullptr) {
      tops.push_back(nullptr);
    } else {
      json m = json::object();
      for (const TokenLogprob& t : *top) {
        const std::string alt = (*ctx.texts)[t.id];
        if (!m.contains(alt)) m[alt] = t.logprob;
      }
      tops.push_back(std::move(m));
    }
    offsets.push_back(at);
    at += text.size();
  };
  const bool want_top = ctx.request->logprobs > 0;
  if (echo != nullptr) {
    at = 0;
    for (size_t i = 0; i < echo->ids.size(); ++i) {
      // Position 0 has no logprob; position i's score is logprobs[i - 1].
      const bool scored = i > 0 && i - 1 < echo->logprobs.size();
      const std::vector<TokenLogprob>* top = nullptr;
      if (scored) top = want_top && i - 1 < echo->top.size() ? &echo->top[i - 1] : &kNoTop;
      add(echo->ids[i], scored ? json(echo->logprobs[i - 1]) : json(nullptr), top);
      masks.push_back(nullptr);
    }
    at = offset;
  }
  for (size_t i = 0; i < c.token_ids.size(); ++i) {
    add(c.token_ids[i], i < c.logprobs.size() ? json(c.logprobs[i]) : json(nullptr),
        want_top && i < c.top.size() ? &c.top[i] : &kNoTop);
    masks.push_back(MaskJson(c, i));
  }
  json out = {{"tokens", std::move(tokens)},
              {"token_logprobs", std::move(lps)},
              {"top_logprobs", std::move(tops)},
              {"text_offset", std::move(offsets)}};
  if (ctx.request->return_sampling_mask) out["sampling_mask"] = std::move(masks);
  return out;
}

json UsageJson(const UsageTotals& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

json VersionsJson(const ChoiceOutput& c) {
  json v = json::array();
  for (const VersionSpan& s : c.versions) {
    v.push_back({{"version", s.version}, {"start", s.start}, {"count", s.count}});
  }
  return v;
}

json Envelope(const ResponseContext& ctx, bool chunk) {
  const bool chat = ctx.request->endpoint == Endpoint::kChat;
  return {{"id", ctx.id},
          {"object", chat ? (chunk ? "chat.completion.chunk" : "chat.completion")
                          : "text_completion"},
          {"created", ctx.created},
          {"model", ctx.model}};
}

}  // namespace

// "call_<response id>_<choice>_<call>": unique per call of the response, the same streamed or not.
std::string ToolCallId(const ResponseContext& ctx, int32_t choice, size_t call) {
  return "call_" + ctx.id + "_" + std::to_string(choice) + "_" + std::to_string(call);
}

// The sample ended by itself (EOS, a stop id or string), not by length or abort.
bool EndedNormally(const ChoiceOutput& c) {
  return c.finished &&
         (c.finish_reason == v1::FINISH_REASON_STOP || c.finish_reason == v1::FINISH_REASON_EOS);
}

std::string UnaryResponse(const ResponseContext& ctx, const std::vector<ChoiceOutput>& choices,
                          const std::vector<PromptInfo>& prompts, int32_t n,
                          const UsageTotals& usage) {
  const ApiRequest& req = *ctx.request;
  const bool chat = req.endpoint == Endpoint::kChat;
  json out = Envelope(ctx, false);
  json list = json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceOutput& c = choices[i];
    const PromptInfo& p = prompts[i / n];
    json choice = {{"index", i}, {"finish_reason", FinishOf(c)}, {"stop_reason", StopReasonOf(c)}};
    if (chat && req.tool_format != ToolCallFormat::kNone) {
      const ParsedToolCalls parsed = ParseToolCalls(req.tool_format, c.text, req.tool_name);
      json message = {
          {"role", "assistant"},
          {"content",
           parsed.calls.empty() || !parsed.content.empty() ? json(parsed.content) : json(nullptr)},
          {"refusal", nullptr}};
      if (!parsed.calls.empty()) {
        json calls = json::array();
        for (size_t k = 0; k < parsed.calls.size(); ++k) {
          calls.push_back(
              {{"id", ToolCallId(ctx, static_cast<int32_t>(i), k)},
               {"type", "function"},
               {"function",
                {{"name", parsed.calls[k].name}, {"arguments", parsed.calls[k].arguments}}}});
        }
        message["tool_calls"] = std::move(calls);
        if (EndedNormally(c)) choice["finish_reason"] = "tool_calls";
      }
      choice["message"] = std::move(message);
      choice["logprobs"] = req.logprobs >= 0 ? ChatLogprobs(ctx, c) : json(nullptr);
    } else if (chat) {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}, {"refusal", nullptr}};
      choice["logprobs"] = req.logprobs >= 0 ? ChatLogprobs(ctx, c) : json(nullptr);
    } else {
      const PromptInfo* echo = req.echo ? &p : nullptr;
      choice["text"] = echo != nullptr ? p.text + c.text : c.text;
      choice["logprobs"] = req.logprobs >= 0
                               ? CompletionLogprobs(ctx, c, echo, echo ? p.text.size() : 0)
                               : json(nullptr);
    }
    if (req.return_token_ids) choice["token_ids"] = c.token_ids;
    if (req.return_weight_versions) choice["weight_versions"] = VersionsJson(c);
    list.push_back(std::move(choice));
  }
  out["choices"] = std::move(list);
  out["usage"] = UsageJson(usage);
  out["seed"] = ctx.seed;  // astr: the seed used (the request's or the one drawn)
  if (req.return_token_ids) {
    if (prompts.size() == 1) {
      out["prompt_token_ids"] = prompts[0].ids;
    } else {
      json all = json::array();
      for (const PromptInfo& p : prompts) all.push_back(p.ids);
      out["prompt_token_ids"] = std::move(all);
    }
  }
  return Dump(out);
}

std::string StreamChunk(const ResponseContext& ctx, int32_t index, const ChoiceOutput& delta,
                        const PromptInfo* echo_prompt, bool first, size_t sent_bytes,
                        const ToolChunk* tools) {
  const ApiRequest& req = *ctx.request;
  const bool chat = req.endpoint == Endpoint::kChat;
  json out = Envelope(ctx, true);
  json choice = {{"index", index}, {"finish_reason", FinishOf(delta)}};
  if (delta.finished) choice["stop_reason"] = StopReasonOf(delta);
  if (chat) {
    json d = json::object();
    if (first) d["role"] = "assistant";
    const std::string& content = tools != nullptr ? tools->content : delta.text;
    if (!content.empty() || first) d["content"] = content;
    if (tools != nullptr && !tools->deltas.empty()) {
      json calls = json::array();
      for (const ToolCallDelta& t : tools->deltas) {
        if (t.kind == ToolCallDelta::Kind::kStart) {
          calls.push_back({{"index", t.index},
                           {"id", ToolCallId(ctx, index, static_cast<size_t>(t.index))},
                           {"type", "function"},
                           {"function", {{"name", t.text}, {"arguments", ""}}}});
        } else if (t.kind == ToolCallDelta::Kind::kArguments) {
          calls.push_back({{"index", t.index}, {"function", {{"arguments", t.text}}}});
        }
      }
      if (!calls.empty()) d["tool_calls"] = std::move(calls);
    }
    if (tools != nullptr && tools->any_call && EndedNormally(delta)) {
      choice["finish_reason"] = "tool_calls";
    }
    choice["delta"] = std::move(d);
    choice["logprobs"] =
        req.logprobs >= 0 && !delta.token_ids.empty() ? ChatLogprobs(ctx, delta) : json(nullptr);
  } else {
    const PromptInfo* echo = first && req.echo ? echo_prompt : nullptr;
    choice["text"] = echo != nullptr ? echo->text + delta.text : delta.text;
    choice["logprobs"] =
        req.logprobs >= 0 && (echo != nullptr || !delta.token_ids.empty())
            ? CompletionLogprobs(ctx, delta, echo, sent_bytes + (echo ? echo->text.size() : 0))
            : json(nullptr);
  }
  if (req.return_token_ids) {
    choice["token_ids"] = delta.token_ids;
    if (first && echo_prompt != nullptr) choice["prompt_token_ids"] = echo_prompt->ids;
  }
  if (req.return_weight_versions) choice["weight_versions"] = VersionsJson(delta);
  out["choices"] = json::array({std::move(choice)});
  if (first && index == 0) out["seed"] = ctx.seed;
  if (req.include_usage) out["usage"] = nullptr;
  return "data: " + Dump(out) + "\n\n";
}

std::string UsageChunk(const ResponseContext& ctx, const UsageTotals& usage) {
  json out = Envelope(ctx, true);
  out["choices"] = json::array();
  out["usage"] = UsageJson(usage);
  return "data: " + Dump(out) + "\n\n";
}

std::string ErrorEvent(const ApiError& error) { return "data: " + error.Json() + "\n\n"; }

}  // namespace astr::front::openai
