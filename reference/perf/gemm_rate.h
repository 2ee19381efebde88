// Measured GEMM throughput on this device and these threads: the baseline the training-step
// benchmark is compared with in the same run.
#pragma once
#include <cstdint>

#include "backend/backend.h"

namespace tripod {

struct GemmRate {
  int64_t size = 0;
  double median_flops = 0;  // FLOP/s, median over repetitions (2 n^3 per GEMM)
  double best_flops = 0;
};

// Times `repetitions` n x n x n GEMMs (after one warm-up) in `dtype` through the backend.
GemmRate measure_square_gemm(Backend& backend, int64_t n, DType dtype, int repetitions);

}  // namespace tripod
