#include "parallel/fault_plan.h"

#include <algorithm>

#include "core/error.h"

namespace tripod {

const std::vector<Fault>& all_faults() {
  static const std::vector<Fault> faults = {Fault::SkipGradReduction, Fault::SkipTiedEmbeddingReduction};
  return faults;
}

std::string fault_name(Fault fault) {
  switch (fault) {
    case Fault::SkipGradReduction: return "skip-grad-reduction";
    case Fault::SkipTiedEmbeddingReduction: return "skip-tied-embedding-reduction";
  }
  return "?";
}

std::string fault_description(Fault fault) {
  switch (fault) {
    case Fault::SkipGradReduction: return "the first gradient bucket's data-parallel reduction is forgotten";
    case Fault::SkipTiedEmbeddingReduction: return "a pipeline's two tied-embedding gradients are not summed";
  }
  return "?";
}

Fault parse_fault(const std::string& name) {
  std::string known;
  for (Fault f : all_faults()) {
    if (fault_name(f) == name) return f;
    known += (known.empty() ? "" : ", ") + fault_name(f);
  }
  fail("unknown fault '", name, "' (known: ", known, ")");
}

bool FaultPlan::has(Fault fault) const { return std::find(active_.begin(), active_.end(), fault) != active_.end(); }

}  // namespace tripod
