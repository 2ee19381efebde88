// The embedding kernels' arithmetic (backend/kernels/embedding_math.h), replayed on the host as
// backend/cuda/kernels/embedding.cu runs it, against the CPU backend, bit for bit (memcmp):
//   forward        a warp per token row: out[n, c] = wte[row, c] + wpe[n % T, c] (whole vocabulary),
//                  or this window's row of wte, 0 for another window's token (lookup_window);
//   token grad     the token indices stably sorted by token_sort_key (their window row); the
//                  first position of each row's run adds dout[n, c] of the run's tokens, in token
//                  order, into dwte[row, c] (token_run_column);
//   position grad  thread (t, c) of T * C adds dout[n, c] for n = t, t + T, ... into dwpe[t, c].
// Every dwte or dwpe element has one writer and sees its tokens in token order, as on the CPU, so
// the results are the same bits (no tolerance). The replays run the threads in reverse order: no
// thread may depend on another's writes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/kernels/embedding_math.h"
#include "kernel_math_test_util.h"

namespace tripod::kernels {
namespace {

using testing::bits_equal;
using testing::uniform_ids;
using testing::uniform_values;

// The token gradient of embedding.cu (TokenSortKeyOp, a stable sort by key as CUB's radix sort
// is, then TokenRunRow at each run's first position, the runs last to first) and PositionGradOp
// (every thread, last to first).
template <typename T>
void backward_in_device_order(std::vector<T>& dwte, std::vector<T>& dwpe, const std::vector<T>& dout,
                              const std::vector<int32_t>& tokens, int64_t seq_len, int64_t channels, int64_t start,
                              int64_t valid) {
  const auto n_tokens = static_cast<int64_t>(tokens.size());
  if (valid > 0) {
    std::vector<int32_t> order(tokens.size());
    std::iota(order.begin(), order.end(), 0);
    auto key = [&](int32_t n) { return token_sort_key(tokens[static_cast<std::size_t>(n)], start, valid); };
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return key(a) < key(b); });
    for (int64_t i = n_tokens - 1; i >= 0; --i) {
      const int64_t row = key(order[i]);
      if (row >= valid || (i > 0 && key(order[i - 1]) == row)) continue;
      int64_t run_length = 1;
      while (i + run_length < n_tokens && key(order[i + run_length]) == row) ++run_length;
      for (int64_t c = channels - 1; c >= 0; --c)
        token_run_column(dwte.data() + row * channels, dout.data(), order.data() + i, run_length, channels, c);
    }
  }
  for (int64_t i = seq_len * channels - 1; i >= 0; --i)
    position_grad_element(dwpe.data(), dout.data(), n_tokens, seq_len, channels, i / channels, i % channels);
}

struct Shape {
  int64_t vocab, seq_len, n_tokens;  // n_tokens need not be a multiple of seq_len
};

// Small vocabularies repeat ids many times (the order of repeated rows is what could go wrong);
// the larger one spreads them over many rows (short runs).
const Shape kShapes[] = {{50, 16, 83}, {1031, 8, 600}, {3, 5, 40}};
const int64_t kChannels[] = {1, 7, 33, 769};

std::string describe(const Shape& s, int64_t channels) {
  return "V=" + std::to_string(s.vocab) + " T=" + std::to_string(s.seq_len) + " N=" + std::to_string(s.n_tokens) +
         " C=" + std::to_string(channels);
}

template <typename T>
void expect_backward_bit_identical(uint64_t seed) {
  for (const Shape& s : kShapes)
    for (int64_t channels : kChannels) {
      const std::vector<int32_t> tokens = uniform_ids(s.n_tokens, seed, "test.embedding.tokens", 0, s.vocab);
      const std::vector<T> dout = uniform_values<T>(s.n_tokens * channels, seed, "test.embedding.dout", -1, 1);
      // Gradients accumulate: start from non-zero tables.
      const std::vector<T> dwte0 = uniform_values<T>(s.vocab * channels, seed, "test.embedding.dwte", -1, 1);
      const std::vector<T> dwpe0 = uniform_values<T>(s.seq_len * channels, seed, "test.embedding.dwpe", -1, 1);

      // Whole vocabulary: cpu::embedding_backward; the launcher is the window [0, V).
      std::vector<T> want_wte = dwte0, want_wpe = dwpe0, got_wte = dwte0, got_wpe = dwpe0;
      cpu::embedding_backward<T>(want_wte.data(), want_wpe.data(), dout.data(), tokens.data(), s.n_tokens, s.seq_len,
                                 channels);
      backward_in_device_order(got_wte, got_wpe, dout, tokens, s.seq_len, channels, 0, s.vocab);
      EXPECT_TRUE(bits_equal(got_wte, want_wte)) << "dwte, " << describe(s, channels);
      EXPECT_TRUE(bits_equal(got_wpe, want_wpe)) << "dwpe, " << describe(s, channels);
      EXPECT_FALSE(bits_equal(got_wte, dwte0));  // something was added

      // Windows of the vocabulary: the first id, an inner range, the last ids, a single id. Tokens
      // of other windows add to dwpe only; dwte holds this window's [valid, C] rows.
      const int64_t windows[][2] = {{0, 1}, {s.vocab / 3, (s.vocab + 1) / 2}, {s.vocab - 2, 2}, {s.vocab / 2, 1}};
      for (const auto& w : windows) {
        const int64_t start = w[0], valid = w[1];
        const std::vector<T> window0(dwte0.begin() + start * channels, dwte0.begin() + (start + valid) * channels);
        std::vector<T> want_w = window0, want_p = dwpe0, got_w = window0, got_p = dwpe0;
        cpu::embedding_backward_window<T>(want_w.data(), want_p.data(), dout.data(), tokens.data(), s.n_tokens,
                                          channels, start, valid, s.vocab, s.seq_len);
        backward_in_device_order(got_w, got_p, dout, tokens, s.seq_len, channels, start, valid);
        const std::string where = describe(s, channels) + " window [" + std::to_string(start) + ", +" +
                                  std::to_string(valid) + ")";
        EXPECT_TRUE(bits_equal(got_w, want_w)) << "dwte, " << where;
        EXPECT_TRUE(bits_equal(got_p, want_p)) << "dwpe, " << where;
      }
    }
}

TEST(KernelEmbeddingMath, BackwardIsBitIdenticalToCpuFp32) { expect_backward_bit_identical<float>(81); }
TEST(KernelEmbeddingMath, BackwardIsBitIdenticalToCpuFp64) { expect_backward_bit_identical<double>(82); }

template <typename T>
void expect_forward_bit_identical(uint64_t seed) {
  for (const Shape& s : kShapes)
    for (int64_t channels : kChannels) {
      const std::vector<int32_t> tokens = uniform_ids(s.n_tokens, seed, "test.embedding.tokens", 0, s.vocab);
      const std::vector<T> wte = uniform_values<T>(s.vocab * channels, seed, "test.embedding.wte", -1, 1);
      const std::vector<T> wpe = uniform_values<T>(s.seq_len * channels, seed, "test.embedding.wpe", -1, 1);
      const auto size = static_cast<std::size_t>(s.n_tokens * channels);

      // EmbeddingForwardRow: the whole vocabulary is the window [0, V).
      std::vector<T> want(size), got(size, T(-7));
      cpu::embedding_forward<T>(want.data(), tokens.data(), wte.data(), wpe.data(), s.n_tokens, s.seq_len, channels,
                                s.vocab);
      for (int64_t n = 0; n < s.n_tokens; ++n) {
        const int64_t row = embedding_row(tokens[n], 0, s.vocab);
        ASSERT_GE(row, 0);
        for (int64_t c = 0; c < channels; ++c)
          got[n * channels + c] = wte[row * channels + c] + wpe[(n % s.seq_len) * channels + c];
      }
      EXPECT_TRUE(bits_equal(got, want)) << "forward, " << describe(s, channels);

      // LookupWindowRow: this window's row, or zeros.
      const int64_t start = s.vocab / 3, valid = (s.vocab + 1) / 2;
      const std::vector<T> window(wte.begin() + start * channels, wte.begin() + (start + valid) * channels);
      std::vector<T> want_w(size), got_w(size, T(-7));
      cpu::embedding_lookup_window<T>(want_w.data(), tokens.data(), window.data(), s.n_tokens, channels, start, valid,
                                      s.vocab);
      for (int64_t n = 0; n < s.n_tokens; ++n) {
        const int64_t row = embedding_row(tokens[n], start, valid);
        for (int64_t c = 0; c < channels; ++c) got_w[n * channels + c] = row < 0 ? T(0) : window[row * channels + c];
      }
      EXPECT_TRUE(bits_equal(got_w, want_w)) << "lookup_window, " << describe(s, channels);
    }
}

TEST(KernelEmbeddingMath, ForwardAndWindowLookupAreBitIdenticalToCpuFp32) { expect_forward_bit_identical<float>(91); }
TEST(KernelEmbeddingMath, ForwardAndWindowLookupAreBitIdenticalToCpuFp64) { expect_forward_bit_identical<double>(92); }

TEST(KernelEmbeddingMath, EmbeddingRowIsTheWindowRowOrMinusOne) {
  EXPECT_EQ(embedding_row(5, 0, 10), 5);
  EXPECT_EQ(embedding_row(5, 5, 1), 0);
  EXPECT_EQ(embedding_row(4, 5, 1), -1);
  EXPECT_EQ(embedding_row(6, 5, 1), -1);
  EXPECT_EQ(embedding_row(-1, 0, 10), -1);  // a bad id reads nothing
  EXPECT_EQ(embedding_row(10, 0, 10), -1);
  EXPECT_EQ(embedding_row(2147483647, 2147483600, 100), 47);  // 64-bit arithmetic near INT32_MAX
}

TEST(KernelEmbeddingMath, TokenSortKeyIsTheWindowRowOrPastEveryRow) {
  EXPECT_EQ(token_sort_key(5, 0, 10), 5);
  EXPECT_EQ(token_sort_key(5, 5, 1), 0);
  EXPECT_EQ(token_sort_key(4, 5, 1), 1);  // another window's id: after every row, adding nothing
  EXPECT_EQ(token_sort_key(-1, 0, 10), 10);
  EXPECT_EQ(token_sort_key(10, 0, 10), 10);
}

}  // namespace
}  // namespace tripod::kernels
