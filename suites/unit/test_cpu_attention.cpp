// cpu::attention_forward / attention_backward against the textbook formulas, written here as plain
// loops in fp64: sequence lengths that give the CPU's causal row blocks one, two, an uneven and
// eight blocks (attention_kernels.cpp: about 128 rows each), so a block bound or extent that drops
// or double-counts a key shows as an O(1) difference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/cpu/kernels.h"
#include "kernel_math_test_util.h"

namespace tripod {
namespace {

struct Naive {
  std::vector<double> out, probs, dqkv;
};

// softmax_j<=t(q_t . k_j / sqrt(hd)) v_j and its gradient, head by head.
Naive naive_attention(const std::vector<double>& qkv, const std::vector<double>& dout, int64_t batch, int64_t seq_len,
                      int64_t channels, int64_t n_head) {
  const int64_t hd = channels / n_head, ld = 3 * channels;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  Naive r{std::vector<double>(batch * seq_len * channels), std::vector<double>(batch * n_head * seq_len * seq_len),
          std::vector<double>(qkv.size())};
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < n_head; ++h) {
      auto q = [&](int64_t t, int64_t d) { return qkv[(b * seq_len + t) * ld + h * hd + d]; };
      auto k = [&](int64_t t, int64_t d) { return qkv[(b * seq_len + t) * ld + channels + h * hd + d]; };
      auto v = [&](int64_t t, int64_t d) { return qkv[(b * seq_len + t) * ld + 2 * channels + h * hd + d]; };
      auto go = [&](int64_t t, int64_t d) { return dout[(b * seq_len + t) * channels + h * hd + d]; };
      double* p = r.probs.data() + (b * n_head + h) * seq_len * seq_len;
      for (int64_t t = 0; t < seq_len; ++t) {
        double row_max = -INFINITY, sum = 0;
        std::vector<double> s(static_cast<std::size_t>(t + 1));
        for (int64_t j = 0; j <= t; ++j) {
          for (int64_t d = 0; d < hd; ++d) s[j] += q(t, d) * k(j, d);
          s[j] *= scale;
          row_max = std::max(row_max, s[j]);
        }
        for (int64_t j = 0; j <= t; ++j) sum += std::exp(s[j] - row_max);
        for (int64_t j = 0; j <= t; ++j) p[t * seq_len + j] = std::exp(s[j] - row_max) / sum;
        for (int64_t d = 0; d < hd; ++d) {
          double o = 0;
          for (int64_t j = 0; j <= t; ++j) o += p[t * seq_len + j] * v(j, d);
          r.out[(b * seq_len + t) * channels + h * hd + d] = o;
        }
      }
      for (int64_t t = 0; t < seq_len; ++t) {
        std::vector<double> dp(static_cast<std::size_t>(t + 1));
        double dot = 0;
        for (int64_t j = 0; j <= t; ++j) {
          for (int64_t d = 0; d < hd; ++d) dp[j] += go(t, d) * v(j, d);
          dot += p[t * seq_len + j] * dp[j];
        }
        for (int64_t j = 0; j <= t; ++j) {
          const double ds = p[t * seq_len + j] * (dp[j] - dot) * scale;
          for (int64_t d = 0; d < hd; ++d) {
            r.dqkv[(b * seq_len + t) * ld + h * hd + d] += ds * k(j, d);
            r.dqkv[(b * seq_len + j) * ld + channels + h * hd + d] += ds * q(t, d);
            r.dqkv[(b * seq_len + j) * ld + 2 * channels + h * hd + d] += p[t * seq_len + j] * go(t, d);
          }
        }
      }
    }
  return r;
}

TEST(CpuAttention, CausalRowBlocksGiveTheTextbookResult) {
  // T = 100: one block; 256: two of 128; 400: three of 133, 133, 134; 1030: eight of 128 or 129.
  for (int64_t seq_len : {100, 256, 400, 1030}) {
    const int64_t batch = 1, n_head = 2, channels = 8;
    const std::vector<double> qkv =
        testing::uniform_values<double>(batch * seq_len * 3 * channels, 7, "test.cpu_attention.qkv", -2, 2);
    const std::vector<double> dout =
        testing::uniform_values<double>(batch * seq_len * channels, 8, "test.cpu_attention.dout", -1, 1);
    const Naive want = naive_attention(qkv, dout, batch, seq_len, channels, n_head);
    std::vector<double> out(want.out.size(), -9), probs(want.probs.size(), -9), dqkv(qkv.size(), -9);
    cpu::attention_forward<double>(out.data(), probs.data(), qkv.data(), batch, seq_len, channels, n_head);
    cpu::attention_backward<double>(dqkv.data(), dout.data(), qkv.data(), probs.data(), batch, seq_len, channels,
                                    n_head);
    const std::string at = "T = " + std::to_string(seq_len);
    EXPECT_LE(testing::relative_difference(out, want.out), 1e-12) << at;
    EXPECT_LE(testing::relative_difference(probs, want.probs), 1e-12) << at;  // masked entries exactly 0 in both
    EXPECT_LE(testing::relative_difference(dqkv, want.dqkv), 1e-12) << at;
  }
}

}  // namespace
}  // namespace tripod
