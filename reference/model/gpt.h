// GPT-2: token + learned position embeddings, L pre-LayerNorm blocks (causal multi-head attention,
// GELU MLP), final LayerNorm, LM head (tied to wte or not). Explicit forward and backward for every
// layer, in the style of llm.c; every operation is a Backend call, and nothing here knows about
// parallelism. N = B*T tokens, C = d_model, F = d_ff, V = vocab, H = heads.
#pragma once
#include <array>
#include <memory>
#include <optional>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"
#include "model/layer_ops.h"
#include "model/param_access.h"
#include "model/param_set.h"
#include "model/recompute.h"
#include "model/weight_copies.h"

namespace tripod {

// The loss of a forward pass, left on the device: the training step reads it back once, with the
// gradient norm, instead of once per micro-batch.
struct LossSum {
  Tensor sum;           // fp64 [1] on the backend's device: sum of per-token cross-entropy over valid
                        // (non-ignored) targets, in token order (undefined on a span without the head)
  int64_t n_valid = 0;  // number of valid targets, counted on the host
};

// The part of the model this instance computes: blocks [first_layer, end_layer), plus the
// embeddings and/or the final LayerNorm and LM head. A pipeline stage is one span; the whole model
// is the default. A span without the embedding takes its input residual stream from input(slot),
// one without the head leaves its output in output(slot) and takes d(output) in output_grad().
struct StageSpan {
  int64_t first_layer = 0, end_layer = -1;  // -1: up to n_layer
  bool embedding = true, head = true;
};

// The parameter specs a span uses, in spec order: wte and wpe with the embedding, the span's blocks,
// ln_f and the LM head with the head (wte again when it is tied and the span lacks the embedding).
std::vector<ParamSpec> span_param_specs(const ModelConfig& config, const StageSpan& span);

class Gpt {
 public:
  // `layers` (optional, not owned) says how the layers are computed - split across ranks, say;
  // by default they are computed whole on this device. `recompute` says which block activations
  // backward recomputes instead of keeping (model/recompute.h).
  Gpt(const ModelConfig& config, Backend& backend, DType dtype, LayerOps* layers = nullptr,
      StageSpan span = StageSpan{}, Recompute recompute = Recompute::None);
  ~Gpt();

  const ModelConfig& config() const { return config_; }
  const StageSpan& span() const { return span_; }
  Recompute recompute() const { return recompute_; }
  // While set, forwards are for evaluation: they keep nothing that only a backward would use (the
  // bf16 operand copies of BlockActivations).
  void set_forward_only(bool forward_only) { forward_only_ = forward_only; }
  // Whether the weights' bf16 copies that a forward makes under the bf16-operand policy are kept for
  // the backward's dX products, one a weight shared by the micro-batches in flight
  // (model/weight_copies.h; the default), or made again by the backward. An owner that frees the
  // parameters after each use (ZeRO-3) clears it: kept copies would hold every layer's weights on
  // every rank, the memory its sharding frees. Set before the first forward (the accounting of
  // activation_bytes counts the copies).
  void set_keep_weight_copies(bool keep);
  std::size_t weight_copies_held() const { return weight_copies_.held(); }  // weights with a copy in flight
  const std::vector<ParamSpec>& specs() const { return specs_; }  // of the span

  // Several micro-batches in flight (a pipeline schedule, say): each holds its own activations (a
  // "slot") from claim_slot to release_slot; backward scratch is shared, one backward at a time.
  // forward/backward below use slot 0 only.
  int claim_slot(int64_t batch, int64_t seq_len);
  void release_slot(int slot);
  Tensor input(int slot) const;   // [R,C] residual stream entering the span (write it when !embedding)
  Tensor output(int slot) const;  // [R,C] residual stream leaving the span (valid after forward)
  Tensor output_grad() const;     // [R,C] d(output): write it before backward when !head
  Tensor input_grad() const;      // [R,C] d(input), valid after backward until the next one
  // Loss of the span's micro-batch (zero unless the span has the head). `loss_grad_scale`: given
  // only where this slot's backward will follow, at that grad_scale; the loss may then write its
  // gradient over the logits in the same pass (LayerOps::loss_forward_with_gradient: one read of
  // the logits fewer), and the backward checks that it is called with the same scale.
  LossSum forward_slot(ParamAccess& params, int slot, const int32_t* tokens, const int32_t* targets,
                       std::optional<double> loss_grad_scale = std::nullopt);
  void backward_slot(ParamAccess& params, int slot, double grad_scale);

  // tokens, targets: host int32 [B,T]; targets < 0 are ignored. Every id is checked against the
  // vocabulary on the host, before upload. Keeps the activations for backward. The returned sum
  // lives in the slot: it is overwritten by the slot's next forward.
  LossSum forward(ParamAccess& params, const int32_t* tokens, const int32_t* targets, int64_t batch,
                  int64_t seq_len, std::optional<double> loss_grad_scale = std::nullopt);
  // Accumulates d(grad_scale * loss_sum)/d(params) into the gradients; grad_scale is
  // 1 / (global valid count). Reports each group's gradients ready as soon as they are final.
  void backward(ParamAccess& params, double grad_scale);

  // The same with resident parameter and gradient sets.
  LossSum forward(const ParamSet& params, const int32_t* tokens, const int32_t* targets, int64_t batch,
                  int64_t seq_len, std::optional<double> loss_grad_scale = std::nullopt);
  void backward(const ParamSet& params, const ParamSet& grads, double grad_scale);

  // Logits [B,T,V'] of the last forward (valid until backward, which uses them up: they become the
  // gradients, or stay as they were where the gradient is made only as its bf16 operand; a forward
  // given loss_grad_scale may leave the gradients there already):
  // V' = LayerOps::local_width of the LM head, the vocabulary V padded to the backend's GEMM row
  // multiple on one device (columns past V are padding, not logits) or this rank's vocabulary
  // shard under tensor parallelism.
  Tensor logits() const;
  // Allocates the activations for (B, T) now (forward does it on demand).
  void reserve(int64_t batch, int64_t seq_len) { ensure_activations(batch, seq_len); }
  // Bytes of activation memory held: every slot allocated so far (the peak number of micro-batches
  // in flight) plus the shared backward scratch and recomputation buffers, and the weights' bf16
  // copies kept for the backward (once: the slots share them). The backward holds nothing beyond
  // these: the loss gradient takes the logits' place in every policy (bf16-mixed's bf16 logits too).
  std::size_t activation_bytes() const;
  int slots_allocated() const { return static_cast<int>(slots_.size()); }

 private:
  struct BlockActivations;
  struct Activations;
  struct Scratch;
  void ensure_activations(int64_t batch, int64_t seq_len);
  std::unique_ptr<Activations> make_slot() const;
  Activations& slot(int index) const;
  int64_t local_heads() const;  // attention heads computed on this rank
  // Whether the policy in force is bf16-mixed: fp32 tensors whose GEMMs round their operands to bf16.
  bool bf16_mixed() const;
  // Whether the layers keep prepared GEMM operands under the backend's bf16-operand policy
  // (BlockActivations::keep_operands): then ln1, atty, ln2, gelu(fc), lnf, d qkv and d fc exist only
  // as bf16 operands.
  bool keeps_operands() const;
  // The dtype of the tensors that bf16-mixed keeps as the bf16 rounding of a GEMM's fp32 result
  // (as autocast and llm.c keep them), the model's dtype otherwise:
  // - the logits: the loss reads them into fp32 statistics and writes its gradient over them, the
  //   LM head's bf16 operand;
  // - the MLP's pre-activation fc: c_fc's fp32 sums and bias rounded once; the GELU and its
  //   backward read its values into fp32 (gelu(fc) is an operand only, d fc too where operands
  //   are kept). GPT-2 124M at B8 x T1024: 50 MB a layer less, and 150 MB less traffic;
  // - in the backward, the gradient of gelu(fc) (the scratch dfc_gelu): the MLP's c_proj dX
  //   product rounded once, read into fp32 by the GELU's backward (autocast's gradient there is
  //   bf16 too). 100 MB less traffic a layer.
  DType rounded_activation_dtype() const;
  // Gives back the weight copies that the slot's layer k (or, k past the last, the LM head) still
  // holds; a backward gives back each layer's as it goes, and a slot left without its backward (a
  // forward run again, release_slot) all of them.
  void release_weight_copies(Activations& slot, std::size_t k);
  void release_weight_copies(Activations& slot);
  // Block k of the span (layer first_layer + k) forward from `residual` into x; the parameters
  // are acquired by the caller.
  void block_forward(ParamAccess& params, std::size_t k, const Tensor& residual, BlockActivations& x);

  // Where each tensor the span uses sits in specs_ (found once by role, never by name).
  struct ParamIndex {
    ParamIndex() = default;
    ParamIndex(const std::vector<ParamSpec>& specs, const StageSpan& span, bool tied);
    std::size_t wte = 0, wpe = 0, lnf_w = 0, lnf_b = 0, head = 0;  // head: wte when tied
    std::vector<std::array<std::size_t, kBlockRoles>> blocks;       // per layer of the span, in role order
  };

  ModelConfig config_;
  Backend& backend_;
  DType dtype_;
  StageSpan span_;
  std::vector<ParamSpec> specs_;
  ParamIndex index_;
  int64_t batch_ = 0, seq_len_ = 0;                  // shape of every slot
  std::vector<std::unique_ptr<Activations>> slots_;  // per micro-batch in flight
  std::vector<bool> slot_used_;
  std::unique_ptr<Scratch> scratch_;
  std::unique_ptr<LayerOps> own_layers_;
  LayerOps* layers_;
  Recompute recompute_;
  bool forward_only_ = false;
  bool keep_weight_copies_ = true;
  SharedWeightCopies weight_copies_;
};

// Gpt::set_forward_only for a scope (an evaluation's forwards), cleared on leaving it, also when
// an error leaves it.
class ForwardOnly {
 public:
  explicit ForwardOnly(Gpt& model) : model_(model) { model_.set_forward_only(true); }
  ~ForwardOnly() { model_.set_forward_only(false); }
  ForwardOnly(const ForwardOnly&) = delete;
  ForwardOnly& operator=(const ForwardOnly&) = delete;

 private:
  Gpt& model_;
};

}  // namespace tripod
