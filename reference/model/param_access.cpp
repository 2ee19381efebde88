#include "model/param_access.h"

namespace tripod {

const Tensor& ResidentParams::grad(const std::string& name) {
  check(grads_ != nullptr, "no gradient buffers were given for '", name, "' (forward-only access)");
  return (*grads_)[name];
}

std::vector<int> gpt_param_groups(const std::vector<ParamSpec>& specs, int64_t n_layer) {
  std::vector<int> groups;
  for (const ParamSpec& spec : specs) {
    const std::string& n = spec.name;
    if (n == "wte.weight" || n == "wpe.weight") {
      groups.push_back(embedding_group());
    } else if (n.rfind("h.", 0) == 0) {
      groups.push_back(block_group(std::stoll(n.substr(2, n.find('.', 2) - 2))));
    } else {
      groups.push_back(head_group(n_layer));
    }
  }
  return groups;
}

}  // namespace tripod
