#include "model/param_access.h"

namespace tripod {

const Tensor& ResidentParams::grad(std::size_t index) {
  check(grads_ != nullptr, "no gradient buffers were given for '", params_.specs().at(index).name,
        "' (forward-only access)");
  return grads_->at(index);
}

std::vector<int> param_groups(const std::vector<ParamSpec>& specs) {
  std::vector<int> groups;
  for (const ParamSpec& spec : specs) groups.push_back(spec.group);
  return groups;
}

}  // namespace tripod
