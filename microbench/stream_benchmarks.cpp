// STREAM-style memory bandwidth (McCalpin): copy c = a and triad a = b + s*c over arrays of
// doubles far larger than the caches, OpenMP-parallel with a static schedule. Bytes counted as
// STREAM counts them: copy 16 B per element (read a, write c), triad 24 B (read b and c, write
// a); write-allocate traffic is not counted, by STREAM's convention and by ours for the kernels.
// The kernels' GB/s are reported as a percentage of the triad figure measured in the same run.
#include <cstdlib>
#include <memory>

#include "core/error.h"
#include "microbench/bench_setup.h"

namespace tripod::microbench {
namespace {

struct FreeDeleter {
  void operator()(double* p) const { std::free(p); }
};
using Array = std::unique_ptr<double[], FreeDeleter>;

// Page-aligned, and first touched by the same static schedule that later reads it, so each
// thread's pages sit on its own memory node on a multi-socket machine.
Array make_array(int64_t n, double value) {
  const std::size_t bytes = (static_cast<std::size_t>(n) * sizeof(double) + 4095) / 4096 * 4096;
  Array a(static_cast<double*>(std::aligned_alloc(4096, bytes)));
  check(a != nullptr, "STREAM: out of memory allocating ", bytes, " bytes");
  double* p = a.get();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) p[i] = value;
  return a;
}

void run_copy(benchmark::State& state, int64_t n) {
  Array a = make_array(n, 1.0), c = make_array(n, 0.0);
  double* __restrict pa = a.get();
  double* __restrict pc = c.get();
  for (auto _ : state) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) pc[i] = pa[i];
    benchmark::ClobberMemory();
  }
  state.counters[kBytesCounter] =
      benchmark::Counter(16.0 * static_cast<double>(n), benchmark::Counter::kIsIterationInvariantRate);
}

void run_triad(benchmark::State& state, int64_t n) {
  Array a = make_array(n, 1.0), b = make_array(n, 2.0), c = make_array(n, 0.5);
  double* __restrict pa = a.get();
  const double* __restrict pb = b.get();
  const double* __restrict pc = c.get();
  const double scalar = 3.0;
  for (auto _ : state) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) pa[i] = pb[i] + scalar * pc[i];
    benchmark::ClobberMemory();
  }
  state.counters[kBytesCounter] =
      benchmark::Counter(24.0 * static_cast<double>(n), benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

void register_stream_benchmarks(const BenchSetup& setup, BenchCatalog& catalog) {
  const int64_t n = setup.stream_array_bytes / static_cast<int64_t>(sizeof(double));
  const std::string size = std::to_string(setup.stream_array_bytes >> 20) + "MiB";
  BenchInfo copy;
  copy.kind = BenchKind::Stream;
  copy.dtype = DType::F64;
  copy.shape = "2 x " + size;
  copy.bytes_per_iteration = 16.0 * static_cast<double>(n);
  register_timed(catalog, "stream/copy/" + size, copy, [n](benchmark::State& s) {
    run_copy(s, n);
  })->Unit(benchmark::kMillisecond);
  BenchInfo triad = copy;
  triad.shape = "3 x " + size;
  triad.bytes_per_iteration = 24.0 * static_cast<double>(n);
  register_timed(catalog, "stream/triad/" + size, triad, [n](benchmark::State& s) {
    run_triad(s, n);
  })->Unit(benchmark::kMillisecond);
}

}  // namespace tripod::microbench
