#include "backend/cuda/host/attention_gemms.h"

#include "core/error.h"

namespace tripod::cuda {
namespace {

// The element `offset` elements after `base`.
const void* at(const void* base, int64_t offset, std::size_t element_bytes) {
  return static_cast<const char*>(base) + offset * static_cast<int64_t>(element_bytes);
}
void* at(void* base, int64_t offset, std::size_t element_bytes) {
  return static_cast<char*>(base) + offset * static_cast<int64_t>(element_bytes);
}

// Where head h's matrices start (batch row 0) and how far apart the batch rows' matrices are.
struct HeadOperands {
  int64_t q, k, v;      // in qkv (and dqkv): the three thirds' column offsets
  int64_t o;            // in out and dout
  int64_t scores;       // in probs and the score gradients
  int64_t qkv_stride, o_stride, scores_stride;
};

HeadOperands head_operands(const AttentionDims& d, int64_t h) {
  const int64_t hd = d.head_dim(), t = d.seq_len, c = d.channels;
  return HeadOperands{h * hd, c + h * hd, 2 * c + h * hd, h * hd, h * t * t, t * 3 * c, t * c, d.n_head * t * t};
}

// C[m,n] = alpha * op(A) @ op(B) for every batch row (beta = 0: C is overwritten, never read).
RowMajorGemm batched(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const void* a,
                     int64_t lda, int64_t stride_a, const void* b, int64_t ldb, int64_t stride_b, void* c, int64_t ldc,
                     int64_t stride_c, int64_t batch, std::size_t element_bytes) {
  RowMajorGemm g{trans_a, trans_b, m, n, k, alpha, 0.0, a, lda, b, ldb, c, ldc, element_bytes, element_bytes};
  g.batch_count = batch;
  g.stride_a = stride_a;
  g.stride_b = stride_b;
  g.stride_c = stride_c;
  return g;
}

}  // namespace

AttentionDims checked_attention_dims(const char* op, int64_t batch, int64_t seq_len, int64_t channels,
                                     int64_t n_head) {
  check(batch >= 0 && seq_len >= 0 && channels >= 0 && n_head > 0, op, ": bad sizes (batch ", batch, ", T ",
        seq_len, ", C ", channels, ", heads ", n_head, ")");
  check(channels % n_head == 0, op, ": ", channels, " channels do not split into ", n_head, " heads");
  return AttentionDims{batch, seq_len, channels, n_head};
}

RowMajorGemm attention_scores_gemm(const AttentionDims& d, int64_t h, const void* qkv, void* probs,
                                   std::size_t element_bytes, double scale) {
  const HeadOperands o = head_operands(d, h);
  const int64_t t = d.seq_len, ld = 3 * d.channels;
  // S[T,T] = scale * Q[T,hd] @ (K[T,hd])^T
  return batched(false, true, t, t, d.head_dim(), scale, at(qkv, o.q, element_bytes), ld, o.qkv_stride,
                 at(qkv, o.k, element_bytes), ld, o.qkv_stride, at(probs, o.scores, element_bytes), t, o.scores_stride,
                 d.batch, element_bytes);
}

RowMajorGemm attention_values_gemm(const AttentionDims& d, int64_t h, const void* probs, const void* qkv, void* out,
                                   std::size_t element_bytes) {
  const HeadOperands o = head_operands(d, h);
  const int64_t t = d.seq_len;
  // O[T,hd] = P[T,T] @ V[T,hd]
  return batched(false, false, t, d.head_dim(), t, 1.0, at(probs, o.scores, element_bytes), t, o.scores_stride,
                 at(qkv, o.v, element_bytes), 3 * d.channels, o.qkv_stride, at(out, o.o, element_bytes), d.channels,
                 o.o_stride, d.batch, element_bytes);
}

RowMajorGemm attention_dprobs_gemm(const AttentionDims& d, int64_t h, const void* dout, const void* qkv,
                                   void* score_grads, std::size_t element_bytes) {
  const HeadOperands o = head_operands(d, h);
  const int64_t t = d.seq_len;
  // dP[T,T] = dO[T,hd] @ (V[T,hd])^T
  return batched(false, true, t, t, d.head_dim(), 1.0, at(dout, o.o, element_bytes), d.channels, o.o_stride,
                 at(qkv, o.v, element_bytes), 3 * d.channels, o.qkv_stride, at(score_grads, o.scores, element_bytes),
                 t, o.scores_stride, d.batch, element_bytes);
}

RowMajorGemm attention_dquery_gemm(const AttentionDims& d, int64_t h, const void* score_grads, const void* qkv,
                                   void* dqkv, std::size_t element_bytes) {
  const HeadOperands o = head_operands(d, h);
  const int64_t t = d.seq_len, ld = 3 * d.channels;
  // dQ[T,hd] = dS[T,T] @ K[T,hd]
  return batched(false, false, t, d.head_dim(), t, 1.0, at(score_grads, o.scores, element_bytes), t, o.scores_stride,
                 at(qkv, o.k, element_bytes), ld, o.qkv_stride, at(dqkv, o.q, element_bytes), ld, o.qkv_stride,
                 d.batch, element_bytes);
}

RowMajorGemm attention_dkey_gemm(const AttentionDims& d, int64_t h, const void* score_grads, const void* qkv,
                                 void* dqkv, std::size_t element_bytes) {
  const HeadOperands o = head_operands(d, h);
  const int64_t t = d.seq_len, ld = 3 * d.channels;
  // dK[T,hd] = (dS[T,T])^T @ Q[T,hd]
  return batched(true, false, t, d.head_dim(), t, 1.0, at(score_grads, o.scores, element_bytes), t, o.scores_stride,
                 at(qkv, o.q, element_bytes), ld, o.qkv_stride, at(dqkv, o.k, element_bytes), ld, o.qkv_stride,
                 d.batch, element_bytes);
}

RowMajorGemm attention_dvalue_gemm(const AttentionDims& d, int64_t h, const void* probs, const void* dout,
                                   void* dqkv, std::size_t element_bytes) {
  const HeadOperands o = head_operands(d, h);
  const int64_t t = d.seq_len;
  // dV[T,hd] = (P[T,T])^T @ dO[T,hd]
  return batched(true, false, t, d.head_dim(), t, 1.0, at(probs, o.scores, element_bytes), t, o.scores_stride,
                 at(dout, o.o, element_bytes), d.channels, o.o_stride, at(dqkv, o.v, element_bytes), 3 * d.channels,
                 o.qkv_stride, d.batch, element_bytes);
}

}  // namespace tripod::cuda
