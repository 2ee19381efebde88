// What the benchmark registrations share: the resolved model shapes, and a catalog that records,
// for every registered benchmark, what one iteration does (FLOPs, bytes, dtype) so that the
// reporter can turn Google Benchmark's rates into percentages of the peak and of STREAM triad.
#pragma once
#include <benchmark/benchmark.h>

#include <cstdint>
#include <map>
#include <string>

#include "backend/backend.h"
#include "microbench/microbench.h"
#include "model/config.h"

namespace tripod::microbench {

struct BenchSetup {
  std::string model_name;
  ModelConfig model;
  int64_t tp = 1, batch = 1, seq_len = 1;
  DType dtype = DType::F32;
  bool quick = false;
  int64_t stream_array_bytes = 0;  // each of the STREAM arrays
  int64_t tokens() const { return batch * seq_len; }
};

// Resolves the preset, the micro-batch, the context and the STREAM size; checks that the model
// divides over `tp` (heads and MLP width), naming the key that does not.
BenchSetup resolve_setup(const MicrobenchOptions& options);

enum class BenchKind { SquareGemm, LayerGemm, Stream, Kernel };

struct BenchInfo {
  BenchKind kind = BenchKind::Kernel;
  DType dtype = DType::F32;
  std::string shape;               // e.g. "1024x2304x768" (M x N x K) or "[1024, 768]"
  double flops_per_iteration = 0;  // 0 where the kernel is not counted in FLOPs
  double bytes_per_iteration = 0;  // 0 for GEMMs (compute-bound)
  int64_t square_size = 0;         // SquareGemm only
};

// Google Benchmark function name -> what one iteration does, filled as benchmarks register.
using BenchCatalog = std::map<std::string, BenchInfo>;

// Counter names (Google Benchmark computes them as rates over the measured real time).
inline constexpr const char* kFlopsCounter = "flops_per_second";
inline constexpr const char* kBytesCounter = "bytes_per_second";
// Derived by the reporter (see derived_counters_reporter.h).
inline constexpr const char* kPeakPercentCounter = "pct_of_peak";
inline constexpr const char* kTriadPercentCounter = "pct_of_triad";

// Registers `fn` under `name`, timed on the wall clock (BLAS and OpenMP threads do the work, so
// the calling thread's CPU time would undercount), and records `info` in the catalog.
template <typename Fn>
benchmark::internal::Benchmark* register_timed(BenchCatalog& catalog, const std::string& name, BenchInfo info,
                                               Fn&& fn) {
  catalog[name] = std::move(info);
  return benchmark::RegisterBenchmark(name.c_str(), std::forward<Fn>(fn))->UseRealTime();
}

// The registrations, one file each. They capture `backend` by reference: it must outlive the run.
benchmark::internal::Benchmark* register_square_gemm(Backend& backend, int64_t n, DType dtype, BenchCatalog& catalog);
void register_gemm_benchmarks(const BenchSetup& setup, Backend& backend, BenchCatalog& catalog);
void register_stream_benchmarks(const BenchSetup& setup, BenchCatalog& catalog);
void register_kernel_benchmarks(const BenchSetup& setup, Backend& backend, BenchCatalog& catalog);

}  // namespace tripod::microbench
