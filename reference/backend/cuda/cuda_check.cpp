// tripod_cuda_check: lists the CUDA devices and runs the CUDA kernels against the CPU backend's
// kernels on the same inputs. Exit 0 if they agree (fp32, 1e-5 relative), 1 if not, 2 if no GPU.
#include <cmath>
#include <cstdio>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cuda/elementwise_kernels.h"
#include "core/counter_rng.h"

namespace {

double max_relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0, scale = 1e-30;
  for (std::size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return worst / scale;
}

}  // namespace

int main() {
  using namespace tripod;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("no CUDA device found\n");
    return 2;
  }
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp prop{};
    cuda::check_cuda(cudaGetDeviceProperties(&prop, d), "cudaGetDeviceProperties");
    std::printf("device %d: %s, sm_%d%d, %.1f GiB\n", d, prop.name, prop.major, prop.minor,
                prop.totalGlobalMem / 1073741824.0);
  }
  const int64_t n = 1 << 20;
  const CounterRng rng(7, "cuda_check");
  std::vector<float> x(n), g(n), m(n, 0.f), v(n, 0.f), p(n);
  for (int64_t i = 0; i < n; ++i) {
    x[i] = static_cast<float>(3.0 * rng.normal(3 * i));
    g[i] = static_cast<float>(0.01 * rng.normal(3 * i + 1));
    p[i] = static_cast<float>(0.02 * rng.normal(3 * i + 2));
  }
  float *dx, *dy, *dp, *dg, *dm, *dv;
  const std::size_t bytes = n * sizeof(float);
  for (float** ptr : {&dx, &dy, &dp, &dg, &dm, &dv}) cuda::check_cuda(cudaMalloc(ptr, bytes), "cudaMalloc");
  cuda::check_cuda(cudaMemcpy(dx, x.data(), bytes, cudaMemcpyHostToDevice), "copy x");
  cuda::check_cuda(cudaMemcpy(dp, p.data(), bytes, cudaMemcpyHostToDevice), "copy p");
  cuda::check_cuda(cudaMemcpy(dg, g.data(), bytes, cudaMemcpyHostToDevice), "copy g");
  cuda::check_cuda(cudaMemset(dm, 0, bytes), "memset m");
  cuda::check_cuda(cudaMemset(dv, 0, bytes), "memset v");

  cuda::gelu_forward(dy, dx, n, nullptr);
  cuda::adamw(dp, dg, dm, dv, n, 1e-3, 0.9, 0.95, 1e-8, 0.1, 1, 0.5, nullptr);
  std::vector<float> y_gpu(n), p_gpu(n), y_cpu(n);
  cuda::check_cuda(cudaMemcpy(y_gpu.data(), dy, bytes, cudaMemcpyDeviceToHost), "copy y");
  cuda::check_cuda(cudaMemcpy(p_gpu.data(), dp, bytes, cudaMemcpyDeviceToHost), "copy p");
  cpu::gelu_forward<float>(y_cpu.data(), x.data(), n);
  cpu::adamw<float>(p.data(), g.data(), m.data(), v.data(), n, 1e-3, 0.9, 0.95, 1e-8, 0.1, 1, 0.5);

  const double gelu_err = max_relative_error(y_gpu, y_cpu), adamw_err = max_relative_error(p_gpu, p);
  std::printf("gelu_forward max relative error vs CPU: %.3e\nadamw max relative error vs CPU: %.3e\n", gelu_err,
              adamw_err);
  for (float* ptr : {dx, dy, dp, dg, dm, dv}) cudaFree(ptr);
  const bool ok = gelu_err < 1e-5 && adamw_err < 1e-5;
  std::printf("%s\n", ok ? "CUDA kernels agree with the CPU backend" : "MISMATCH");
  return ok ? 0 : 1;
}
