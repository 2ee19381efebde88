// How the model reaches its parameters and gradients. The model asks for a group of tensors
// before it uses them and says when it is done, and reports when a group's gradients are final;
// it knows nothing of what the owner does then. A resident owner (one ParamSet each for parameters
// and gradients) does nothing; a data-parallel owner launches a bucket's gradient reduction when
// its groups are ready; a ZeRO-3 owner gathers a layer's parameter shards on acquire and frees
// them on release. Groups: 0 = embeddings (wte, wpe), 1..L = blocks, L+1 = final LayerNorm and
// untied LM head (gpt_param_groups).
#pragma once
#include <string>
#include <vector>

#include "model/param_set.h"

namespace tripod {

class ParamAccess {
 public:
  virtual ~ParamAccess() = default;
  // Valid between acquire_params(group) and release_params(group) of the tensor's group.
  virtual const Tensor& param(const std::string& name) = 0;
  // Valid between acquire_grads(group) and grads_ready(group) of the tensor's group.
  virtual const Tensor& grad(const std::string& name) = 0;
  virtual void acquire_params(int /*group*/) {}
  virtual void release_params(int /*group*/) {}
  virtual void acquire_grads(int /*group*/) {}
  // The group's gradients are complete for this backward pass (written for the last time).
  virtual void grads_ready(int /*group*/) {}
};

// Parameters and gradients fully resident in two ParamSets; every hook is a no-op.
class ResidentParams final : public ParamAccess {
 public:
  ResidentParams(const ParamSet& params, const ParamSet* grads) : params_(params), grads_(grads) {}
  const Tensor& param(const std::string& name) override { return params_[name]; }
  const Tensor& grad(const std::string& name) override;

 private:
  const ParamSet& params_;
  const ParamSet* grads_;
};

// The group of each ParamSpec (by index), in spec order: contiguous runs of equal group ids.
std::vector<int> gpt_param_groups(const std::vector<ParamSpec>& specs, int64_t n_layer);
inline int embedding_group() { return 0; }
inline int block_group(int64_t layer) { return static_cast<int>(layer) + 1; }
inline int head_group(int64_t n_layer) { return static_cast<int>(n_layer) + 1; }

}  // namespace tripod
