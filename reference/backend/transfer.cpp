#include "backend/transfer.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <type_traits>

#include "core/bf16.h"

namespace tripod {

std::vector<double> to_host_f64(Backend& backend, const Tensor& t) {
  const std::size_t n = static_cast<std::size_t>(t.numel());
  std::vector<double> out(n);
  auto widen = [&](auto sample) {
    using T = decltype(sample);
    std::vector<T> tmp(n);
    backend.download(t, tmp.data());
    for (std::size_t i = 0; i < n; ++i) {
      if constexpr (std::is_same_v<T, bf16>) out[i] = bf16_to_float(tmp[i]);
      else out[i] = static_cast<double>(tmp[i]);
    }
  };
  switch (t.dtype()) {
    case DType::F64: backend.download(t, out.data()); break;
    case DType::F32: widen(float{}); break;
    case DType::BF16: widen(bf16{}); break;
    case DType::I32: widen(int32_t{}); break;
  }
  return out;
}

void from_host_f64(Backend& backend, const std::vector<double>& values, const Tensor& t) {
  TRIPOD_CHECK(static_cast<int64_t>(values.size()) == t.numel(), "from_host_f64: ", values.size(), " values for ",
               t.describe());
  switch (t.dtype()) {
    case DType::F64: backend.upload(values.data(), t); return;
    case DType::F32: {
      std::vector<float> tmp(values.begin(), values.end());
      backend.upload(tmp.data(), t);
      return;
    }
    case DType::BF16: {
      std::vector<bf16> tmp(values.size());
      for (std::size_t i = 0; i < values.size(); ++i) tmp[i] = double_to_bf16(values[i]);
      backend.upload(tmp.data(), t);
      return;
    }
    case DType::I32: fail("from_host_f64: ", t.describe(), " holds integers, not values");
  }
}

Tensor alloc_scalar(Backend& backend) { return backend.alloc({1}, DType::F64); }

double read_scalar(Backend& backend, const Tensor& scalar) {
  TRIPOD_CHECK(scalar.dtype() == DType::F64 && scalar.numel() == 1, "read_scalar: expected one fp64 element, got ",
               scalar.describe());
  double value = 0;
  backend.download(scalar, &value);
  return value;
}

void fill_random(Backend& backend, const Tensor& t, uint64_t seed) {
  const int64_t n = t.numel(), block = std::min<int64_t>(n, int64_t{1} << 20);
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> values(static_cast<std::size_t>(block));
  for (double& v : values) v = normal(rng);
  const Tensor first = t.view(0, {block});
  from_host_f64(backend, values, first);
  for (int64_t offset = block; offset < n; offset += block) {
    const int64_t len = std::min(block, n - offset);
    backend.copy(first.view(0, {len}), t.view(offset, {len}));
  }
}

}  // namespace tripod
