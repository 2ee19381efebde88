// GPT-2: token + learned position embeddings, L pre-LayerNorm blocks (causal multi-head attention,
// GELU MLP), final LayerNorm, LM head (tied to wte or not). Explicit forward and backward for every
// layer, in the style of llm.c; every operation is a Backend call, and nothing here knows about
// parallelism. N = B*T tokens, C = d_model, F = d_ff, V = vocab, H = heads.
#pragma once
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"
#include "model/layer_ops.h"
#include "model/param_access.h"
#include "model/param_set.h"

namespace tripod {

struct LossSum {
  double sum = 0;         // sum of per-token cross-entropy over valid (non-ignored) targets
  int64_t n_valid = 0;    // number of valid targets
};

class Gpt {
 public:
  // `layers` (optional, not owned) says how the layers are computed - split across ranks, say;
  // by default they are computed whole on this device.
  Gpt(const ModelConfig& config, Backend& backend, DType dtype, LayerOps* layers = nullptr);
  ~Gpt();

  const ModelConfig& config() const { return config_; }
  const std::vector<ParamSpec>& specs() const { return specs_; }

  // tokens, targets: host int32 [B,T]; targets < 0 are ignored. Keeps the activations for backward.
  LossSum forward(ParamAccess& params, const int32_t* tokens, const int32_t* targets, int64_t batch,
                  int64_t seq_len);
  // Accumulates d(grad_scale * loss_sum)/d(params) into the gradients; grad_scale is
  // 1 / (global valid count). Reports each group's gradients ready as soon as they are final.
  void backward(ParamAccess& params, double grad_scale);

  // The same with resident parameter and gradient sets.
  LossSum forward(const ParamSet& params, const int32_t* tokens, const int32_t* targets, int64_t batch,
                  int64_t seq_len);
  void backward(const ParamSet& params, const ParamSet& grads, double grad_scale);

  // Logits [B,T,V] of the last forward (valid until backward, which turns them into gradients).
  Tensor logits() const;
  // Allocates the activations for (B, T) now (forward does it on demand).
  void reserve(int64_t batch, int64_t seq_len) { ensure_activations(batch, seq_len); }
  // Bytes of activation memory held for the current (B, T).
  std::size_t activation_bytes() const;

 private:
  struct Activations;
  void ensure_activations(int64_t batch, int64_t seq_len);
  int64_t local_heads() const;  // attention heads computed on this rank

  ModelConfig config_;
  Backend& backend_;
  DType dtype_;
  std::vector<ParamSpec> specs_;
  std::unique_ptr<Activations> acts_;
  std::unique_ptr<LayerOps> own_layers_;
  LayerOps* layers_;
};

}  // namespace tripod
