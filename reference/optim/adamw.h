// AdamW with decoupled weight decay (Loshchilov & Hutter 2019), torch.optim.AdamW's arithmetic,
// and gradient clipping by global L2 norm (torch.nn.utils.clip_grad_norm_'s semantics).
#pragma once
#include <string>
#include <vector>

#include "model/param_set.h"

namespace tripod {

// Which tensors get weight decay: "matrices" (every 2-D weight including the embeddings; GPT-2 /
// nanoGPT practice), "matrices-except-embeddings", "all" or "none".
enum class DecayPolicy { Matrices, MatricesExceptEmbeddings, All, None };
DecayPolicy parse_decay_policy(const std::string& name);
bool decays(const ParamSpec& spec, DecayPolicy policy);

struct AdamWConfig {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  DecayPolicy decay_policy = DecayPolicy::Matrices;
};

class AdamW {
 public:
  AdamW(const std::vector<ParamSpec>& specs, Backend& backend, DType dtype, AdamWConfig config);

  // One update of every tensor with learning rate lr; `step` counts from 1 (bias correction);
  // gradients enter multiplied by grad_scale (the clipping coefficient).
  void update(const ParamSet& params, const ParamSet& grads, double lr, int64_t step, double grad_scale = 1.0);

  const ParamSet& m() const { return m_; }  // first moments, same layout as the parameters
  const ParamSet& v() const { return v_; }  // second moments
  const AdamWConfig& config() const { return config_; }

 private:
  Backend& backend_;
  AdamWConfig config_;
  ParamSet m_, v_;
};

// "h.0.attn.c_attn.weight, wte.weight": the tensors of `set` holding an infinite or NaN value.
std::string nonfinite_tensors(Backend& backend, const ParamSet& set);
// The factor gradients are multiplied by: max_norm / (norm + 1e-6) when that is below 1 (and
// max_norm > 0), else 1 - torch.nn.utils.clip_grad_norm_'s rule.
double clip_coefficient(double norm, double max_norm);

}  // namespace tripod
