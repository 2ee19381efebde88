// First CUDA kernels: GELU forward (tanh approximation) and the AdamW update, fp32, on device
// pointers, launched on a caller-given stream. They follow the CPU backend's arithmetic exactly,
// so results agree to fp32 rounding of the transcendental functions.
#pragma once
#include <cstdint>

#include <cuda_runtime.h>

namespace tripod::cuda {

void gelu_forward(float* out, const float* inp, int64_t n, cudaStream_t stream);
void adamw(float* param, const float* grad, float* m, float* v, int64_t n, double lr, double beta1, double beta2,
           double eps, double weight_decay, int64_t step, double grad_scale, cudaStream_t stream);

// Throws tripod::Error with the CUDA error string and the call site.
void check_cuda(cudaError_t status, const char* what);

}  // namespace tripod::cuda
