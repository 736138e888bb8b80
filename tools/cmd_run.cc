// `astr run`: offline, in-process generation on the CPU backend.
#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "common/base/flags.h"
#include "common/base/token_ids.h"
#include "common/chat/chat_template.h"
#include "common/model/model_file.h"
#include "common/text/tokenizer/tokenizer.h"
#include "tools/command.h"
#include "worker/engine.h"
#include "worker/engine_flags.h"

namespace astr::cli {
namespace {

// Text in/out for `astr run`: the model's tokenizer (the GGUF vocabulary ModelFile already read,
// or the folder's tokenizer.json). A model without one still runs on --prompt-ids and prints ids.
class TextCodec {
 public:
  explicit TextCodec(const model::ModelFile& file) {
    auto t = file.vocab() != nullptr ? tok::Tokenizer::FromGgufVocab(*file.vocab(), file.path())
                                     : tok::Tokenizer::Load(file.path());
    if (t.ok()) {
      tokenizer_ = *t;
    } else {
      why_not_ = t.status();
    }
  }
  bool available() const { return tokenizer_ != nullptr; }
  const Status& why_not() const { return why_not_; }
  const tok::Tokenizer& tokenizer() const { return *tokenizer_; }
  std::vector<int32_t> Encode(const std::string& text, bool add_special, bool parse_special) const {
    return tokenizer_->Encode(text,
                              {.add_special_tokens = add_special, .parse_special = parse_special});
  }
  // The prompt that Decode's ids follow.
  void SetPrompt(std::vector<int32_t> prompt) {
    prompt_ = std::move(prompt);
    prompt_text_ = tokenizer_->Decode(prompt_);
  }
  // Text of `ids` generated after the prompt: decode(prompt + ids) minus decode(prompt), so that
  // SentencePiece's leading-space rule applies to the prompt, not to the continuation.
  std::string Decode(const std::vector<int32_t>& ids) const {
    std::vector<int32_t> all = prompt_;
    all.insert(all.end(), ids.begin(), ids.end());
    std::string full = tokenizer_->Decode(all);
    return full.compare(0, prompt_text_.size(), prompt_text_) == 0
               ? full.substr(prompt_text_.size())
               : full;
  }

 private:
  std::shared_ptr<const tok::Tokenizer> tokenizer_;
  Status why_not_;
  std::vector<int32_t> prompt_;
  std::string prompt_text_;  // Decode(prompt_), computed once
};

// The model's chat template rendered for one user message (and an optional system message),
// ending with the generation prompt.
StatusOr<std::string> RenderChat(const std::string& model, const std::string& template_file,
                                 const std::string& system, const std::string& user) {
  ASTR_ASSIGN_OR_RETURN(chat::ChatTemplate chat_template,
                        chat::ChatTemplate::LoadOrOverride(model, template_file));
  chat::ChatInputs inputs;
  if (!system.empty()) inputs.messages.push_back({{"role", "system"}, {"content", system}});
  inputs.messages.push_back({{"role", "user"}, {"content", user}});
  inputs.add_generation_prompt = true;
  return chat_template.Render(inputs);
}

int Fail(const Status& s) {
  std::fprintf(stderr, "astr run: %s\n", s.ToString().c_str());
  return 1;
}

// Per position, its alternatives as [{"id", "logprob"}, ...].
nlohmann::json TopJson(const std::vector<std::vector<TokenLogprob>>& top) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& alts : top) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& t : alts) a.push_back({{"id", t.id}, {"logprob", t.logprob}});
    out.push_back(a);
  }
  return out;
}

int RunCommand(int argc, const char* const* argv) {
  FlagSet fs("astr run", "Generate offline (in-process) from a model file on the CPU backend.");
  std::string model, prompt, prompt_ids, chat, system, chat_template;
  bool json = false, no_bos = false, parse_special = false;
  int n = 1;
  int logprob_start = 0;
  std::vector<std::string> stops;
  fs.String("model", &model, "Model: a .gguf file or a Hugging Face folder.", /*required=*/true);
  fs.String("prompt", &prompt, "Prompt text, tokenized with the model's tokenizer.");
  fs.String("prompt-ids", &prompt_ids, "Prompt as comma-separated token ids, e.g. 1,403,407.");
  fs.String("chat", &chat,
            "A user message: the prompt is the model's chat template rendered for it (with "
            "--system if given) plus the generation prompt.");
  fs.String("system", &system, "System message for --chat.");
  fs.String("chat-template", &chat_template,
            "A Jinja chat template file that --chat renders instead of the model's (for a model "
            "without one). Default: the model's.");
  fs.Bool("no-bos", &no_bos, "Do not add the tokenizer's special tokens (BOS) to a text prompt.");
  fs.Bool("parse-special", &parse_special,
          "Turn special tokens written in --prompt (e.g. <|im_start|>) into their ids.");
  fs.StringList("stop", &stops, "Stop string: generation ends when the text contains it.");
  fs.Int("n", &n, "Samples to generate for the prompt.");
  fs.Bool("json", &json, "Print one JSON object (prompt_ids, token_ids, text, logprobs, ...).");
  fs.Int("logprob-start", &logprob_start,
         "With --json: also score prompt tokens from this index on (teacher forcing), each from "
         "the logits of the position before it, as a drawn token would be reported: "
         "prompt_logprobs, and prompt_top_logprobs with --logprobs. 0 = none.");
  SamplingFlags sampling;
  sampling.Register(&fs);
  EngineFlags engine_flags;
  engine_flags.Register(&fs);
  if (int rc = fs.ParseOrExit(argc, argv); rc >= 0) return rc;
  if (!prompt.empty() + !prompt_ids.empty() + !chat.empty() != 1) {
    std::fprintf(stderr, "astr run: give exactly one of --prompt, --prompt-ids or --chat\n");
    return 2;
  }
  if (!system.empty() && chat.empty()) {
    std::fprintf(stderr, "astr run: --system needs --chat\n");
    return 2;
  }
  if (!chat_template.empty() && chat.empty()) {
    std::fprintf(stderr, "astr run: --chat-template needs --chat\n");
    return 2;
  }
  if (n < 1) {
    std::fprintf(stderr, "astr run: --n must be >= 1\n");
    return 2;
  }
  if (logprob_start < 0 || (logprob_start > 0 && !json)) {
    std::fprintf(stderr, "astr run: --logprob-start must be >= 0, and needs --json\n");
    return 2;
  }

  auto file = model::ModelFile::Open(model);
  if (!file.ok()) return Fail(file.status());
  TextCodec codec(**file);
  if (prompt_ids.empty() && !codec.available()) {
    return Fail(Status(codec.why_not().code(), (chat.empty() ? "--prompt" : "--chat") +
                                                   std::string(" needs the model's tokenizer: ") +
                                                   codec.why_not().message()));
  }
  std::vector<int32_t> ids;
  if (!prompt_ids.empty()) {
    auto list = ParseIntList(prompt_ids, "prompt-ids");
    if (!list.ok()) return Fail(list.status());
    for (int64_t id : *list) {
      if (id < 0 || id > INT32_MAX) {
        return Fail(
            InvalidArgumentError("--prompt-ids: token id " + std::to_string(id) + " out of range"));
      }
      ids.push_back(static_cast<int32_t>(id));
    }
  } else if (!chat.empty()) {
    auto text = RenderChat(model, chat_template, system, chat);
    if (!text.ok()) return Fail(text.status());
    // The template writes BOS and the turn markers itself (as transformers' apply_chat_template).
    ids = codec.Encode(*text, /*add_special=*/false, /*parse_special=*/true);
  } else {
    ids = codec.Encode(prompt, !no_bos, parse_special);
  }
  if (codec.available()) codec.SetPrompt(ids);
  auto params = sampling.ToParams(**file);
  if (!params.ok()) return Fail(params.status());
  if (json) params->return_logprob = true;
  if (codec.available()) {  // the tokenizer's EOS ids (generation_config.json) end generation too
    MergeTokenIds(&params->eos_token_ids, codec.tokenizer().eos_ids());
  }

  auto backend = engine_flags.CreateBackend(**file);
  if (!backend.ok()) return Fail(backend.status());
  Engine engine(std::move(*backend), engine_flags.EngineOpts());
  for (int i = 0; i < n; ++i) {
    GenerationRequest req;
    req.prompt = ids;
    req.params = *params;
    req.sample_index = static_cast<uint64_t>(i);
    if (i == 0) req.logprob_start = logprob_start;  // the prompt is scored once
    if (!stops.empty() && codec.available()) {
      const TextCodec* c = &codec;
      req.stop_check = [c, stops](const std::vector<int32_t>& gen) {
        const std::string text = c->Decode(gen);
        for (const auto& s : stops) {
          if (!s.empty() && text.find(s) != std::string::npos) return true;
        }
        return false;
      };
    }
    auto id = engine.Submit(std::move(req));
    if (!id.ok()) return Fail(id.status());
  }
  const auto start = std::chrono::steady_clock::now();
  auto results = engine.RunToCompletion();
  if (!results.ok()) return Fail(results.status());
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  auto text_of = [&](const GenerationResult& r) {
    std::string text = codec.available() ? codec.Decode(r.tokens) : "";
    for (const auto& s : stops) {  // the stop string and what follows it are not returned
      if (auto pos = text.find(s); !s.empty() && pos != std::string::npos) text.resize(pos);
    }
    return text;
  };
  if (json) {
    nlohmann::json out;
    out["model"] = model;
    out["prompt_ids"] = ids;
    nlohmann::json samples = nlohmann::json::array();
    for (const auto& r : *results) {
      nlohmann::json s;
      s["token_ids"] = r.tokens;
      s["text"] = text_of(r);
      s["logprobs"] = r.logprobs;
      if (!r.top.empty()) s["top_logprobs"] = TopJson(r.top);
      s["finish_reason"] = FinishReasonName(r.finish);
      samples.push_back(s);
    }
    // The first sample's fields at the top level; all samples under "samples" when n > 1.
    for (auto& [k, v] : samples[0].items()) out[k] = v;
    if (logprob_start > 0) {
      const GenerationResult& first = (*results)[0];
      out["prompt_logprobs"] = first.prompt_logprobs;
      if (!first.prompt_top.empty()) out["prompt_top_logprobs"] = TopJson(first.prompt_top);
    }
    if (n > 1) out["samples"] = samples;
    out["seconds"] = secs;
    // Text cut mid-character (max_tokens, byte tokens) is not valid UTF-8: replace, never throw.
    std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    for (const auto& r : *results) {
      if (n > 1) std::printf("--- sample %lld ---\n", static_cast<long long>(r.id));
      if (codec.available()) {
        std::printf("%s\n", text_of(r).c_str());
      } else {
        for (size_t i = 0; i < r.tokens.size(); ++i) std::printf("%s%d", i ? "," : "", r.tokens[i]);
        std::printf("\n");
      }
    }
    int64_t generated = 0;
    for (const auto& r : *results) generated += static_cast<int64_t>(r.tokens.size());
    std::fprintf(stderr, "astr run: %lld tokens in %.2f s (%.1f tok/s), finish: %s\n",
                 static_cast<long long>(generated), secs, generated / std::max(secs, 1e-9),
                 FinishReasonName((*results)[0].finish));
  }
  return 0;
}

}  // namespace

ASTR_REGISTER_COMMAND("run", "Generate offline from a model file (CPU backend).", RunCommand);

}  // namespace astr::cli
