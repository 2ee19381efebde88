// Activation recomputation (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
// Transformer Models"): what a block keeps from its forward for backward, and what backward
// recomputes first. The recomputed tensors are the same arithmetic on the same stored inputs, so
// losses and gradients are bit-identical to a run that keeps everything.
//   none       every activation of every block is kept
//   selective  the attention probabilities [B,H,T,T] and the GELU output [N,F] are not kept:
//              backward recomputes them from the stored qkv and MLP pre-activation
//   full       only each block's output (the next block's input) is kept; backward reruns the
//              block's whole forward from its input, into buffers shared by every block
#pragma once
#include <cstdint>
#include <string>

namespace tripod {

enum class Recompute { None, Selective, Full };

Recompute parse_recompute(const std::string& name);  // "none", "selective" or "full"; throws otherwise
std::string recompute_name(Recompute recompute);

// Elements of activations one block keeps per micro-batch of n_tokens = B*T rows (no sequence or
// tensor parallelism: width c, MLP width f, h heads over t-token sequences), and the elements of
// the buffers shared by all blocks. Gpt::activation_bytes() is built from the same tensors; a test
// holds the two together.
struct BlockActivationElements {
  int64_t kept_per_block = 0;  // per block and micro-batch in flight
  int64_t shared = 0;          // once per model instance (recomputed into)
};
BlockActivationElements block_activation_elements(Recompute recompute, int64_t n_tokens, int64_t c, int64_t f,
                                                  int64_t heads, int64_t seq_len);

}  // namespace tripod
