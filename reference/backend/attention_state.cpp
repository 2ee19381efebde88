#include "backend/backend.h"
#include "core/error.h"

namespace tripod {

void Backend::check_attention_state(const Tensor& state, const Tensor& qkv, int64_t n_head, const char* op) const {
  check(qkv.rank() == 3 && n_head > 0, op, ": qkv must be [B, T, 3C] with heads > 0, not ", shape_str(qkv.shape()),
        " with ", n_head, " heads");
  const int64_t batch = qkv.dim(0), seq_len = qkv.dim(1), channels = qkv.dim(2) / 3;
  const int64_t need = shape_numel(attention_state_shape(qkv.dtype(), batch, seq_len, channels, n_head));
  check(state.numel() >= need, op, ": the attention state (probs) holds ", state.numel(), " elements; this ",
        name(), "'s attention keeps ",
        keeps_attention_probabilities(qkv.dtype(), seq_len, channels, n_head) ? "the probabilities, " : "its own state, ",
        need, " (Backend::attention_state_shape, under the precision policy in force)");
}

}  // namespace tripod
