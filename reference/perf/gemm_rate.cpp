#include "perf/gemm_rate.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "backend/transfer.h"

namespace tripod {

GemmRate measure_square_gemm(Backend& backend, int64_t n, DType dtype, int repetitions) {
  Tensor a = backend.alloc({n, n}, dtype), b = backend.alloc({n, n}, dtype), c = backend.alloc({n, n}, dtype);
  // Random operands, not constants: a GPU's tensor cores draw less power on repeated values and
  // hold higher clocks, so constant operands overstate the rate (by over 10 % on an H200).
  fill_random(backend, a, 1);
  fill_random(backend, b, 2);
  const DType accumulate = gemm_accumulate_dtype(dtype);
  backend.gemm(false, false, n, n, n, 1.0, a, n, b, n, 0.0, c, n, accumulate);  // warm-up: threads, caches, pages
  std::vector<double> rates;
  for (int r = 0; r < repetitions; ++r) {
    backend.synchronize();  // a device runs the GEMM asynchronously: time it from idle to done
    const auto start = std::chrono::steady_clock::now();
    backend.gemm(false, false, n, n, n, 1.0, a, n, b, n, 0.0, c, n, accumulate);
    backend.synchronize();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    rates.push_back(2.0 * static_cast<double>(n) * n * n / seconds);
  }
  std::sort(rates.begin(), rates.end());
  return {n, rates[rates.size() / 2], rates.back()};
}

}  // namespace tripod
