// `astr generate`: one generation request to a running astr-scheduler, streamed to the terminal.
#include <climits>
#include <cstdio>
#include <string>

#include "common/base/flags.h"
#include "tools/client/client_flags.h"
#include "tools/client/output.h"
#include "tools/command.h"

namespace astr::cli {
namespace {

constexpr char kProgram[] = "astr generate";

struct PromptFlags {
  std::string prompt, prompt_ids, chat, system;
  bool no_bos = false;
  bool plain_special_tokens = false;

  void Register(FlagSet* fs) {
    fs->String("prompt", &prompt, "Prompt text, tokenized by the server.");
    fs->String("prompt-ids", &prompt_ids, "Prompt as comma-separated token ids, e.g. 1,403,407.");
    fs->String("chat", &chat,
               "A user message, rendered with the served model's chat template (with --system "
               "if given) plus the generation prompt.");
    fs->String("system", &system, "System message for --chat.");
    fs->Bool("no-bos", &no_bos, "Do not add the tokenizer's special tokens (BOS) to --prompt.");
    fs->Bool("plain-special-tokens", &plain_special_tokens,
             "Tokenize special-token text typed in --prompt (e.g. <|im_start|>) as plain text, "
             "not as control tokens (GenerateRequest.parse_special_tokens = false).");
  }

  // Exactly one input; a usage error (exit 2) names what is wrong.
  Status Apply(v1::GenerateRequest* request) const {
    if (!prompt.empty() + !prompt_ids.empty() + !chat.empty() != 1) {
      return InvalidArgumentError("give exactly one of --prompt, --prompt-ids or --chat");
    }
    if (!system.empty() && chat.empty()) return InvalidArgumentError("--system needs --chat");
    if (plain_special_tokens && prompt.empty()) {
      return InvalidArgumentError("--plain-special-tokens needs --prompt");
    }
    if (!prompt.empty()) {
      request->set_text(prompt);
      if (no_bos) request->set_add_special_tokens(false);
      if (plain_special_tokens) request->set_parse_special_tokens(false);
    } else if (!prompt_ids.empty()) {
      ASTR_ASSIGN_OR_RETURN(auto ids, ParseIntList(prompt_ids, "prompt-ids"));
      for (int64_t id : ids) {
        if (id < 0 || id > INT32_MAX) {
          return InvalidArgumentError("--prompt-ids: token id " + std::to_string(id) +
                                      " out of range");
        }
        request->mutable_token_ids()->add_ids(static_cast<int32_t>(id));
      }
    } else {
      auto* messages = request->mutable_chat()->mutable_messages();
      if (!system.empty()) {
        auto* m = messages->Add();
        m->set_role("system");
        m->set_content(system);
      }
      auto* m = messages->Add();
      m->set_role("user");
      m->set_content(chat);
    }
    return OkStatus();
  }
};

int Stream(client::Client& client, const v1::GenerateRequest& request,
           const client::CallOptions& options, bool json) {
  StreamPrinter printer(stdout, std::max(request.n(), 1));
  Status status = client.GenerateStream(
      request,
      [&](const v1::GenerateStreamResponse& m) {
        if (json) {
          std::printf("%s\n", JsonLine(m).c_str());
          std::fflush(stdout);
        } else {
          printer.Add(m);
        }
        return true;
      },
      options);
  if (!json) printer.Finish();
  if (!status.ok()) return PrintError(kProgram, status);
  if (!json) {
    std::fprintf(
        stderr, "%s: %s\n", kProgram,
        SummaryLine(printer.samples(), printer.usage(), printer.timings(), printer.seed()).c_str());
  }
  return 0;
}

int Unary(client::Client& client, const v1::GenerateRequest& request,
          const client::CallOptions& options, bool json) {
  auto response = client.Generate(request, options);
  if (!response.ok()) return PrintError(kProgram, response.status());
  if (json) {
    std::printf("%s\n", JsonLine(*response).c_str());
    return 0;
  }
  const auto samples = SamplesOf(*response);
  for (size_t i = 0; i < samples.size(); ++i) {
    if (samples.size() > 1) std::printf("--- sample %zu ---\n", i);
    const std::string& text = samples[i].text;
    std::printf("%s%s", text.c_str(), !text.empty() && text.back() == '\n' ? "" : "\n");
  }
  std::fflush(stdout);
  std::fprintf(
      stderr, "%s: %s\n", kProgram,
      SummaryLine(samples, response->usage(), response->timings(), response->seed()).c_str());
  return 0;
}

int GenerateCommand(int argc, const char* const* argv) {
  FlagSet fs(kProgram,
             "Send one generation request to a running astr-scheduler and stream the text "
             "to the terminal as it arrives. The finish reason, token usage and timings go "
             "to stderr at the end.");
  ServerFlags server;
  server.Register(&fs);
  PromptFlags prompt;
  prompt.Register(&fs);
  bool no_stream = false, json = false;
  fs.Bool("no-stream", &no_stream, "Use the unary Generate call: print the text when it is done.");
  fs.Bool("json", &json,
          "Print the server's messages as JSON lines (one per streamed message, or the whole "
          "response with --no-stream), with logprobs and the prompt's ids.");
  int logprob_start = 0;
  fs.Int("logprob-start", &logprob_start,
         "Score the prompt: return the logprob of every prompt token from this position on "
         "(1 .. prompt length; GenerateRequest.logprob_start), under --logprobs-mode with "
         "--logprobs alternatives, shown with --json (prompt_logprobs, prompt_top_logprobs). "
         "Unset: the prompt is not scored.");
  RequestFlags request_flags;
  request_flags.Register(&fs, /*with_n=*/true);
  if (int rc = fs.ParseOrExit(argc, argv); rc >= 0) return rc;

  v1::GenerateRequest request;
  for (const Status& s : {prompt.Apply(&request), request_flags.Apply(fs, &request)}) {
    if (!s.ok()) {
      std::fprintf(stderr, "%s: %s\n", kProgram, s.message().c_str());
      return 2;
    }
  }
  // Sent as given: the server names the range when it is out of it.
  if (fs.WasSet("logprob-start")) request.set_logprob_start(logprob_start);
  if (json) {
    request.mutable_sampling()->set_return_logprobs(true);
    request.set_return_prompt_ids(true);
  }
  auto client = server.Connect();
  if (!client.ok()) return PrintError(kProgram, client.status());
  const auto options = request_flags.CallOptions();
  return no_stream ? Unary(**client, request, options, json)
                   : Stream(**client, request, options, json);
}

}  // namespace

ASTR_REGISTER_COMMAND("generate", "Generate from a running server, streaming the text.",
                      GenerateCommand);

}  // namespace astr::cli
