// Subcommands of the `astr` CLI. Each tools/cmd_*.cc registers one with ASTR_REGISTER_COMMAND; its
// run function gets argv with argv[0] = "astr <name>" and parses its own flags with
// astr::FlagSet.
#pragma once

#include <vector>

namespace astr::cli {

struct Command {
  const char* name;
  const char* summary;
  int (*run)(int argc, const char* const* argv);
};

void RegisterCommand(const Command& command);
const std::vector<Command>& Commands();

}  // namespace astr::cli

#define ASTR_REGISTER_COMMAND(name, summary, fn)                           \
  static const bool astr_registered_command_##fn = [] {                    \
    ::astr::cli::RegisterCommand(::astr::cli::Command{name, summary, fn}); \
    return true;                                                           \
  }()
