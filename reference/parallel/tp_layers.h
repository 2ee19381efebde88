// Tensor parallelism for the GPT, declared from outside the model (Megatron's split of GPT-2):
//   Qkv, Fc      column-parallel: this rank's heads / MLP columns; input replicated ("f")
//   AttnOut, FcOut  row-parallel: partial products all-reduced ("g"), bias added once after
//   LmHead       column-parallel over the (padded) vocabulary, no bias; the loss is the
//                vocab-parallel cross-entropy (max / sum-exp / target-logit all-reduces)
//   embedding    vocab-parallel: rows outside this rank's range masked, then all-reduced
// Sequence parallelism is not wired in yet (the parallel/tp_* building blocks support it).
#pragma once
#include "model/config.h"
#include "model/layer_ops.h"
#include "parallel/tp_group.h"
#include "parallel/tp_vocab.h"

namespace tripod::tp {

class TensorParallelLayers final : public LayerOps {
 public:
  TensorParallelLayers(const ModelConfig& config, Communicator& tp);  // validates the split

  int64_t local_width(LinearRole role, int64_t full) const override;
  void embedding_forward(Backend& be, const Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                         int64_t seq_len) override;
  void embedding_backward(Backend& be, const Tensor& dwte, const Tensor& dwpe, const Tensor& dout,
                          const Tensor& tokens, int64_t seq_len) override;
  void linear_forward(Backend& be, LinearRole role, const Tensor& out, const Tensor& inp, const Tensor& weight,
                      const Tensor& bias) override;
  void linear_backward(Backend& be, LinearRole role, const Tensor& dinp, const Tensor& dweight, const Tensor& dbias,
                       const Tensor& dout, const Tensor& inp, const Tensor& weight) override;
  void loss_forward(Backend& be, const Tensor& losses, const Tensor& logits, const Tensor& targets) override;
  void loss_backward(Backend& be, const Tensor& logits, const Tensor& targets, double grad_scale) override;

 private:
  static bool row_parallel(LinearRole role) { return role == LinearRole::AttnOut || role == LinearRole::FcOut; }
  TpGroup group_;
  VocabShard vocab_;
  Tensor logsumexp_;  // [N] of the last loss_forward, for loss_backward
};

}  // namespace tripod::tp
