// tripod bench train: times full training steps (forward, backward, clip, AdamW) of a model
// preset on random tokens and reports achieved model FLOP/s as a ratio to a large square sgemm
// measured in the same run on the same threads, plus peak memory against the hand count. Model
// FLOPs count the real vocabulary: with a padded one the padding's columns are work, not model FLOPs.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tripod::bench {

struct BenchTrainOptions {
  std::string config = "gpt2-124m";
  std::vector<std::string> overrides;
  int64_t batch = 4, seq_len = 64, steps = 5, gemm_size = 2048;
  // Above 1: the vocabulary padded to a multiple of it (parallel_layout.h), trained by the
  // distributed trainer on a group of one process.
  int vocab_multiple = 1;
  std::string json_out, backend = "cpu";
};

void run_bench_train(const BenchTrainOptions& options);

}  // namespace tripod::bench
