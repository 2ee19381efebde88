// The activations a Gpt keeps per micro-batch (a slot), its shared backward scratch, and what
// recomputation refills: private to the model (gpt.cpp computes with them,
// gpt_activations.cpp allocates and counts them).
#pragma once
#include <cstddef>
#include <optional>
#include <vector>

#include "model/gpt.h"

namespace tripod {

// What one block's backward reads. Under recomputation some of these are not the micro-batch's
// own: they alias the shared buffers of Scratch::recomputed, which backward fills again first.
struct Gpt::BlockActivations {
  Tensor ln1, ln1_mean, ln1_rstd;  // [R,C], [R], [R]; ln1, ln2, fc_gelu undefined where only copies are made
  Tensor qkv;                      // [N,3A]
  Tensor probs;                    // [B,H,T,T]
  Tensor atty;                     // [N,A] attention output before c_proj
  Tensor res2;                     // [R,C] residual after attention
  Tensor ln2, ln2_mean, ln2_rstd;  // [R,C], [R], [R]
  Tensor fc, fc_gelu;              // [N,F]
  Tensor res3;                     // [R,C] layer output (always the micro-batch's own)
  // The prepared GEMM operands of ln1, atty, ln2 and fc_gelu (bf16 copies under bf16-mixed, see
  // LayerOps::linear_forward), kept from the forward for the backward, which drops them: where
  // `keep_operands` (the layers keep them and the backend rounds fp32 operands), and only for the
  // micro-batch's own activations, not recomputed ones (keeping those would undo the saving), and
  // not in a forward-only pass (set_forward_only: evaluation).
  // ln1, atty, ln2 and gelu(fc) are read only by a GEMM and its backward: where their copies are
  // kept, they are not stored in fp32 at all (Backend::layernorm_operand, attention_operand and
  // gelu_operand write the bf16 copies directly; an evaluation makes the copies and drops them).
  // With each kept input, its GEMM's weight's prepared copy (LayerOps::linear_forward's
  // kept_weight): the weights do not change between a micro-batch's forward and its backward, so
  // the backward's dX products take the forward's copies instead of rounding the weights again.
  // One copy a weight, shared by the micro-batches in flight (model/weight_copies.h); none where
  // the model keeps no weight copies (Gpt::set_keep_weight_copies: ZeRO-3).
  bool keep_operands = false;
  Tensor ln1_op, atty_op, ln2_op, fc_gelu_op;
  Tensor qkv_w_op, proj_w_op, fc_w_op, fcproj_w_op;
};

// Everything the backward pass of one micro-batch needs, for one (B, T) and the span's layers.
struct Gpt::Activations {
  Tensor tokens, targets;  // [B,T] int32
  Tensor host_tokens;       // [B,T] int32 on the host: the wte rows the embedding backward writes
  Tensor encoded;          // [R,C] residual stream entering the span (embedding output on the first)
  std::vector<BlockActivations> layers;  // the span's, first_layer first
  Tensor lnf, lnf_mean, lnf_rstd;  // [R,C], [R], [R] (head only); lnf undefined where only lnf_op is made
  // lnf's prepared GEMM operand, kept from the forward for the LM head's backward, which drops it
  // (as BlockActivations' copies: where the layers keep operands, not in a forward-only pass).
  Tensor lnf_op, head_w_op;  // and the LM head weight's
  Tensor logits;                   // [N,V]; becomes dlogits in backward (head only)
  // The grad_scale at which the forward wrote dlogits over the logits already (its
  // loss_grad_scale, LayerOps::loss_forward_with_gradient); empty where the backward writes them.
  std::optional<double> dlogits_written_at;
  Tensor losses;                   // [N] (head only)
  Tensor loss_sum;                 // fp64 [1]: sum of losses over valid targets (head only)
  std::size_t bytes = 0;           // of the tensors above that are the micro-batch's own
};

// Backward scratch, shared by every layer and micro-batch (one backward runs at a time), and the
// block activations that recomputation refills (undefined where kept per micro-batch).
struct Gpt::Scratch {
  // [R,C] x2, [N,A], [N,3A], [N,F] x2; no dqkv or dfc where keeps_operands (made only as bf16 operands);
  // dfc_gelu in Gpt::rounded_activation_dtype (bf16 under bf16-mixed); datty in qkv's dtype (bf16
  // under flash-mma, Backend::attention_input_dtype) but under selective recomputation
  Tensor dres, dln, datty, dqkv, dfc, dfc_gelu;
  BlockActivations recomputed;
  std::size_t bytes = 0;
};

}  // namespace tripod
