#include "backend/cuda/host/attention_gemms.h"

#include <algorithm>

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

// One operand of a batched product: where pair 0's matrix starts, its leading dimension, and the
// distance to the next pair's matrix (Ptr: const void* for inputs, void* for the output).
template <typename Ptr>
struct Operand {
  Ptr first;
  int64_t ld, stride;
};

// The head-major buffers' operands: part 0, 1, 2 (q, k, v) of a [3][B*H][T][hd] buffer (or the
// only part of a [B*H][T][hd] one) from row `row`; a [B*H][T][T] buffer from (row, col).
template <typename Ptr>
Operand<Ptr> rows_of(const AttentionDims& d, Ptr buffer, int part, int64_t row, std::size_t bytes) {
  const int64_t hd = d.head_dim(), part_elements = d.pairs() * d.seq_len * hd;
  return Operand<Ptr>{at(buffer, part * part_elements + row * hd, bytes), hd, d.seq_len * hd};
}
template <typename Ptr>
Operand<Ptr> square_at(const AttentionDims& d, Ptr buffer, int64_t row, int64_t col, std::size_t bytes) {
  return Operand<Ptr>{at(buffer, row * d.seq_len + col, bytes), d.seq_len, d.seq_len * d.seq_len};
}

// C[m,n] = alpha * op(A) @ op(B) for every pair (beta = 0: C is overwritten, never read).
RowMajorGemm batched(const AttentionDims& d, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                     Operand<const void*> a, Operand<const void*> b, Operand<void*> c, AttentionBytes bytes) {
  RowMajorGemm g{trans_a, trans_b, m,    n,    k,       alpha, 0.0,           a.first,
                 a.ld,    b.first, b.ld, c.first, c.ld, bytes.operands, bytes.result};
  g.batch_count = d.pairs();
  g.stride_a = a.stride;
  g.stride_b = b.stride;
  g.stride_c = c.stride;
  return g;
}

constexpr int kQ = 0, kK = 1, kV = 2;

}  // namespace

int64_t attention_row_blocks(int64_t seq_len) { return std::clamp<int64_t>(seq_len / 256, 1, 4); }

AttentionDims checked_attention_dims(const char* op, int64_t batch, int64_t seq_len, int64_t channels,
                                     int64_t n_head) {
  check(batch >= 0 && seq_len >= 0 && channels >= 0 && n_head > 0, op, ": bad sizes (batch ", batch, ", T ",
        seq_len, ", C ", channels, ", heads ", n_head, ")");
  check(channels % n_head == 0, op, ": ", channels, " channels do not split into ", n_head, " heads");
  return AttentionDims{batch, seq_len, channels, n_head, attention_row_blocks(seq_len)};
}

RowMajorGemm attention_scores_gemm(const AttentionDims& d, int64_t r, const void* qkvh, void* probs,
                                   AttentionBytes bytes, double scale) {
  const int64_t r0 = d.block_begin(r), r1 = d.block_begin(r + 1);
  // S[r0:r1, 0:r1] = scale * Q[r0:r1, hd] @ (K[0:r1, hd])^T
  return batched(d, false, true, r1 - r0, r1, d.head_dim(), scale, rows_of(d, qkvh, kQ, r0, bytes.operands),
                 rows_of(d, qkvh, kK, 0, bytes.operands), square_at(d, probs, r0, 0, bytes.result), bytes);
}

RowMajorGemm attention_values_gemm(const AttentionDims& d, int64_t r, const void* probs, const void* qkvh, void* outh,
                                   AttentionBytes bytes) {
  const int64_t r0 = d.block_begin(r), r1 = d.block_begin(r + 1);
  // O[r0:r1, hd] = P[r0:r1, 0:r1] @ V[0:r1, hd]
  return batched(d, false, false, r1 - r0, d.head_dim(), r1, 1.0, square_at(d, probs, r0, 0, bytes.operands),
                 rows_of(d, qkvh, kV, 0, bytes.operands), rows_of(d, outh, 0, r0, bytes.result), bytes);
}

RowMajorGemm attention_dprobs_gemm(const AttentionDims& d, int64_t r, const void* douth, const void* qkvh,
                                   void* score_grads, AttentionBytes bytes) {
  const int64_t r0 = d.block_begin(r), r1 = d.block_begin(r + 1);
  // dP[r0:r1, 0:r1] = dO[r0:r1, hd] @ (V[0:r1, hd])^T
  return batched(d, false, true, r1 - r0, r1, d.head_dim(), 1.0, rows_of(d, douth, 0, r0, bytes.operands),
                 rows_of(d, qkvh, kV, 0, bytes.operands), square_at(d, score_grads, r0, 0, bytes.result), bytes);
}

RowMajorGemm attention_dquery_gemm(const AttentionDims& d, int64_t r, const void* score_grads, const void* qkvh,
                                   void* dqkvh, AttentionBytes bytes) {
  const int64_t r0 = d.block_begin(r), r1 = d.block_begin(r + 1);
  // dQ[r0:r1, hd] = dS[r0:r1, 0:r1] @ K[0:r1, hd]
  return batched(d, false, false, r1 - r0, d.head_dim(), r1, 1.0, square_at(d, score_grads, r0, 0, bytes.operands),
                 rows_of(d, qkvh, kK, 0, bytes.operands), rows_of(d, dqkvh, kQ, r0, bytes.result), bytes);
}

RowMajorGemm attention_dkey_gemm(const AttentionDims& d, int64_t c, const void* score_grads, const void* qkvh,
                                 void* dqkvh, AttentionBytes bytes) {
  const int64_t c0 = d.block_begin(c), c1 = d.block_begin(c + 1);
  // dK[c0:c1, hd] = (dS[c0:T, c0:c1])^T @ Q[c0:T, hd]: queries before c0 see none of these keys
  return batched(d, true, false, c1 - c0, d.head_dim(), d.seq_len - c0, 1.0,
                 square_at(d, score_grads, c0, c0, bytes.operands), rows_of(d, qkvh, kQ, c0, bytes.operands),
                 rows_of(d, dqkvh, kK, c0, bytes.result), bytes);
}

RowMajorGemm attention_dvalue_gemm(const AttentionDims& d, int64_t c, const void* probs, const void* douth,
                                   void* dqkvh, AttentionBytes bytes) {
  const int64_t c0 = d.block_begin(c), c1 = d.block_begin(c + 1);
  // dV[c0:c1, hd] = (P[c0:T, c0:c1])^T @ dO[c0:T, hd]
  return batched(d, true, false, c1 - c0, d.head_dim(), d.seq_len - c0, 1.0, square_at(d, probs, c0, c0, bytes.operands),
                 rows_of(d, douth, 0, c0, bytes.operands), rows_of(d, dqkvh, kV, c0, bytes.result), bytes);
}

}  // namespace tripod::cuda
