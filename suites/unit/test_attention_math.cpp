// The index and ownership functions of the CUDA attention's kernels (backend/kernels/
// attention_math.h), on the host: which columns a causal row block's products read, which
// columns each thread of a grouped softmax row owns, and where the head-major copies put each
// element. test_attention_gemms.cpp replays the kernels with them against the CPU backend.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "backend/kernels/attention_math.h"

namespace tripod::kernels {
namespace {

// The end of a query row's causal block bounds what the products read of its row: the values and
// dquery products of its block read keys below it, the dkey and dvalue products of an earlier or
// the same key block read columns below that block's end, never further.
TEST(AttentionMath, CausalBlockEndIsTheEndOfTheQueryRowsBlock) {
  EXPECT_EQ(causal_block_end(0, 1024, 4), 256);
  EXPECT_EQ(causal_block_end(255, 1024, 4), 256);
  EXPECT_EQ(causal_block_end(256, 1024, 4), 512);
  EXPECT_EQ(causal_block_end(1023, 1024, 4), 1024);
  EXPECT_EQ(causal_block_end(0, 7, 1), 7);
  for (int64_t seq_len : {1, 2, 3, 7, 33, 130, 1024})
    for (int64_t blocks = 1; blocks <= 4; ++blocks) {
      int64_t never_read = 0;
      for (int64_t r = 0; r < blocks; ++r)
        for (int64_t t = causal_block_begin(r, seq_len, blocks);
             t < causal_block_begin(r + 1, seq_len, blocks); ++t) {
          const int64_t end = causal_block_end(t, seq_len, blocks);
          EXPECT_EQ(end, causal_block_begin(r + 1, seq_len, blocks)) << "T " << seq_len << " row " << t;
          EXPECT_GT(end, t);  // the diagonal is always inside
          never_read += seq_len - end;
        }
      if (seq_len == 1024 && blocks == 4) EXPECT_EQ(never_read * 8, 1024 * 1024 * 3);  // 3/8 of the square
    }
}

// Which fp32 rows the grouped kernels take, and that a thread's slots cover each column of a row
// exactly once (the loads, partials and stores of attention.cu's grouped kernels).
TEST(AttentionMath, GroupedSoftmaxRowsOwnEveryColumnOnce) {
  const int threads = kAttentionSoftmaxThreads;
  EXPECT_EQ(softmax_groups_per_thread(1024, threads), 2);  // GPT-2's T: 8 values a thread
  EXPECT_EQ(softmax_groups_per_thread(512, threads), 1);
  EXPECT_EQ(softmax_groups_per_thread(516, threads), 2);
  EXPECT_EQ(softmax_groups_per_thread(4096, threads), 8);
  EXPECT_EQ(softmax_groups_per_thread(4100, threads), 0);  // too long: the strided kernels
  EXPECT_EQ(softmax_groups_per_thread(1022, threads), 0);  // not whole groups
  EXPECT_EQ(softmax_groups_per_thread(0, threads), 0);
  for (int64_t seq_len : {4, 64, 516, 1024, 4096}) {
    const int groups = softmax_groups_per_thread(seq_len, threads);
    std::vector<int> hits(static_cast<std::size_t>(seq_len), 0);
    for (int tid = 0; tid < threads; ++tid)
      for (int s = 0; s < kSoftmaxGroupWidth * groups; ++s) {
        const int64_t j = owned_column(tid, threads, s);
        if (j < seq_len) ++hits[static_cast<std::size_t>(j)];
        if (s > 0) EXPECT_GT(j, owned_column(tid, threads, s - 1));  // ascending: the sums' order
      }
    EXPECT_EQ(std::count(hits.begin(), hits.end(), 1), seq_len) << "T " << seq_len;
  }
}

TEST(AttentionMath, HeadMajorIndexIsABijectionOntoTheTokenMajorTensor) {
  const int64_t batch = 2, seq_len = 3, n_head = 4, head_dim = 5, parts = 3, n = parts * batch * seq_len * n_head * head_dim;
  std::vector<int> hits(static_cast<std::size_t>(n), 0);
  for (int64_t i = 0; i < n; ++i) ++hits[token_major_index(i, batch, seq_len, n_head, head_dim, parts)];
  EXPECT_EQ(std::count(hits.begin(), hits.end(), 1), n);
  // Element d of head h, token t, batch row b, part p: head-major ((p*B + b)*H + h)*T + t)*hd + d.
  const int64_t i = (((2 * batch + 1) * n_head + 3) * seq_len + 2) * head_dim + 4;
  EXPECT_EQ(token_major_index(i, batch, seq_len, n_head, head_dim, parts),
            ((1 * seq_len + 2) * parts + 2) * (n_head * head_dim) + 3 * head_dim + 4);
  // head_major_index inverts it: the copies by token rows put every element where the head-row
  // copies put it (and back)
  for (int64_t h_i = 0; h_i < n; ++h_i) {
    const int64_t t_i = token_major_index(h_i, batch, seq_len, n_head, head_dim, parts);
    const int64_t row_length = parts * n_head * head_dim;
    EXPECT_EQ(head_major_index(t_i / row_length, t_i % row_length, batch, seq_len, n_head, head_dim), h_i);
  }
  // HeadMajorOffsets splits it into a column's term and a row's (reductions.cu's column sums)
  const HeadMajorOffsets offsets{batch, seq_len, n_head, head_dim};
  const int64_t rows = batch * seq_len, row_length = parts * n_head * head_dim;
  for (int64_t row = 0; row < rows; ++row)
    for (int64_t col = 0; col < row_length; ++col)
      ASSERT_EQ(offsets.column_offset(col) + offsets.row_offset(row),
                head_major_index(row, col, batch, seq_len, n_head, head_dim))
          << "row " << row << ", column " << col;
  // attention.cu's row form: a row's start is head_dim times the index of one-element rows
  for (int64_t row = 0; row < n / head_dim; ++row)
    for (int64_t e = 0; e < head_dim; ++e)
      EXPECT_EQ(token_major_index(row * head_dim + e, batch, seq_len, n_head, head_dim, parts),
                head_dim * token_major_index(row, batch, seq_len, n_head, 1, parts) + e);
}

}  // namespace
}  // namespace tripod::kernels
