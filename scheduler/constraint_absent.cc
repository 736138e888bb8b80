// ConstraintMatcher where the build has no XGrammar (ASTR_WITH_GRPC=OFF: the bare GPU machine,
// which builds the offline engine and the planner core alone). Nothing there can compile a
// constraint (ConstraintCompiler lives in constraint.cc with XGrammar), so no CompiledConstraint
// exists and no matcher is ever made: the planner core links against these and never calls them.
#include "common/base/logging.h"
#include "scheduler/constraint.h"

namespace astr::sched {

struct ConstraintMatcher::Impl {};

ConstraintMatcher::ConstraintMatcher(std::shared_ptr<const CompiledConstraint> compiled) {
  LOG(FATAL) << "structured outputs: this build has no XGrammar (built without the services)";
}
ConstraintMatcher::~ConstraintMatcher() = default;
ConstraintMatcher::ConstraintMatcher(ConstraintMatcher&&) noexcept = default;
ConstraintMatcher& ConstraintMatcher::operator=(ConstraintMatcher&&) noexcept = default;
int32_t ConstraintMatcher::vocab_size() const { return 0; }
void ConstraintMatcher::FillMask(std::span<uint32_t> mask) {}
bool ConstraintMatcher::Accept(int32_t token) { return false; }
bool ConstraintMatcher::Terminated() const { return true; }

}  // namespace astr::sched
