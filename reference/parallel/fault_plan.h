// Deliberate bugs, for proving that the conformance suite can fail (`tripod conform
// --inject-fault NAME`). A FaultPlan says which faults are active; the one place in the code that
// would have each bug asks the plan there. Engines carry no fault flags of their own, and a run
// without a plan (the default) has none.
#pragma once
#include <string>
#include <vector>

namespace tripod {

enum class Fault {
  SkipGradReduction,          // the first gradient bucket's DP reduction is skipped (used unreduced)
  SkipTiedEmbeddingReduction  // a pipeline's two tied-wte gradients are not summed across stages
};

std::string fault_name(Fault fault);           // "skip-grad-reduction", ...
std::string fault_description(Fault fault);    // one line: what the bug is
Fault parse_fault(const std::string& name);    // throws listing the known names
const std::vector<Fault>& all_faults();

class FaultPlan {
 public:
  FaultPlan() = default;  // no faults
  explicit FaultPlan(std::vector<Fault> active) : active_(std::move(active)) {}
  bool has(Fault fault) const;
  bool empty() const { return active_.empty(); }
  const std::vector<Fault>& active() const { return active_; }

 private:
  std::vector<Fault> active_;
};

}  // namespace tripod
