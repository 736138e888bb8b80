#include "common/text/regex/regex.h"

#include "common/text/regex/internal.h"

namespace astr::regex {

StatusOr<Regex> Regex::Compile(std::string_view pattern) {
  ASTR_ASSIGN_OR_RETURN(internal::ParsedPattern parsed, internal::ParsePattern(pattern));
  ASTR_ASSIGN_OR_RETURN(internal::Program program, internal::CompileProgram(parsed, pattern));
  return Regex(std::make_shared<const internal::Program>(std::move(program)));
}

std::string_view Regex::pattern() const {
  if (program_ == nullptr) return {};
  return program_->pattern;
}

}  // namespace astr::regex
