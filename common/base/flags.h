// The one flags system of every astr binary: each binary declares its flags (name, destination,
// help) on a FlagSet; Parse() fills the destinations and --help prints every flag with its default.
//
//   astr::FlagSet fs("astr run", "Generate offline from a model file.");
//   std::string model; int64_t max_tokens = 32;
//   fs.String("model", &model, "Model file or folder (GGUF or HF).", /*required=*/true);
//   fs.Int("max-tokens", &max_tokens, "Tokens to generate.");
//   if (int rc = fs.ParseOrExit(argc, argv); rc >= 0) return rc;   // --help (0) or a usage error
//   (2)
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/base/status.h"

namespace astr {

class FlagSet {
 public:
  FlagSet(std::string program, std::string summary);

  void String(const std::string& name, std::string* dst, std::string help, bool required = false);
  void Int(const std::string& name, int64_t* dst, std::string help, bool required = false);
  void Int(const std::string& name, int* dst, std::string help, bool required = false);
  void Double(const std::string& name, double* dst, std::string help, bool required = false);
  // A flag that may be given several times; each occurrence appends one value.
  void StringList(const std::string& name, std::vector<std::string>* dst, std::string help);
  // `--name`, `--name=true|false`, `--no-name`.
  void Bool(const std::string& name, bool* dst, std::string help);
  // A positional argument, filled in declaration order.
  void Positional(const std::string& name, std::string* dst, std::string help,
                  bool required = true);

  // Parses argv[1..argc). `--flag value` and `--flag=value` are both accepted; a one-letter flag
  // also takes one dash (`-v 2`, `-v=2`).
  Status Parse(int argc, const char* const* argv);
  // Parse(); on --help prints Help() to stdout and returns 0; on an error prints it with a hint to
  // stderr and returns 2; returns -1 when the caller should go on.
  int ParseOrExit(int argc, const char* const* argv);

  bool help_requested() const { return help_requested_; }
  // True if the flag appeared on the command line.
  bool WasSet(const std::string& name) const;
  std::string Help() const;

 private:
  struct Flag {
    std::string name;
    std::string help;
    std::string type;           // "string", "int", "float", "bool"
    std::string default_value;  // printed by --help
    bool required = false;
    bool positional = false;
    bool set = false;
    std::function<Status(const std::string&)> assign;
  };
  Flag* Find(const std::string& name);
  void Add(Flag flag);

  std::string program_;
  std::string summary_;
  std::vector<Flag> flags_;
  bool help_requested_ = false;
};

// Parses "1,2,3" into integers; names `flag` in the error.
StatusOr<std::vector<int64_t>> ParseIntList(const std::string& text, const std::string& flag);

}  // namespace astr
