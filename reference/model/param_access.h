// How the model reaches its parameters and gradients. The model asks for a group of tensors
// before it uses them and says when it is done, and reports when a group's gradients are final;
// it knows nothing of what the owner does then. A resident owner (one ParamSet each for parameters
// and gradients) does nothing; a data-parallel owner launches a bucket's gradient reduction when
// its groups are ready; a ZeRO-3 owner gathers a layer's parameter shards on acquire and frees
// them on release. Groups: 0 = embeddings (wte, wpe), 1..L = blocks, L+1 = final LayerNorm and
// untied LM head (ParamSpec::group, model/param_spec.h).
#pragma once
#include <string>
#include <vector>

#include "model/param_set.h"

namespace tripod {

// Tensors are named by their index in the owner's specs, which are the model's (span's) specs in
// order, possibly with other local shapes (a tensor-parallel shard).
class ParamAccess {
 public:
  virtual ~ParamAccess() = default;
  // Valid between acquire_params(group) and release_params(group) of the tensor's group.
  virtual const Tensor& param(std::size_t index) = 0;
  // Valid between acquire_grads(group) and grads_ready(group) of the tensor's group.
  virtual const Tensor& grad(std::size_t index) = 0;
  virtual void acquire_params(int /*group*/) {}
  virtual void release_params(int /*group*/) {}
  virtual void acquire_grads(int /*group*/) {}
  // The group's gradients are complete for this backward pass (written for the last time).
  virtual void grads_ready(int /*group*/) {}
  // The group's gradients are complete except for what the rest of this backward adds to the rows
  // `rows` (int32 ids on the host, logical, into the first dimension) of tensor `sparse` and to the group's
  // other tensors; grads_ready(group) follows when that is done. An owner may start reducing the
  // part that is final, and grad() of the group's tensors may then return other (zeroed) storage
  // for the additions: callers ask grad() again after this call. A tied embedding: the LM head has
  // written its part of wte's gradient; the lookup's backward adds only the batch's token rows. An
  // untied one: said before the lookup's backward (and before acquire_grads), nothing written yet.
  virtual void grads_ready_except_rows(int /*group*/, std::size_t /*sparse*/, const Tensor& /*rows*/) {}
};

// Parameters and gradients fully resident in two ParamSets; every hook is a no-op.
class ResidentParams final : public ParamAccess {
 public:
  ResidentParams(const ParamSet& params, const ParamSet* grads) : params_(params), grads_(grads) {}
  const Tensor& param(std::size_t index) override { return params_.at(index); }
  const Tensor& grad(std::size_t index) override;

 private:
  const ParamSet& params_;
  const ParamSet* grads_;
};

// The group of each ParamSpec, in spec order: contiguous runs of equal group ids.
std::vector<int> param_groups(const std::vector<ParamSpec>& specs);

}  // namespace tripod
