#include "common/base/flags.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace astr {
namespace {

StatusOr<int64_t> ParseInt(const std::string& name, const std::string& v) {
  errno = 0;
  char* end = nullptr;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno != 0) {
    return InvalidArgumentError("--" + name + ": expected an integer, got '" + v + "'");
  }
  return static_cast<int64_t>(x);
}

}  // namespace

FlagSet::FlagSet(std::string program, std::string summary)
    : program_(std::move(program)), summary_(std::move(summary)) {}

void FlagSet::Add(Flag flag) { flags_.push_back(std::move(flag)); }

FlagSet::Flag* FlagSet::Find(const std::string& name) {
  for (auto& f : flags_) {
    if (!f.positional && f.name == name) return &f;
  }
  return nullptr;
}

bool FlagSet::WasSet(const std::string& name) const {
  for (const auto& f : flags_) {
    if (f.name == name) return f.set;
  }
  return false;
}

void FlagSet::String(const std::string& name, std::string* dst, std::string help, bool required) {
  Add({name, std::move(help), "string", *dst, required, false, false, [dst](const std::string& v) {
         *dst = v;
         return OkStatus();
       }});
}

void FlagSet::Int(const std::string& name, int64_t* dst, std::string help, bool required) {
  Add({name, std::move(help), "int", std::to_string(*dst), required, false, false,
       [dst, name](const std::string& v) -> Status {
         ASTR_ASSIGN_OR_RETURN(*dst, ParseInt(name, v));
         return OkStatus();
       }});
}

void FlagSet::Int(const std::string& name, int* dst, std::string help, bool required) {
  Add({name, std::move(help), "int", std::to_string(*dst), required, false, false,
       [dst, name](const std::string& v) -> Status {
         ASTR_ASSIGN_OR_RETURN(int64_t x, ParseInt(name, v));
         if (x < INT32_MIN || x > INT32_MAX)
           return InvalidArgumentError("--" + name + ": out of range");
         *dst = static_cast<int>(x);
         return OkStatus();
       }});
}

void FlagSet::Double(const std::string& name, double* dst, std::string help, bool required) {
  std::ostringstream def;
  def << *dst;
  Add({name, std::move(help), "float", def.str(), required, false, false,
       [dst, name](const std::string& v) -> Status {
         char* end = nullptr;
         double x = std::strtod(v.c_str(), &end);
         if (v.empty() || *end != '\0') {
           return InvalidArgumentError("--" + name + ": expected a number, got '" + v + "'");
         }
         *dst = x;
         return OkStatus();
       }});
}

void FlagSet::StringList(const std::string& name, std::vector<std::string>* dst, std::string help) {
  Add({name, std::move(help) + " May be repeated.", "string", "", false, false, false,
       [dst](const std::string& v) {
         dst->push_back(v);
         return OkStatus();
       }});
}

void FlagSet::Bool(const std::string& name, bool* dst, std::string help) {
  Add({name, std::move(help), "bool", *dst ? "true" : "false", false, false, false,
       [dst, name](const std::string& v) -> Status {
         if (v == "true" || v == "1" || v == "yes") {
           *dst = true;
         } else if (v == "false" || v == "0" || v == "no") {
           *dst = false;
         } else {
           return InvalidArgumentError("--" + name + ": expected true or false, got '" + v + "'");
         }
         return OkStatus();
       }});
}

void FlagSet::Positional(const std::string& name, std::string* dst, std::string help,
                         bool required) {
  Add({name, std::move(help), "string", *dst, required, true, false, [dst](const std::string& v) {
         *dst = v;
         return OkStatus();
       }});
}

Status FlagSet::Parse(int argc, const char* const* argv) {
  size_t next_positional = 0;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      help_requested_ = true;
      return OkStatus();
    }
    // A one-letter flag also takes one dash, as glog's -v does: "-v 2", "-v=2".
    if (arg.size() >= 2 && arg[0] == '-' && arg[1] != '-' && (arg.size() == 2 || arg[2] == '=') &&
        Find(arg.substr(1, 1)) != nullptr) {
      arg = "-" + arg;
    }
    if (arg.rfind("--", 0) != 0 || arg.size() == 2) {
      Flag* pos = nullptr;
      for (size_t k = 0, seen = 0; k < flags_.size(); ++k) {
        if (!flags_[k].positional) continue;
        if (seen++ == next_positional) {
          pos = &flags_[k];
          break;
        }
      }
      if (pos == nullptr) return InvalidArgumentError("unexpected argument '" + arg + "'");
      ++next_positional;
      pos->set = true;
      ASTR_RETURN_IF_ERROR(pos->assign(arg));
      continue;
    }
    std::string name = arg.substr(2);
    std::optional<std::string> value;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    Flag* f = Find(name);
    if (f == nullptr && !value && name.rfind("no-", 0) == 0) {
      Flag* neg = Find(name.substr(3));
      if (neg != nullptr && neg->type == "bool") {
        neg->set = true;
        ASTR_RETURN_IF_ERROR(neg->assign("false"));
        continue;
      }
    }
    if (f == nullptr) return InvalidArgumentError("unknown flag --" + name);
    if (!value) {
      if (f->type == "bool") {
        value = "true";
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        return InvalidArgumentError("--" + name + " needs a value");
      }
    }
    f->set = true;
    ASTR_RETURN_IF_ERROR(f->assign(*value));
  }
  for (const auto& f : flags_) {
    if (f.required && !f.set) {
      return InvalidArgumentError((f.positional ? f.name : "--" + f.name) + " is required");
    }
  }
  return OkStatus();
}

int FlagSet::ParseOrExit(int argc, const char* const* argv) {
  Status s = Parse(argc, argv);
  if (help_requested_) {
    std::fputs(Help().c_str(), stdout);
    return 0;
  }
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\nRun '%s --help' for the flags.\n", program_.c_str(),
                 s.message().c_str(), program_.c_str());
    return 2;
  }
  return -1;
}

std::string FlagSet::Help() const {
  std::ostringstream out;
  out << "Usage: " << program_;
  for (const auto& f : flags_) {
    if (f.positional) out << (f.required ? " " : " [") << f.name << (f.required ? "" : "]");
  }
  out << " [flags]\n\n" << summary_ << "\n";
  bool any_positional = false;
  for (const auto& f : flags_) any_positional |= f.positional;
  if (any_positional) {
    out << "\nArguments:\n";
    for (const auto& f : flags_) {
      if (f.positional) out << "  " << f.name << "\n      " << f.help << "\n";
    }
  }
  out << "\nFlags:\n";
  for (const auto& f : flags_) {
    if (f.positional) continue;
    out << "  --" << f.name;
    if (f.type != "bool") out << " <" << f.type << ">";
    out << "\n      " << f.help;
    if (f.required) {
      out << " (required)";
    } else if (!f.default_value.empty()) {
      out << " (default: " << f.default_value << ")";
    }
    out << "\n";
  }
  out << "  --help\n      Print this help and exit.\n";
  return out.str();
}

StatusOr<std::vector<int64_t>> ParseIntList(const std::string& text, const std::string& flag) {
  std::vector<int64_t> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    ASTR_ASSIGN_OR_RETURN(int64_t x, ParseInt(flag, item));
    out.push_back(x);
  }
  if (out.empty())
    return InvalidArgumentError("--" + flag + ": expected a comma-separated list of integers");
  return out;
}

}  // namespace astr
