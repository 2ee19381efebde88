// Dtype conversions and the scalar reductions the training step reads back: counts of non-finite
// elements and the loss sum over valid targets.
#include <cmath>
#include <type_traits>

#include "backend/cpu/kernels.h"
#include "core/bf16.h"

namespace tripod::cpu {

template <typename From, typename To>
void convert(const From* src, To* dst, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<To, bf16>) {
      if constexpr (std::is_same_v<From, double>) dst[i] = double_to_bf16(src[i]);
      else if constexpr (std::is_same_v<From, float>) dst[i] = float_to_bf16(src[i]);
      else dst[i] = src[i];
    } else if constexpr (std::is_same_v<From, bf16>) {
      dst[i] = static_cast<To>(bf16_to_float(src[i]));  // exact in fp32 and fp64
    } else {
      dst[i] = static_cast<To>(src[i]);  // fp64 -> fp32 rounds to nearest even; widening is exact
    }
  }
}

template <typename T>
int64_t count_nonfinite(const T* x, int64_t n) {
  int64_t count = 0;
#pragma omp parallel for schedule(static) reduction(+ : count)
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<T, bf16>) count += !std::isfinite(bf16_to_float(x[i]));
    else count += !std::isfinite(x[i]);
  }
  return count;
}

template <typename T>
double sum_valid_losses(const T* losses, const int32_t* targets, int64_t n) {
  double sum = 0;  // in token order, in fp64: the result does not depend on the device
  for (int64_t i = 0; i < n; ++i)
    if (targets[i] >= 0) sum += static_cast<double>(losses[i]);
  return sum;
}

void round_to_bf16(const float* src, bf16* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = float_to_bf16(src[i]);
}

#define TRIPOD_CONVERT(From, To) template void convert<From, To>(const From*, To*, int64_t);
TRIPOD_CONVERT(float, double)
TRIPOD_CONVERT(double, float)
TRIPOD_CONVERT(float, bf16)
TRIPOD_CONVERT(double, bf16)
TRIPOD_CONVERT(bf16, float)
TRIPOD_CONVERT(bf16, double)
#undef TRIPOD_CONVERT
template int64_t count_nonfinite<float>(const float*, int64_t);
template int64_t count_nonfinite<double>(const double*, int64_t);
template int64_t count_nonfinite<bf16>(const bf16*, int64_t);
template double sum_valid_losses<float>(const float*, const int32_t*, int64_t);
template double sum_valid_losses<double>(const double*, const int32_t*, int64_t);

}  // namespace tripod::cpu
