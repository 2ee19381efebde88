// GEMM throughput through the Backend (OpenBLAS sgemm/dgemm on the CPU): square sizes, and the
// exact GEMMs of one transformer layer of the chosen model on one tensor-parallel rank.
// Each benchmark reports flops_per_second = 2*M*N*K per iteration as Google Benchmark's own
// iteration-invariant rate counter, so the figure is GB's measurement, not a second stopwatch.
#include <vector>

#include "microbench/bench_setup.h"
#include "microbench/gemm_shapes.h"

namespace tripod::microbench {
namespace {

const char* gemm_prefix(DType dtype) { return dtype == DType::F64 ? "dgemm" : "sgemm"; }

// Small problems print in microseconds, large ones in milliseconds.
benchmark::TimeUnit unit_for(double flops) { return flops < 1e9 ? benchmark::kMicrosecond : benchmark::kMillisecond; }

void run_gemm(benchmark::State& state, Backend& backend, const GemmShape& s, DType dtype) {
  // Operands stored as the model stores them: op(A) is [M,K], op(B) is [K,N], C is [M,N].
  const int64_t a_rows = s.trans_a ? s.k : s.m, a_cols = s.trans_a ? s.m : s.k;
  const int64_t b_rows = s.trans_b ? s.n : s.k, b_cols = s.trans_b ? s.k : s.n;
  Tensor a = backend.alloc({a_rows, a_cols}, dtype), b = backend.alloc({b_rows, b_cols}, dtype);
  Tensor c = backend.alloc({s.m, s.n}, dtype);
  backend.fill(a, 0.5);
  backend.fill(b, 0.25);
  const DType accumulate = gemm_accumulate_dtype(dtype);
  auto once = [&] {
    backend.gemm(s.trans_a, s.trans_b, s.m, s.n, s.k, 1.0, a, a_cols, b, b_cols, s.beta, c, s.n, accumulate);
  };
  once();  // untimed warm-up: BLAS threads started, pages touched, caches primed
  backend.synchronize();
  for (auto _ : state) {
    once();
    backend.synchronize();  // a device's GEMM is asynchronous: each iteration ends when it is done
    benchmark::ClobberMemory();
  }
  state.counters[kFlopsCounter] = benchmark::Counter(s.flops(), benchmark::Counter::kIsIterationInvariantRate);
}

benchmark::internal::Benchmark* register_shape(Backend& backend, const std::string& name, const GemmShape& shape,
                                               DType dtype, BenchKind kind, BenchCatalog& catalog) {
  BenchInfo info;
  info.kind = kind;
  info.dtype = dtype;
  info.shape = shape.dims();
  info.flops_per_iteration = shape.flops();
  info.square_size = kind == BenchKind::SquareGemm ? shape.m : 0;
  return register_timed(catalog, name, info,
                        [&backend, shape, dtype](benchmark::State& state) { run_gemm(state, backend, shape, dtype); })
      ->Unit(unit_for(shape.flops()));
}

}  // namespace

benchmark::internal::Benchmark* register_square_gemm(Backend& backend, int64_t n, DType dtype, BenchCatalog& catalog) {
  const GemmShape square{"square", false, false, n, n, n, 0.0};
  const std::string name = std::string(gemm_prefix(dtype)) + "/square/" + std::to_string(n);
  return register_shape(backend, name, square, dtype, BenchKind::SquareGemm, catalog);
}

void register_gemm_benchmarks(const BenchSetup& setup, Backend& backend, BenchCatalog& catalog) {
  // Squares: powers of two up to 4096 (fp32 and fp64); --quick keeps three fp32 sizes and one fp64.
  const std::vector<int64_t> sgemm_sizes =
      setup.quick ? std::vector<int64_t>{256, 1024, 2048} : std::vector<int64_t>{128, 256, 512, 1024, 2048, 4096};
  const std::vector<int64_t> dgemm_sizes = setup.quick ? std::vector<int64_t>{1024} : sgemm_sizes;
  for (int64_t n : sgemm_sizes) register_square_gemm(backend, n, DType::F32, catalog);
  for (int64_t n : dgemm_sizes) register_square_gemm(backend, n, DType::F64, catalog);

  // The layer's GEMMs in the training dtype, named by what they compute and their M x N x K.
  for (const GemmShape& shape : transformer_layer_gemms(setup.model, setup.tp, setup.tokens())) {
    const std::string name = std::string(gemm_prefix(setup.dtype)) + "/" + shape.name + "/" + shape.dims();
    register_shape(backend, name, shape, setup.dtype, BenchKind::LayerGemm, catalog);
  }
}

}  // namespace tripod::microbench
