#include "parallel/tp_group.h"

#include "core/error.h"

namespace tripod::tp {

void validate_tensor_parallel(const ModelConfig& c, int tp) {
  check(tp >= 1, "tensor parallel size must be >= 1 (got ", tp, ")");
  check(tp <= c.n_head, "tensor parallel size ", tp, " exceeds model.n_head = ", c.n_head,
        ": attention is split by whole heads, so every rank needs at least one head");
  check(c.n_head % tp == 0, "tensor parallel size ", tp, " does not divide model.n_head = ", c.n_head,
        ": attention is split by whole heads, the same number on every rank");
  // d_model = n_head * head_dim, so tp also divides d_model; checked anyway for a clear message
  // should a config ever bypass ModelConfig::validate.
  check(c.d_model % tp == 0, "tensor parallel size ", tp, " does not divide model.d_model = ", c.d_model);
  check(c.d_ff % tp == 0, "tensor parallel size ", tp, " does not divide model.d_ff = ", c.d_ff,
        ": the MLP's hidden features are split evenly (c_fc by rows, c_proj by columns)");
}

int64_t sequence_shard_rows(int64_t n_tokens, int tp) {
  check(tp >= 1, "tensor parallel size must be >= 1 (got ", tp, ")");
  check(n_tokens % tp == 0, "sequence parallelism splits the N = B*T = ", n_tokens,
        " tokens into tensor-parallel size ", tp, " contiguous blocks of N/tp tokens, but ", tp, " does not divide ",
        n_tokens, " (choose B*T divisible by the tensor-parallel size)");
  return n_tokens / tp;
}

}  // namespace tripod::tp
