// `astr`: the command-line tool. `astr <command> --help` explains each command's flags.
#include <algorithm>
#include <cstdio>
#include <string>

#include "common/base/logging.h"
#include "tools/command.h"

namespace astr::cli {

std::vector<Command>& MutableCommands() {
  static std::vector<Command> commands;
  return commands;
}
void RegisterCommand(const Command& command) { MutableCommands().push_back(command); }
const std::vector<Command>& Commands() { return MutableCommands(); }

}  // namespace astr::cli

namespace {

void PrintUsage(FILE* out) {
  auto commands = astr::cli::Commands();
  std::sort(commands.begin(), commands.end(),
            [](const auto& a, const auto& b) { return std::string(a.name) < b.name; });
  std::fprintf(out, "Usage: astr <command> [flags]\n\nastr: LLM inference tools.\n\nCommands:\n");
  for (const auto& c : commands) std::fprintf(out, "  %-14s %s\n", c.name, c.summary);
  std::fprintf(out, "\nRun 'astr <command> --help' for a command's flags.\n");
}

}  // namespace

int main(int argc, char** argv) {
  // The commands print their results and errors themselves (plain text); what the libraries log
  // shows from WARNING up, so a command's output is only what it prints.
  astr::LogOptions log;
  log.level = "warning";
  (void)astr::InitLogging(argv[0], log);
  if (argc < 2) {
    PrintUsage(stderr);
    return 2;
  }
  std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    PrintUsage(stdout);
    return 0;
  }
  for (const auto& c : astr::cli::Commands()) {
    if (name == c.name) {
      std::string program = "astr " + name;
      std::vector<const char*> args;
      args.push_back(program.c_str());
      for (int i = 2; i < argc; ++i) args.push_back(argv[i]);
      return c.run(static_cast<int>(args.size()), args.data());
    }
  }
  std::fprintf(stderr, "astr: unknown command '%s'\n\n", name.c_str());
  PrintUsage(stderr);
  return 2;
}
