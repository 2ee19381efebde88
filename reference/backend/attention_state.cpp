#include "backend/backend.h"
#include "core/error.h"

namespace tripod {

Shape Backend::attention_state_shape(DType dtype, int64_t batch, int64_t seq_len, int64_t channels,
                                     int64_t n_head) const {
  if (takes_flash_attention(dtype, seq_len, channels, n_head))
    return {batch * n_head * seq_len + batch * seq_len * channels};  // logsumexp, then a copy of out
  return {batch, n_head, seq_len, seq_len};
}

void Backend::check_attention_state(const Tensor& state, const Tensor& qkv, int64_t n_head, const char* op) const {
  TRIPOD_CHECK(qkv.rank() == 3 && n_head > 0, op, ": qkv must be [B, T, 3C] with heads > 0, not ",
               shape_str(qkv.shape()), " with ", n_head, " heads");
  const int64_t batch = qkv.dim(0), seq_len = qkv.dim(1), channels = qkv.dim(2) / 3;
  const DType dtype = attention_dtype(qkv, n_head, op);
  const int64_t need = shape_numel(attention_state_shape(dtype, batch, seq_len, channels, n_head));
  check(state.numel() >= need, op, ": the attention state (probs) holds ", state.numel(), " elements; this ",
        name(), "'s attention keeps ",
        takes_flash_attention(dtype, seq_len, channels, n_head) ? "the flash state, " : "the probabilities, ",
        need, " (Backend::attention_state_shape, under the precision policy in force)");
}

DType Backend::attention_dtype(const Tensor& qkv, int64_t n_head, const char* op) const {
  if (qkv.dtype() != DType::BF16) return qkv.dtype();
  TRIPOD_CHECK(qkv.rank() == 3 && n_head > 0, op, ": qkv must be [B, T, 3C] with heads > 0, not ",
               shape_str(qkv.shape()), " with ", n_head, " heads");
  const int64_t seq_len = qkv.dim(1), channels = qkv.dim(2) / 3;
  TRIPOD_CHECK(attention_input_dtype(DType::F32, seq_len, channels, n_head) == DType::BF16, op, ": a bf16 qkv (",
               qkv.describe(), "), which only an attention reading bf16 copies of an fp32 qkv takes (flash-mma "
               "under bf16-mixed, head size up to 64; Backend::attention_input_dtype); this ", name(),
               " reads fp32 for ", n_head, " heads of ", channels, " channels at T = ", seq_len);
  return DType::F32;
}

}  // namespace tripod
