// Tensor parallelism for the GPT, declared from outside the model (Megatron's split of GPT-2):
//   Qkv, Fc      column-parallel: this rank's heads / MLP columns; input replicated ("f")
//   AttnOut, FcOut  row-parallel: partial products all-reduced ("g"), bias added once after
//   LmHead       column-parallel over the (padded) vocabulary, no bias; the loss is the
//                vocab-parallel cross-entropy (max / sum-exp / target-logit all-reduces)
//   embedding    vocab-parallel: rows outside this rank's range masked, then all-reduced
// With sequence parallelism the residual stream (embedding output, LayerNorms, residual adds) is
// split into contiguous token blocks of N/tp rows: "f" becomes an all-gather of the block before a
// column-parallel layer, "g" a reduce-scatter after a row-parallel one. The gathered [N, in] input
// is not kept: backward gathers the block again (Megatron-LM's choice), so that what stays
// between forward and backward is the 1/tp block, the point of sequence parallelism; one buffer
// serves every gather. The LayerNorm and row-parallel bias gradients are then partial per rank:
// the trainer all-reduces them over TP.
#pragma once
#include "model/config.h"
#include "model/layer_ops.h"
#include "parallel/tp_group.h"
#include "parallel/tp_vocab.h"

#include <map>

namespace tripod::tp {

class TensorParallelLayers final : public LayerOps {
 public:
  // validates; `faults` (conformance self-tests, optional) must outlive the layers. Each rank's
  // vocabulary rows are padded to a multiple of `vocab_multiple` (tp_vocab.h); with one rank and
  // a multiple above 1 these are the layers of a padded vocabulary on one device.
  TensorParallelLayers(const ModelConfig& config, Communicator& tp, bool sequence_parallel,
                       const FaultPlan* faults = nullptr, int vocab_multiple = 1);

  int64_t local_width(LinearRole role, int64_t full) const override;
  int64_t local_tokens(int64_t n_tokens) const override;
  void embedding_forward(Backend& be, const Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                         int64_t seq_len) override;
  void embedding_backward(Backend& be, const Tensor& dwte, const Tensor& dwpe, const Tensor& dout,
                          const Tensor& tokens, int64_t seq_len) override;
  // On one rank without SP (a padded vocabulary on one device) nothing is split or gathered: the
  // layers are the single device's, which keep prepared inputs and weights (under bf16-mixed the
  // bf16 operand producers and kept copies; model/layer_ops.h), with the bits of the split forms.
  // On several ranks no kept input or weight: an input split or gathered across ranks is prepared
  // where it is used.
  bool keeps_prepared_inputs() const override { return one_rank(); }
  void linear_forward_residual(Backend& be, LinearRole role, const Tensor& out, const Tensor& inp,
                               const Tensor& weight, const Tensor& bias, const Tensor& residual,
                               Tensor* kept_input = nullptr, Tensor* kept_weight = nullptr) override;
  void linear_forward_from_operand(Backend& be, LinearRole role, const Tensor& out, const Tensor& inp_operand,
                                   const Tensor& weight, const Tensor& bias, const Tensor& residual,
                                   Tensor* kept_weight = nullptr) override;
  void linear_backward_from_operand(Backend& be, LinearRole role, const Tensor& dinp, const Tensor& dweight,
                                    const Tensor& dout_operand, int64_t rows, const Tensor& inp, const Tensor& weight,
                                    const Tensor& kept_input, const Tensor& kept_weight = Tensor()) override;
  Tensor loss_backward_operand(Backend& be, const Tensor& logits, const Tensor& targets, double grad_scale) override;
  void linear_forward(Backend& be, LinearRole role, const Tensor& out, const Tensor& inp, const Tensor& weight,
                      const Tensor& bias, Tensor* kept_input = nullptr, Tensor* kept_weight = nullptr) override;
  void linear_backward(Backend& be, LinearRole role, const Tensor& dinp, const Tensor& dweight, const Tensor& dbias,
                       const Tensor& dout, const Tensor& inp, const Tensor& weight,
                       const Tensor& kept_input = Tensor(), const Tensor& kept_weight = Tensor()) override;
  void loss_forward(Backend& be, const Tensor& losses, const Tensor& logits, const Tensor& targets) override;
  void loss_backward(Backend& be, const Tensor& logits, const Tensor& targets, double grad_scale) override;

  // Bytes of the buffers these layers hold between calls (SP's gather and partial-product
  // buffers, the vocab-parallel loss's per-row logsumexp): the memory report's share of them.
  std::size_t held_bytes() const;
  // Allocates SP's two [N, C] buffers for micro-batches of `tokens` rows now rather than at first
  // use, so that a memory report printed before the first step has them (nothing without SP).
  void reserve(Backend& be, int64_t tokens, int64_t channels, DType dtype);

 private:
  bool one_rank() const { return group_.size() == 1 && !group_.sequence_parallel; }
  const Tensor& logsumexp_of(const Tensor& logits) const;
  static bool row_parallel(LinearRole role) { return role == LinearRole::AttnOut || role == LinearRole::FcOut; }
  // Reused [rows, cols] buffers, SP only: partial products and input gradients; gathered inputs.
  static Tensor reused(Backend& be, Tensor& buffer, int64_t rows, int64_t cols, DType dtype);
  Tensor scratch(Backend& be, int64_t rows, int64_t cols, DType dtype) { return reused(be, scratch_, rows, cols, dtype); }
  Tensor gather_buffer(Backend& be, const Tensor& local) {
    return reused(be, gathered_, local.dim(0) * group_.size(), local.dim(-1), local.dtype());
  }

  TpGroup group_;
  VocabShard vocab_;
  // [N] per logits buffer (one per micro-batch in flight under pipelining), for loss_backward
  std::map<const void*, Tensor> logsumexp_;
  Tensor scratch_;
  Tensor gathered_;
};

}  // namespace tripod::tp
