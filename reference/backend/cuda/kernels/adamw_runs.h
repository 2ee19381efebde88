// AdamW over many runs of the flat buffers in one launch a kAdamWRunsPerLaunch runs
// (adamw_runs.cu; backend/kernels/adamw_runs_math.h has the partition): Backend::adamw_runs on
// CUDA, each element updated by kernels::adamw_element as cuda::adamw updates it.
#pragma once
#include <cstdint>

#include "backend/cuda/cuda_context.h"

namespace tripod::cuda {

// Run r is elements [offsets[r], offsets[r] + lengths[r]) of param, grad, m and v, with its weight
// decay; the caller has checked that the runs lie inside the buffers and do not overlap.
template <typename T>
void adamw_runs(T* param, const T* grad, T* m, T* v, int count, const int64_t* offsets, const int64_t* lengths,
                const double* weight_decays, double lr, double beta1, double beta2, double eps, int64_t step,
                double grad_scale, const CudaContext& ctx);

}  // namespace tripod::cuda
