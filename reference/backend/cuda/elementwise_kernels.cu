#include "backend/cuda/elementwise_kernels.h"

#include <cmath>
#include <string>

#include "core/error.h"

namespace tripod::cuda {
namespace {

constexpr int kThreads = 256;

int blocks_for(int64_t n) { return static_cast<int>((n + kThreads - 1) / kThreads); }

__global__ void gelu_forward_kernel(float* out, const float* inp, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float x = inp[i];
  const float cube = 0.044715f * x * x * x;
  out[i] = 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + cube)));
}

__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, int64_t n, float b1, float b2,
                             float eps, float decay, float step_size, float bc2_sqrt, float grad_scale) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float g = grad_scale != 1.0f ? grad[i] * grad_scale : grad[i];
  const float mi = b1 * m[i] + (1.0f - b1) * g;
  const float vi = b2 * v[i] + (1.0f - b2) * g * g;
  m[i] = mi;
  v[i] = vi;
  const float denom = sqrtf(vi) / bc2_sqrt + eps;
  param[i] = param[i] * decay - step_size * (mi / denom);
}

}  // namespace

void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) fail("CUDA error in ", what, ": ", cudaGetErrorString(status));
}

void gelu_forward(float* out, const float* inp, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  gelu_forward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(out, inp, n);
  check_cuda(cudaGetLastError(), "gelu_forward launch");
}

void adamw(float* param, const float* grad, float* m, float* v, int64_t n, double lr, double beta1, double beta2,
           double eps, double weight_decay, int64_t step, double grad_scale, cudaStream_t stream) {
  if (n == 0) return;
  const double bc1 = 1.0 - std::pow(beta1, static_cast<double>(step));
  const double bc2_sqrt = std::sqrt(1.0 - std::pow(beta2, static_cast<double>(step)));
  adamw_kernel<<<blocks_for(n), kThreads, 0, stream>>>(
      param, grad, m, v, n, static_cast<float>(beta1), static_cast<float>(beta2), static_cast<float>(eps),
      static_cast<float>(1.0 - lr * weight_decay), static_cast<float>(lr / bc1), static_cast<float>(bc2_sqrt),
      static_cast<float>(grad_scale));
  check_cuda(cudaGetLastError(), "adamw launch");
}

}  // namespace tripod::cuda
