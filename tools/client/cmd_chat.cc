// `astr chat`: a multi-turn conversation with a running astr-scheduler on stdin / stdout. Every
// turn sends the whole conversation as chat messages, so the server's chat template renders it.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <string>

#include "common/base/flags.h"
#include "tools/client/client_flags.h"
#include "tools/client/output.h"
#include "tools/command.h"

namespace astr::cli {
namespace {

constexpr char kProgram[] = "astr chat";

void AddMessage(v1::ChatInput* chat, const std::string& role, const std::string& content) {
  auto* m = chat->add_messages();
  m->set_role(role);
  m->set_content(content);
}

// Sends the conversation in `request` and streams the answer to stdout. On success appends the
// answer to the conversation.
Status Turn(client::Client& client, const client::CallOptions& options,
            v1::GenerateRequest* request) {
  StreamPrinter printer(stdout, 1);
  Status status = client.GenerateStream(
      *request,
      [&](const v1::GenerateStreamResponse& m) {
        printer.Add(m);
        return true;
      },
      options);
  printer.Finish();
  if (!status.ok()) return status;
  const SampleOutput& answer = printer.samples()[0];
  // A cut answer is kept in the conversation (the model continues from it), but said so.
  if (answer.finish == v1::FINISH_REASON_LENGTH || answer.finish == v1::FINISH_REASON_ABORT) {
    std::fprintf(stderr, "(%s: %s)\n", kProgram,
                 answer.finish == v1::FINISH_REASON_LENGTH ? "answer cut at --max-tokens"
                                                           : "answer aborted by the server");
  }
  AddMessage(request->mutable_chat(), "assistant", answer.text);
  return OkStatus();
}

int ChatCommand(int argc, const char* const* argv) {
  FlagSet fs(kProgram,
             "Chat with a running astr-scheduler: each line read from stdin is a user "
             "message; the answer streams to stdout. The conversation so far is sent every "
             "turn and rendered with the served model's chat template. '/exit' or the end "
             "of input ends the chat, '/reset' starts a new conversation. Works with a "
             "pipe too: one message per line.");
  ServerFlags server;
  server.Register(&fs);
  std::string system;
  fs.String("system", &system, "System message at the start of the conversation.");
  RequestFlags request_flags;
  request_flags.Register(&fs, /*with_n=*/false);
  if (int rc = fs.ParseOrExit(argc, argv); rc >= 0) return rc;

  v1::GenerateRequest request;
  if (Status s = request_flags.Apply(fs, &request); !s.ok()) {
    std::fprintf(stderr, "%s: %s\n", kProgram, s.message().c_str());
    return 2;
  }
  auto reset = [&] {
    request.mutable_chat()->clear_messages();
    if (!system.empty()) AddMessage(request.mutable_chat(), "system", system);
  };
  reset();
  auto client = server.Connect();
  if (!client.ok()) return PrintError(kProgram, client.status());

  const bool interactive = isatty(STDIN_FILENO) != 0;
  if (interactive) {
    std::fprintf(stderr, "Connected to %s. Type a message; /exit ends, /reset starts over.\n",
                 server.server.c_str());
  }
  std::string line;
  while (true) {
    if (interactive) {
      std::fputs("> ", stdout);
      std::fflush(stdout);
    }
    if (!std::getline(std::cin, line)) break;
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      reset();
      continue;
    }
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    AddMessage(request.mutable_chat(), "user", line);
    if (Status s = Turn(**client, request_flags.CallOptions(), &request); !s.ok()) {
      PrintError(kProgram, s);
      if (!interactive) return 1;
      // Interactive: drop the message that failed and let the user go on.
      request.mutable_chat()->mutable_messages()->RemoveLast();
    }
  }
  if (interactive) std::fputs("\n", stdout);
  return 0;
}

}  // namespace

ASTR_REGISTER_COMMAND("chat", "Chat with a running server (multi-turn, chat template).",
                      ChatCommand);

}  // namespace astr::cli
