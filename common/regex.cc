#include "common/regex.h"

#include "common/regex_internal.h"

namespace astr {

StatusOr<Regex> Regex::Compile(std::string_view pattern) {
  ASTR_ASSIGN_OR_RETURN(regex_internal::ParsedPattern parsed,
                        regex_internal::ParsePattern(pattern));
  ASTR_ASSIGN_OR_RETURN(regex_internal::Program program,
                        regex_internal::CompileProgram(parsed, pattern));
  return Regex(std::make_shared<const regex_internal::Program>(std::move(program)));
}

std::string_view Regex::pattern() const {
  if (program_ == nullptr) return {};
  return program_->pattern;
}

}  // namespace astr
