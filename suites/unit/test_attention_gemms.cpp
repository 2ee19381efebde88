// The CUDA backend's attention (backend/cuda/kernels/attention.cu), replayed on the host step by
// step against cpu::attention_forward / attention_backward: the head-major copies by
// attention_math.h's token_major_index, every product as the call
// backend/cuda/host/attention_gemms.h makes, mapped by map_row_major_gemm and run through the
// column-major reference GEMM (what cuBLASLt computes with those arguments), and the softmax rows
// by attention_math.h's functions in the kernels' thread order (kAttentionSoftmaxThreads threads a
// row, row_reduce_math.h's block reduction); with 1 to 4 causal row blocks. A wrong head offset,
// leading dimension, batch stride, transpose, block bound, scale or mask moves a result by O(1).
//
// Tolerances, relative to each output's largest element (out, probs, and dq, dk, dv separately):
// the caps kRelativeCap (1e-12 fp64, 1e-5 fp32). The replay's sums run in other orders than
// OpenBLAS's blocked, fused ones (and the reference GEMM sums in fp64), over at most
// max(T, hd) = 64 terms of size ~1: a few ulps of the largest partial sums.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cuda/host/attention_gemms.h"
#include "backend/kernels/attention_math.h"
#include "backend/kernels/row_reduce_math.h"
#include "column_major_gemm_reference.h"
#include "core/error.h"
#include "kernel_math_test_util.h"

namespace tripod::cuda {
namespace {

using kernels::kAttentionSoftmaxThreads;
using tripod::testing::kRelativeCap;
using tripod::testing::relative_difference;

struct Shape {
  int64_t batch, seq_len, n_head, head_dim, row_blocks;
  int64_t channels() const { return n_head * head_dim; }
  AttentionDims dims() const { return AttentionDims{batch, seq_len, channels(), n_head, row_blocks}; }
  std::string str() const {
    return str_cat("B=", batch, " T=", seq_len, " H=", n_head, " hd=", head_dim, " row blocks ", row_blocks);
  }
  std::string key() const {
    return str_cat("B", batch, "_T", seq_len, "_H", n_head, "_hd", head_dim, "_R", row_blocks);
  }
};

// What cuBLASLt does with the call the backend builds (an empty block, T < row blocks: nothing);
// TAB: the operands' type (bf16 for the bf16-operand products), TC the result's.
template <typename TAB, typename TC = TAB>
void run(const RowMajorGemm& call) {
  const CublasLtGemm lt = map_row_major_gemm(call, "gemm");
  if (lt.work == GemmWork::Nothing) return;
  ASSERT_EQ(lt.work, GemmWork::Matmul);
  testing::column_major_reference<TAB, TC>(lt);
}
template <typename T>
constexpr AttentionBytes same_bytes() {
  return {sizeof(T), sizeof(T)};
}
constexpr AttentionBytes kBf16Operands{sizeof(bf16), sizeof(float)};

// attention.cu's bf16 operand copies: each value rounded to nearest even.
std::vector<bf16> rounded(const std::vector<float>& x) {
  std::vector<bf16> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) out[i] = float_to_bf16(x[i]);
  return out;
}

// attention.cu's copies between token-major [B,T,parts*C] and head-major [parts][B*H][T][hd], as
// its kernel indexes them: row r of hd elements starts at r*hd head-major and at
// hd * token_major_index(r) of one-element rows token-major.
inline int64_t token_major_row_start(int64_t row, const Shape& s, int64_t parts) {
  return s.head_dim * kernels::token_major_index(row, s.batch, s.seq_len, s.n_head, 1, parts);
}
template <typename T>
std::vector<T> to_head_major(const std::vector<T>& token_major, const Shape& s, int64_t parts) {
  std::vector<T> head_major(token_major.size(), T(-3));
  for (int64_t row = 0; row < static_cast<int64_t>(head_major.size()) / s.head_dim; ++row)
    for (int64_t e = 0; e < s.head_dim; ++e)
      head_major[row * s.head_dim + e] = token_major[token_major_row_start(row, s, parts) + e];
  return head_major;
}
template <typename T>
void to_token_major(std::vector<T>& token_major, const std::vector<T>& head_major, const Shape& s, int64_t parts) {
  for (int64_t row = 0; row < static_cast<int64_t>(head_major.size()) / s.head_dim; ++row)
    for (int64_t e = 0; e < s.head_dim; ++e)
      token_major[token_major_row_start(row, s, parts) + e] = head_major[row * s.head_dim + e];
}

// A block's reduction of per-thread values (softmax_block_reduce.cuh).
template <typename T, class ThreadValue, class Combine>
T block_reduce(const ThreadValue& thread_value, Combine combine) {
  T values[kAttentionSoftmaxThreads];
  for (int tid = 0; tid < kAttentionSoftmaxThreads; ++tid) values[tid] = thread_value(tid);
  return kernels::block_reduce_in_device_order(values, kAttentionSoftmaxThreads, combine);
}

// The grouped fp32 kernels' per-thread values (attention_math.h): slot s of thread tid is column
// owned_column(tid, threads, s), 0 past the causal length n (the kernel loads only causal groups).
// More slots than any kernel uses: the extra ones lie past T and add nothing.
constexpr int kReplaySlots = kernels::kSoftmaxGroupWidth * kernels::kSoftmaxMaxGroups;
using ThreadSlots = std::vector<std::array<float, kReplaySlots>>;
ThreadSlots owned_values(const float* row, int64_t n) {
  ThreadSlots v(kAttentionSoftmaxThreads);
  for (int tid = 0; tid < kAttentionSoftmaxThreads; ++tid)
    for (int s = 0; s < kReplaySlots; ++s) {
      const int64_t j = kernels::owned_column(tid, kAttentionSoftmaxThreads, s);
      v[tid][s] = j < n ? row[j] : 0.0f;
    }
  return v;
}
template <typename T>
bool grouped_rows(int64_t seq_len) {
  return std::is_same_v<T, float> && kernels::softmax_groups_per_thread(seq_len, kAttentionSoftmaxThreads) > 0;
}

// causal_softmax_forward_grouped_kernel on one row, in place.
void softmax_forward_grouped_row(float* p, int64_t seq_len, int64_t n) {
  ThreadSlots v = owned_values(p, n);
  const float row_max = block_reduce<float>(
      [&](int tid) { return kernels::owned_max_partial<float, kReplaySlots>(v[tid].data(), tid, kAttentionSoftmaxThreads, n); },
      kernels::MaxOf{});
  const float denom = block_reduce<float>(
      [&](int tid) {
        return kernels::owned_exp_in_place_partial<float, kReplaySlots>(v[tid].data(), row_max, tid,
                                                                        kAttentionSoftmaxThreads, n);
      },
      kernels::SumOf{});
  for (int64_t j = 0; j < seq_len; ++j) p[j] = 0.0f;
  for (int tid = 0; tid < kAttentionSoftmaxThreads; ++tid)
    for (int s = 0; s < kReplaySlots; ++s) {
      const int64_t j = kernels::owned_column(tid, kAttentionSoftmaxThreads, s);
      if (j < n) p[j] = v[tid][s] / denom;
    }
}

// causal_softmax_forward_kernel (or, for fp32 rows of whole groups, the grouped kernel) over every
// row of the [B*H*T, T] scores, in place.
template <typename T>
void softmax_forward_rows(std::vector<T>& probs, int64_t seq_len) {
  const int64_t rows = static_cast<int64_t>(probs.size()) / seq_len;
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t n = row % seq_len + 1;
    T* p = probs.data() + row * seq_len;
    if constexpr (std::is_same_v<T, float>) {
      if (grouped_rows<T>(seq_len)) {
        softmax_forward_grouped_row(p, seq_len, n);
        continue;
      }
    }
    const T row_max = block_reduce<T>(
        [&](int tid) { return kernels::strided_max_partial(p, n, tid, kAttentionSoftmaxThreads); }, kernels::MaxOf{});
    const T denom = block_reduce<T>(
        [&](int tid) { return kernels::exp_in_place_partial(p, n, row_max, tid, kAttentionSoftmaxThreads); },
        kernels::SumOf{});
    for (int64_t j = 0; j < seq_len; ++j) p[j] = j < n ? p[j] / denom : T(0);
  }
}

// A value no product may read: NaN, which would spread to every sum that took it.
template <typename T>
T unread() {
  return std::numeric_limits<T>::quiet_NaN();
}

// causal_softmax_backward_kernel: dp in, ds out, in place, as far as the products read a row
// (causal_block_end); past it the row keeps what it held.
template <typename T>
void softmax_backward_rows(std::vector<T>& dscores, const std::vector<T>& probs, int64_t seq_len, int64_t row_blocks,
                           T scale) {
  const int64_t rows = static_cast<int64_t>(probs.size()) / seq_len;
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t t = row % seq_len, n = t + 1;
    const T* p = probs.data() + row * seq_len;
    T* ds = dscores.data() + row * seq_len;
    T row_dot;
    if constexpr (std::is_same_v<T, float>) {
      if (grouped_rows<T>(seq_len)) {  // causal_softmax_backward_grouped_kernel's order
        const ThreadSlots pv = owned_values(p, n), dpv = owned_values(ds, n);
        row_dot = block_reduce<float>(
            [&](int tid) {
              return kernels::owned_dot_partial<float, kReplaySlots>(pv[tid].data(), dpv[tid].data(), tid,
                                                                     kAttentionSoftmaxThreads, n);
            },
            kernels::SumOf{});
      } else {
        row_dot = block_reduce<T>(
            [&](int tid) { return kernels::strided_dot_partial(p, ds, n, tid, kAttentionSoftmaxThreads); },
            kernels::SumOf{});
      }
    } else {
      row_dot = block_reduce<T>(
          [&](int tid) { return kernels::strided_dot_partial(p, ds, n, tid, kAttentionSoftmaxThreads); },
          kernels::SumOf{});
    }
    for (int64_t j = 0; j < kernels::causal_block_end(t, seq_len, row_blocks); ++j)
      ds[j] = j < n ? kernels::softmax_backward_score(p[j], ds[j], row_dot, scale) : T(0);
  }
}

// The softmax kernels' bf16 operand rows: x rounded as far as the products read each row, the rest
// of the scratch as it was (NaN here, so that a product reading it fails the comparison).
std::vector<bf16> rounded_rows(const std::vector<float>& x, int64_t seq_len, int64_t row_blocks) {
  std::vector<bf16> out(x.size(), float_to_bf16(unread<float>()));
  for (std::size_t i = 0; i < x.size(); ++i) {
    const int64_t t = static_cast<int64_t>(i) / seq_len % seq_len, j = static_cast<int64_t>(i) % seq_len;
    if (j < kernels::causal_block_end(t, seq_len, row_blocks)) out[i] = float_to_bf16(x[i]);
  }
  return out;
}

// attention_forward of attention.cu, in its order: the head-major copy, the score GEMMs of every
// row block, the softmax, the value GEMMs, the copy back. probs starts as garbage: the GEMMs and
// the softmax must overwrite all of it.
template <typename T>
void forward_as_the_backend(const Shape& s, const std::vector<T>& qkv, std::vector<T>& out, std::vector<T>& probs) {
  const AttentionDims d = s.dims();
  const std::vector<T> qkvh = to_head_major(qkv, s, 3);
  std::vector<T> outh(out.size(), T(-4));
  const double scale = kernels::attention_scale<T>(s.head_dim);
  for (int64_t r = 0; r < d.row_blocks; ++r)
    run<T>(attention_scores_gemm(d, r, qkvh.data(), probs.data(), same_bytes<T>(), scale));
  softmax_forward_rows(probs, s.seq_len);
  for (int64_t r = 0; r < d.row_blocks; ++r)
    run<T>(attention_values_gemm(d, r, probs.data(), qkvh.data(), outh.data(), same_bytes<T>()));
  to_token_major(out, outh, s, 1);
}

template <typename T>
void backward_as_the_backend(const Shape& s, const std::vector<T>& qkv, const std::vector<T>& dout,
                             const std::vector<T>& probs, std::vector<T>& dqkv) {
  const AttentionDims d = s.dims();
  const std::vector<T> qkvh = to_head_major(qkv, s, 3), douth = to_head_major(dout, s, 1);
  std::vector<T> dqkvh(dqkv.size(), T(-6));
  std::vector<T> score_grads(probs.size(), unread<T>());  // the backend's reused buffer: stale values
  for (int64_t r = 0; r < d.row_blocks; ++r)
    run<T>(attention_dprobs_gemm(d, r, douth.data(), qkvh.data(), score_grads.data(), same_bytes<T>()));
  softmax_backward_rows(score_grads, probs, s.seq_len, d.row_blocks, kernels::attention_scale<T>(s.head_dim));
  for (int64_t r = 0; r < d.row_blocks; ++r) {
    run<T>(attention_dquery_gemm(d, r, score_grads.data(), qkvh.data(), dqkvh.data(), same_bytes<T>()));
    run<T>(attention_dkey_gemm(d, r, score_grads.data(), qkvh.data(), dqkvh.data(), same_bytes<T>()));
    run<T>(attention_dvalue_gemm(d, r, probs.data(), douth.data(), dqkvh.data(), same_bytes<T>()));
  }
  to_token_major(dqkv, dqkvh, s, 3);
}

// The same under the bf16-operand policy (fp32 tensors): head-major copies rounded to bf16 as they
// are copied, the probabilities and score gradients rounded beside the softmax rows' fp32 results,
// every product bf16 x bf16 -> fp32.
void forward_bf16_as_the_backend(const Shape& s, const std::vector<float>& qkv, std::vector<float>& out,
                                 std::vector<float>& probs) {
  const AttentionDims d = s.dims();
  const std::vector<bf16> qkvh16 = rounded(to_head_major(qkv, s, 3));
  std::vector<float> outh(out.size(), -4.0f);
  const double scale = kernels::attention_scale<float>(s.head_dim);
  for (int64_t r = 0; r < d.row_blocks; ++r)
    run<bf16, float>(attention_scores_gemm(d, r, qkvh16.data(), probs.data(), kBf16Operands, scale));
  softmax_forward_rows(probs, s.seq_len);
  const std::vector<bf16> probs16 = rounded_rows(probs, s.seq_len, d.row_blocks);
  for (int64_t r = 0; r < d.row_blocks; ++r)
    run<bf16, float>(attention_values_gemm(d, r, probs16.data(), qkvh16.data(), outh.data(), kBf16Operands));
  to_token_major(out, outh, s, 1);
}

void backward_bf16_as_the_backend(const Shape& s, const std::vector<float>& qkv, const std::vector<float>& dout,
                                  const std::vector<float>& probs, std::vector<float>& dqkv) {
  const AttentionDims d = s.dims();
  const std::vector<bf16> qkvh16 = rounded(to_head_major(qkv, s, 3)), douth16 = rounded(to_head_major(dout, s, 1));
  std::vector<float> dqkvh(dqkv.size(), -6.0f);
  std::vector<float> score_grads(probs.size(), unread<float>());
  for (int64_t r = 0; r < d.row_blocks; ++r)
    run<bf16, float>(attention_dprobs_gemm(d, r, douth16.data(), qkvh16.data(), score_grads.data(), kBf16Operands));
  softmax_backward_rows(score_grads, probs, s.seq_len, d.row_blocks, kernels::attention_scale<float>(s.head_dim));
  const std::vector<bf16> score_grads16 = rounded_rows(score_grads, s.seq_len, d.row_blocks),
                          probs16 = rounded_rows(probs, s.seq_len, d.row_blocks);
  for (int64_t r = 0; r < d.row_blocks; ++r) {
    run<bf16, float>(attention_dquery_gemm(d, r, score_grads16.data(), qkvh16.data(), dqkvh.data(), kBf16Operands));
    run<bf16, float>(attention_dkey_gemm(d, r, score_grads16.data(), qkvh16.data(), dqkvh.data(), kBf16Operands));
    run<bf16, float>(attention_dvalue_gemm(d, r, probs16.data(), douth16.data(), dqkvh.data(), kBf16Operands));
  }
  to_token_major(dqkv, dqkvh, s, 3);
}

// The columns [part * C, (part + 1) * C) of every row of dqkv [B*T, 3C]: dq, dk or dv.
template <typename T>
std::vector<T> third(const std::vector<T>& dqkv, int64_t rows, int64_t channels, int part) {
  std::vector<T> out;
  for (int64_t r = 0; r < rows; ++r)
    out.insert(out.end(), dqkv.begin() + r * 3 * channels + part * channels,
               dqkv.begin() + r * 3 * channels + (part + 1) * channels);
  return out;
}

std::vector<Shape> shapes() {
  std::vector<Shape> all;
  for (int64_t seq_len : {1, 7, 64})
    for (int64_t head_dim : {1, 8, 64})
      for (int64_t n_head : {1, 3})
        for (int64_t row_blocks : {int64_t{1}, int64_t{3}}) all.push_back({2, seq_len, n_head, head_dim, row_blocks});
  all.push_back({3, 33, 2, 48, 2});   // three batch rows, an odd T past a warp, blocks of 16 and 17
  all.push_back({1, 130, 1, 16, 4});  // rows longer than the block (130 > 128 threads); ragged blocks
  all.push_back({1, 9, 1, 160, 4});
  all.push_back({1, 2, 2, 4, 4});     // more blocks than rows: empty blocks do nothing
  all.push_back({1, 512, 1, 8, attention_row_blocks(512)});  // what the backend picks at T = 512
  // fp32 rows in registers: two groups a thread, blocks ending mid-group (258); four groups, 257.
  all.push_back({1, 516, 1, 8, attention_row_blocks(516)});
  all.push_back({1, 1028, 1, 4, 4});
  return all;
}

template <typename T>
void expect_attention_matches_cpu(uint64_t seed) {
  for (const Shape& s : shapes()) {
    const int64_t rows = s.batch * s.seq_len, C = s.channels();
    const std::vector<T> qkv = tripod::testing::uniform_values<T>(rows * 3 * C, seed, "test.attention.qkv", -2, 2);
    const std::vector<T> dout = tripod::testing::uniform_values<T>(rows * C, seed, "test.attention.dout", -1, 1);
    const auto n_probs = static_cast<std::size_t>(s.batch * s.n_head * s.seq_len * s.seq_len);

    std::vector<T> want_out(rows * C), want_probs(n_probs), got_out(rows * C, T(-9)), got_probs(n_probs, T(-9));
    cpu::attention_forward<T>(want_out.data(), want_probs.data(), qkv.data(), s.batch, s.seq_len, C, s.n_head);
    forward_as_the_backend(s, qkv, got_out, got_probs);
    const double d_out = relative_difference(got_out, want_out), d_probs = relative_difference(got_probs, want_probs);
    EXPECT_LE(d_out, kRelativeCap<T>) << "out, " << s.str();
    EXPECT_LE(d_probs, kRelativeCap<T>) << "probs, " << s.str();
    int64_t masked_nonzero = 0;  // the causal mask: exactly 0 past the diagonal, as the CPU stores it
    for (std::size_t i = 0; i < n_probs; ++i) {
      const int64_t t = static_cast<int64_t>(i) / s.seq_len % s.seq_len, j = static_cast<int64_t>(i) % s.seq_len;
      masked_nonzero += j > t && (got_probs[i] != T(0) || want_probs[i] != T(0));
    }
    EXPECT_EQ(masked_nonzero, 0) << s.str();

    // Backward from the replay's own probabilities, as the backend runs it; it overwrites dqkv.
    std::vector<T> want_dqkv(qkv.size(), T(5)), got_dqkv(qkv.size(), T(-5));
    cpu::attention_backward<T>(want_dqkv.data(), dout.data(), qkv.data(), want_probs.data(), s.batch, s.seq_len, C,
                               s.n_head);
    backward_as_the_backend(s, qkv, dout, got_probs, got_dqkv);
    double worst_grad = 0;
    for (int part = 0; part < 3; ++part) {
      const double d = relative_difference(third(got_dqkv, rows, C, part), third(want_dqkv, rows, C, part));
      EXPECT_LE(d, kRelativeCap<T>) << "d" << "qkv"[part] << ", " << s.str();
      worst_grad = std::max(worst_grad, d);
    }
    tripod::testing::record_measure("out_" + s.key(), d_out);
    tripod::testing::record_measure("probs_" + s.key(), d_probs);
    tripod::testing::record_measure("dqkv_" + s.key(), worst_grad);
  }
}

TEST(AttentionGemms, ForwardAndBackwardMatchCpuFp32) { expect_attention_matches_cpu<float>(141); }
TEST(AttentionGemms, ForwardAndBackwardMatchCpuFp64) { expect_attention_matches_cpu<double>(142); }

// Under the bf16-operand policy the replay and the CPU backend round the same operands; where an
// fp32 probability or score gradient lies within their sums' rounding of a bf16 rounding boundary
// the two may round it apart, one bf16 step (2^-8 relative) of one operand element, so out and the
// gradients are held to 2^-8 of their largest element (an index, stride or byte-size mistake moves
// them by O(1)); probs, the fp32 softmax of exactly rounded operands, to the fp32 cap. And the
// policy must show: the results differ from the fp32 attention's by more than fp32 rounding.
TEST(AttentionGemms, Bf16OperandProductsMatchTheCpuBackendsRounding) {
  const double bf16_step = 1.0 / 256;
  double moved = 0;
  for (const Shape& s : shapes()) {
    const int64_t rows = s.batch * s.seq_len, C = s.channels();
    const std::vector<float> qkv = tripod::testing::uniform_values<float>(rows * 3 * C, 143, "test.attention.qkv", -2, 2);
    const std::vector<float> dout = tripod::testing::uniform_values<float>(rows * C, 143, "test.attention.dout", -1, 1);
    const auto n_probs = static_cast<std::size_t>(s.batch * s.n_head * s.seq_len * s.seq_len);
    std::vector<float> want_out(rows * C), want_probs(n_probs), got_out(rows * C, -9.0f), got_probs(n_probs, -9.0f);
    std::vector<float> exact_out(rows * C), exact_probs(n_probs);
    cpu::attention_forward<float>(want_out.data(), want_probs.data(), qkv.data(), s.batch, s.seq_len, C, s.n_head, true);
    cpu::attention_forward<float>(exact_out.data(), exact_probs.data(), qkv.data(), s.batch, s.seq_len, C, s.n_head);
    forward_bf16_as_the_backend(s, qkv, got_out, got_probs);
    EXPECT_LE(relative_difference(got_probs, want_probs), kRelativeCap<float>) << "probs, " << s.str();
    EXPECT_LE(relative_difference(got_out, want_out), bf16_step) << "out, " << s.str();
    std::vector<float> want_dqkv(qkv.size(), 5.0f), got_dqkv(qkv.size(), -5.0f), exact_dqkv(qkv.size());
    cpu::attention_backward<float>(want_dqkv.data(), dout.data(), qkv.data(), want_probs.data(), s.batch, s.seq_len,
                                   C, s.n_head, true);
    cpu::attention_backward<float>(exact_dqkv.data(), dout.data(), qkv.data(), exact_probs.data(), s.batch, s.seq_len,
                                   C, s.n_head);
    backward_bf16_as_the_backend(s, qkv, dout, got_probs, got_dqkv);
    for (int part = 0; part < 3; ++part)
      EXPECT_LE(relative_difference(third(got_dqkv, rows, C, part), third(want_dqkv, rows, C, part)), bf16_step)
          << "d" << "qkv"[part] << ", " << s.str();
    moved = std::max({moved, relative_difference(want_out, exact_out), relative_difference(want_dqkv, exact_dqkv)});
  }
  EXPECT_GT(moved, 1e-4) << "bf16 operands changed nothing: the policy is not applied";
}

TEST(AttentionGemms, EachProductIsOneBatchOverEveryHeadPerCausalRowBlock) {
  // GPT-2 124M's shapes at B8 x T1024: 4 row blocks of 256, each call a batch of 96 (b, h) pairs.
  const AttentionDims d = checked_attention_dims("attention_forward", 8, 1024, 768, 12);
  EXPECT_EQ(d.row_blocks, 4);
  float base[1];
  const int64_t part = 8 * 1024 * 768;  // one of q, k, v head-major
  const RowMajorGemm scores = attention_scores_gemm(d, 2, base, base, {4, 4}, 0.125);
  EXPECT_EQ(scores.batch_count, 96);
  EXPECT_EQ(scores.m, 256);  // query rows 512..767
  EXPECT_EQ(scores.n, 768);  // keys 0..767: the causal blocks past them skipped
  EXPECT_EQ(scores.k, 64);
  EXPECT_EQ(scores.alpha, 0.125);
  EXPECT_EQ(scores.beta, 0.0);  // never reads the buffer it overwrites
  EXPECT_EQ(scores.lda, 64);
  EXPECT_EQ(scores.stride_a, 1024 * 64);
  EXPECT_EQ(scores.stride_c, 1024 * 1024);
  EXPECT_EQ(static_cast<const float*>(scores.a) - base, 512 * 64);         // q, row 512
  EXPECT_EQ(static_cast<const float*>(scores.b) - base, part);             // k, row 0
  EXPECT_EQ(static_cast<const float*>(scores.c) - base, 512 * 1024);       // probs row 512
  const RowMajorGemm dkey = attention_dkey_gemm(d, 1, base, base, base, {4, 4});
  EXPECT_EQ(dkey.m, 256);
  EXPECT_EQ(dkey.k, 1024 - 256);  // queries 256.. see keys 256..511
  EXPECT_EQ(static_cast<const float*>(dkey.a) - base, 256 * 1024 + 256);
  EXPECT_EQ(static_cast<const float*>(dkey.c) - base, part + 256 * 64);  // dk rows 256..
  // (R + 1) / 2R of the square: 62.5 % of the score products' multiply-adds at R = 4.
  int64_t columns = 0;
  for (int64_t r = 0; r < d.row_blocks; ++r) columns += attention_scores_gemm(d, r, base, base, {4, 4}, 1).n * 256;
  EXPECT_EQ(columns * 8, 1024 * 1024 * 5);
  for (int64_t r = 0; r < d.row_blocks; ++r)
    for (const RowMajorGemm& g :
         {attention_scores_gemm(d, r, base, base, {4, 4}, 1), attention_values_gemm(d, r, base, base, base, {4, 4}),
          attention_dprobs_gemm(d, r, base, base, base, {4, 4}), attention_dquery_gemm(d, r, base, base, base, {4, 4}),
          attention_dkey_gemm(d, r, base, base, base, {4, 4}), attention_dvalue_gemm(d, r, base, base, base, {4, 4}),
          attention_scores_gemm(d, r, base, base, kBf16Operands, 1),
          attention_dvalue_gemm(d, r, base, base, base, kBf16Operands)})
      EXPECT_NO_THROW(map_row_major_gemm(g, "gemm"));  // which checks that C's matrices do not overlap

  EXPECT_EQ(attention_row_blocks(1), 1);
  EXPECT_EQ(attention_row_blocks(255), 1);
  EXPECT_EQ(attention_row_blocks(512), 2);
  EXPECT_EQ(attention_row_blocks(1 << 16), 4);
  EXPECT_THROW(checked_attention_dims("attention_forward", 1, 4, 10, 3), Error);
  EXPECT_THROW(checked_attention_dims("attention_forward", 1, 4, 12, 0), Error);
  EXPECT_EQ(kernels::attention_scale<float>(64), 0.125f);  // 1/sqrt(hd) rounded as the CPU rounds it
  EXPECT_EQ(kernels::attention_scale<double>(48), 1.0 / std::sqrt(48.0));
}

}  // namespace
}  // namespace tripod::cuda
