// Per-element arithmetic of the elementwise CUDA kernels (backend/cuda/kernels/elementwise.cu),
// written as the CPU backend writes it (backend/cpu/gelu_kernels.cpp, loss_optim_kernels.cpp) so
// that the device computes the same expressions in the same order. T is float or double.
// test_kernel_elementwise_math.cpp runs these in host loops against the CPU kernels.
#pragma once
#include <cmath>
#include <cstdint>

#include "backend/kernels/host_device.h"

namespace tripod::kernels {

template <typename T>
TRIPOD_HD T gelu_scale() {
  return static_cast<T>(0.7978845608028654);  // sqrt(2 / pi)
}

// GELU, tanh approximation (GPT-2's "gelu_new"): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
template <typename T>
TRIPOD_HD T gelu_forward_value(T x) {
  const T cube = static_cast<T>(0.044715) * x * x * x;
  return static_cast<T>(0.5) * x * (static_cast<T>(1) + std::tanh(gelu_scale<T>() * (x + cube)));
}

// dinp = gelu'(x) * dout, with gelu'(x) = 0.5 (1 + th) + 0.5 x (1 - th^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2).
template <typename T>
TRIPOD_HD T gelu_backward_value(T x, T dout) {
  const T cube = static_cast<T>(0.044715) * x * x * x;
  const T th = std::tanh(gelu_scale<T>() * (x + cube));
  const T sech2 = static_cast<T>(1) - th * th;
  const T darg = gelu_scale<T>() * (static_cast<T>(1) + static_cast<T>(3 * 0.044715) * x * x);
  const T grad = static_cast<T>(0.5) * (static_cast<T>(1) + th) + static_cast<T>(0.5) * x * sech2 * darg;
  return unfused_product(grad, dout);  // rounded before a caller adds it (a fused bias gradient's sums)
}

// The AdamW step's scalars, computed once on the host in fp64 and rounded to T, exactly as
// cpu::adamw does (bias corrections from the step count; decay is the decoupled weight decay).
template <typename T>
struct AdamWCoefficients {
  T decay, step_size, beta1, beta2, bc2_sqrt, eps, grad_scale;
  bool scaled;  // grad_scale != 1: multiply (skipping the multiply keeps the unscaled rounding)
};

template <typename T>
inline AdamWCoefficients<T> adamw_coefficients(double lr, double beta1, double beta2, double eps,
                                               double weight_decay, int64_t step, double grad_scale) {
  const double bc1 = 1.0 - std::pow(beta1, static_cast<double>(step));
  const double bc2_sqrt = std::sqrt(1.0 - std::pow(beta2, static_cast<double>(step)));
  AdamWCoefficients<T> k;
  k.decay = static_cast<T>(1.0 - lr * weight_decay);
  k.step_size = static_cast<T>(lr / bc1);
  k.beta1 = static_cast<T>(beta1);
  k.beta2 = static_cast<T>(beta2);
  k.bc2_sqrt = static_cast<T>(bc2_sqrt);
  k.eps = static_cast<T>(eps);
  k.grad_scale = static_cast<T>(grad_scale);
  k.scaled = grad_scale != 1.0;
  return k;
}

// One element of decoupled AdamW, in torch.optim.AdamW's order: moments, then
// p = p * decay - step_size * m / (sqrt(v) / sqrt(bc2) + eps). Updates param, m and v in place.
template <typename T>
TRIPOD_HD void adamw_element(T& param, T grad, T& m, T& v, const AdamWCoefficients<T>& k) {
  const T g = k.scaled ? grad * k.grad_scale : grad;
  const T mi = k.beta1 * m + (static_cast<T>(1) - k.beta1) * g;
  const T vi = k.beta2 * v + (static_cast<T>(1) - k.beta2) * g * g;
  m = mi;
  v = vi;
  const T denom = std::sqrt(vi) / k.bc2_sqrt + k.eps;
  param = param * k.decay - k.step_size * (mi / denom);
}

}  // namespace tripod::kernels
