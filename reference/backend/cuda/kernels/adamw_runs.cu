// AdamW over many runs in one launch (adamw_runs.h). A block takes kAdamWBlockElements elements
// of one run (kernels::adamw_run_of_block finds which), 256 threads, two fp32 elements a thread
// with 8-byte accesses where the run starts 8-byte aligned in all four buffers, else one; each
// element through kernels::adamw_element with the run's decay, the other coefficients shared: the
// bits of cuda::adamw on each run. The run table is a kernel parameter (2.2 KiB at 64 runs).
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/kernels/adamw_runs.h"
#include "backend/cuda/kernels/launch_patterns.cuh"
#include "backend/kernels/adamw_runs_math.h"
#include "backend/kernels/elementwise_math.h"
#include "core/error.h"

namespace tripod::cuda {
namespace {

constexpr int kAdamWThreads = 256;
constexpr int kRuns = kernels::kAdamWRunsPerLaunch;

template <typename T>
struct RunTable {
  int count;
  int64_t first_block[kRuns + 1];
  int64_t offset[kRuns], length[kRuns];
  T decay[kRuns];
  bool pairs[kRuns];  // two elements a thread, 8-byte accesses
};

template <typename T>
__device__ __forceinline__ void update(T* param, const T* grad, T* m, T* v, int64_t i,
                                       const kernels::AdamWCoefficients<T>& k) {
  T p = param[i], mi = m[i], vi = v[i];
  kernels::adamw_element(p, grad[i], mi, vi, k);
  param[i] = p;
  m[i] = mi;
  v[i] = vi;
}

template <typename T>
__global__ void __launch_bounds__(kAdamWThreads)
    adamw_runs_kernel(T* __restrict__ param, const T* __restrict__ grad, T* __restrict__ m, T* __restrict__ v,
                      const RunTable<T> table, kernels::AdamWCoefficients<T> k) {
  const int64_t blocks = table.first_block[table.count];
  for (int64_t block = blockIdx.x; block < blocks; block += gridDim.x) {
    const int r = kernels::adamw_run_of_block(table.first_block, table.count, block);
    const int64_t begin = (block - table.first_block[r]) * kernels::kAdamWBlockElements;
    const int64_t end = begin + kernels::kAdamWBlockElements < table.length[r] ? begin + kernels::kAdamWBlockElements
                                                                                 : table.length[r];
    k.decay = table.decay[r];
    T* p = param + table.offset[r];
    const T* g = grad + table.offset[r];
    T* mr = m + table.offset[r];
    T* vr = v + table.offset[r];
    if constexpr (std::is_same_v<T, float>) {
      // Two elements a thread where the run allows (begin is even, so [i, i + 2) is 8-byte
      // aligned), one at an odd run's end and in unaligned runs. adamw_element appears twice, not
      // three times: a third inlined copy of its correctly rounded division and square root spilled.
      const int width = table.pairs[r] ? 2 : 1;
      for (int64_t i = begin + width * threadIdx.x; i < end; i += width * kAdamWThreads) {
        const bool two = width == 2 && i + 2 <= end;
        float2 p2, g2, m2, v2;
        if (two) {
          p2 = *reinterpret_cast<const float2*>(p + i), g2 = *reinterpret_cast<const float2*>(g + i);
          m2 = *reinterpret_cast<const float2*>(mr + i), v2 = *reinterpret_cast<const float2*>(vr + i);
        } else {
          p2 = make_float2(p[i], 0.0f), g2 = make_float2(g[i], 0.0f), m2 = make_float2(mr[i], 0.0f);
          v2 = make_float2(vr[i], 0.0f);
        }
        kernels::adamw_element(p2.x, g2.x, m2.x, v2.x, k);
        if (two) {
          kernels::adamw_element(p2.y, g2.y, m2.y, v2.y, k);
          *reinterpret_cast<float2*>(p + i) = p2;
          *reinterpret_cast<float2*>(mr + i) = m2;
          *reinterpret_cast<float2*>(vr + i) = v2;
        } else {
          p[i] = p2.x, mr[i] = m2.x, vr[i] = v2.x;
        }
      }
    } else {
      for (int64_t i = begin + threadIdx.x; i < end; i += kAdamWThreads) update(p, g, mr, vr, i, k);
    }
  }
}

}  // namespace

template <typename T>
void adamw_runs(T* param, const T* grad, T* m, T* v, int count, const int64_t* offsets, const int64_t* lengths,
                const double* weight_decays, double lr, double beta1, double beta2, double eps, int64_t step,
                double grad_scale, const CudaContext& ctx) {
  check(step >= 1, "adamw_runs: step ", step, " (counts from 1, for the bias correction)");
  const auto k = kernels::adamw_coefficients<T>(lr, beta1, beta2, eps, 0.0, step, grad_scale);
  for (int first = 0; first < count; first += kRuns) {
    RunTable<T> table{};
    table.count = std::min(kRuns, count - first);
    for (int r = 0; r < table.count; ++r) {
      table.offset[r] = offsets[first + r];
      table.length[r] = lengths[first + r];
      // as adamw_coefficients rounds it for a call of its own
      table.decay[r] = kernels::adamw_coefficients<T>(lr, beta1, beta2, eps, weight_decays[first + r], step,
                                                      grad_scale)
                           .decay;
      table.pairs[r] = std::is_same_v<T, float> &&
                       all_aligned_to(8, {param + table.offset[r], grad + table.offset[r], m + table.offset[r],
                                          v + table.offset[r]});
    }
    kernels::adamw_first_blocks(table.length, table.count, table.first_block);
    const int64_t blocks = table.first_block[table.count];
    if (blocks == 0) continue;
    const LaunchShape shape = rows_launch(blocks, kAdamWThreads, 1, 0, ctx.limits);
    check_fits(shape, ctx.limits, "adamw_runs");
    adamw_runs_kernel<T><<<grid_of(shape), shape.block, 0, ctx.stream>>>(param, grad, m, v, table, k);
    check_launch("adamw_runs");
  }
}

template void adamw_runs<float>(float*, const float*, float*, float*, int, const int64_t*, const int64_t*,
                                const double*, double, double, double, double, int64_t, double, const CudaContext&);
template void adamw_runs<double>(double*, const double*, double*, double*, int, const int64_t*, const int64_t*,
                                 const double*, double, double, double, double, int64_t, double, const CudaContext&);

}  // namespace tripod::cuda
