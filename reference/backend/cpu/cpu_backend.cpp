// The CPU backend's memory, conversions, GEMM and elementwise operations (the layer kernels'
// dispatch is in cpu_layer_ops.cpp). Both CPU-arithmetic backends are made here.
#include "backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backend/convert_dispatch.h"
#include "backend/row_indexing.h"
#include "backend/unwritten_poison.h"
#include "core/bf16.h"
#include "core/block_cache.h"
#include "backend/cpu/kernels.h"

namespace tripod {
namespace cpu {
namespace {

void require_same(const Tensor& a, const Tensor& b, const char* op) {
  if (a.dtype() != b.dtype()) fail(op, ": dtype mismatch (", a.describe(), " vs ", b.describe(), ")");
}

}  // namespace

void CpuBackend::wrong_device(const Tensor& t, const char* op) const {
  fail(op, ": the ", name_, " backend was given a ", t.describe(), " tensor; it computes on ", device_name(device_),
       " memory only (move host data in with upload)");
}

Tensor CpuBackend::alloc(const Shape& shape, DType dtype) { return allocate(shape, dtype, true); }

Tensor CpuBackend::alloc_for_overwrite(const Shape& shape, DType dtype) { return allocate(shape, dtype, false); }

Tensor CpuBackend::allocate(const Shape& shape, DType dtype, bool zero_fill) {
  const std::size_t bytes = allocation_bytes(shape, dtype);
  const std::size_t padded = (bytes + 63) / 64 * 64;  // 64-byte alignment for AVX-512 loads
  void* p = allocate_host_block(padded, zero_fill);  // large ones cached (core/block_cache.h says why)
  if (padded != 0 && p == nullptr)
    fail("out of ", device_name(device_), " memory allocating ", bytes, " bytes for a tensor of shape ", shape_str(shape));
  if (!zero_fill && poison_unwritten_ && padded != 0) std::memset(p, kUnwrittenPoisonByte, padded);
  const std::size_t live = counters_->live.fetch_add(padded) + padded;
  for (std::size_t peak = counters_->peak.load(); live > peak && !counters_->peak.compare_exchange_weak(peak, live);) {
  }
  auto counters = counters_;
  return Tensor(std::make_shared<Storage>(p, bytes, device_,
                                          [counters, padded](void* q) {
                                            counters->live.fetch_sub(padded);
                                            free_host_block(q, padded);
                                          }),
                0, shape, dtype);
}

void CpuBackend::fill(const Tensor& t, double value) {
  if (t.dtype() == DType::BF16) {  // as the CUDA backend's: ZeRO-3 poisons its released bf16 gathers
    const bf16 rounded = double_to_bf16(value);
    bf16* p = ptr<bf16>(t, "fill");
    std::fill(p, p + t.numel(), rounded);
    return;
  }
  dispatch_float(t.dtype(), "fill", [&](auto zero) {
    using T = decltype(zero);
    T* p = ptr<T>(t, "fill");
    const int64_t n = t.numel();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(value);
  });
}

void CpuBackend::copy(const Tensor& src, const Tensor& dst) {
  require_same(src, dst, "copy");
  if (src.numel() != dst.numel()) fail("copy: ", src.describe(), " into ", dst.describe());
  if (src.device() != device_) wrong_device(src, "copy");
  if (dst.device() != device_) wrong_device(dst, "copy");
  if (src.bytes()) std::memmove(dst.device_raw(), src.device_raw(), src.bytes());
}

void CpuBackend::upload(const void* host, const Tensor& dst) {
  if (dst.device() != device_) wrong_device(dst, "upload");
  if (dst.bytes()) std::memcpy(dst.device_raw(), host, dst.bytes());
}

void CpuBackend::download(const Tensor& src, void* host) {
  if (src.device() != device_) wrong_device(src, "download");
  if (src.bytes()) std::memcpy(host, src.device_raw(), src.bytes());
}

void CpuBackend::convert(const Tensor& src, const Tensor& dst) {
  if (src.numel() != dst.numel()) fail("convert: ", src.describe(), " into ", dst.describe());
  if (src.dtype() == dst.dtype()) return copy(src, dst);
  const int64_t n = src.numel();
  auto run = [&](auto from, auto to) {
    using From = decltype(from);
    using To = decltype(to);
    cpu::convert<From, To>(ptr<From>(src, "convert"), ptr<To>(dst, "convert"), n);
  };
  dispatch_conversion(src, dst, run);
}

void CpuBackend::gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const Tensor& a,
                      int64_t lda, const Tensor& b, int64_t ldb, double beta, const Tensor& c, int64_t ldc,
                      DType accumulate) {
  require_same(a, b, "gemm");
  const DType ab = a.dtype(), cd = c.dtype();
  if (ab == DType::BF16 && accumulate == DType::F32 && (cd == DType::F32 || cd == DType::BF16)) {
    const bf16* pa = ptr<bf16>(a, "gemm");
    const bf16* pb = ptr<bf16>(b, "gemm");
    const float al = static_cast<float>(alpha), be = static_cast<float>(beta);
    if (cd == DType::F32) return gemm_bf16<float>(trans_a, trans_b, m, n, k, al, pa, lda, pb, ldb, be, ptr<float>(c, "gemm"), ldc);
    return gemm_bf16<bf16>(trans_a, trans_b, m, n, k, al, pa, lda, pb, ldb, be, ptr<bf16>(c, "gemm"), ldc);
  }
  if (!((ab == DType::F32 || ab == DType::F64) && cd == ab && accumulate == ab))
    fail("gemm: unsupported combination A/B ", dtype_name(ab), ", C ", dtype_name(cd), ", accumulate ",
         dtype_name(accumulate), " (supported: fp32/fp32/fp32, fp64/fp64/fp64, bf16/fp32/fp32, bf16/bf16/fp32)");
  if (ab == DType::F32 && fp32_matmul() != Fp32Matmul::Exact)
    return gemm_rounded_operands(fp32_matmul(), trans_a, trans_b, m, n, k, static_cast<float>(alpha),
                                 ptr<float>(a, "gemm"), lda, ptr<float>(b, "gemm"), ldb, static_cast<float>(beta),
                                 ptr<float>(c, "gemm"), ldc);
  dispatch_float(ab, "gemm", [&](auto zero) {
    using T = decltype(zero);
    cpu::gemm<T>(trans_a, trans_b, m, n, k, static_cast<T>(alpha), ptr<T>(a, "gemm"), lda, ptr<T>(b, "gemm"), ldb,
                 static_cast<T>(beta), ptr<T>(c, "gemm"), ldc);
  });
}

void CpuBackend::add(const Tensor& out, const Tensor& a, const Tensor& b) {
  require_same(a, b, "add");
  if (!(a.numel() == b.numel() && a.numel() == out.numel())) fail("add: shape mismatch");
  dispatch_float(a.dtype(), "add", [&](auto zero) {
    using T = decltype(zero);
    T* o = ptr<T>(out, "add");
    const T *x = ptr<T>(a, "add"), *y = ptr<T>(b, "add");
    const int64_t n = a.numel();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
  });
}

void CpuBackend::scale(const Tensor& t, double factor) {
  dispatch_float(t.dtype(), "scale", [&](auto zero) {
    using T = decltype(zero);
    T* p = ptr<T>(t, "scale");
    const T f = static_cast<T>(factor);
    const int64_t n = t.numel();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) p[i] *= f;
  });
}

void CpuBackend::sum_squares(const Tensor& acc, const Tensor& t) {
  double* total = ptr<double>(acc, "sum_squares");
  dispatch_float(t.dtype(), "sum_squares", [&](auto zero) {
    using T = decltype(zero);
    *total += cpu::sum_squares<T>(ptr<T>(t, "sum_squares"), t.numel());
  });
}

void CpuBackend::count_nonfinite(const Tensor& acc, const Tensor& t) {
  double* total = ptr<double>(acc, "count_nonfinite");
  switch (t.dtype()) {
    case DType::F32: *total += static_cast<double>(cpu::count_nonfinite(ptr<float>(t, "count_nonfinite"), t.numel())); return;
    case DType::F64: *total += static_cast<double>(cpu::count_nonfinite(ptr<double>(t, "count_nonfinite"), t.numel())); return;
    case DType::BF16: *total += static_cast<double>(cpu::count_nonfinite(ptr<bf16>(t, "count_nonfinite"), t.numel())); return;
    case DType::I32: return;  // integers are always finite
  }
}

void CpuBackend::sum_valid_losses(const Tensor& out, const Tensor& losses, const Tensor& targets) {
  if (losses.numel() != targets.numel()) fail("sum_valid_losses: ", losses.describe(), " for ", targets.describe());
  double* sum = ptr<double>(out, "sum_valid_losses");
  dispatch_float(losses.dtype(), "sum_valid_losses", [&](auto zero) {
    using T = decltype(zero);
    *sum = cpu::sum_valid_losses<T>(ptr<T>(losses, "sum_valid_losses"), ptr<int32_t>(targets, "sum_valid_losses"),
                                    losses.numel());
  });
}

// The ids are checked here (the host can): each in range, and for scatter_add_rows each once.
static void check_row_ids(const char* op, const int32_t* ids, const RowIndexing& shape, bool distinct) {
  std::vector<bool> seen(distinct ? static_cast<std::size_t>(shape.table_rows) : 0);
  for (int64_t r = 0; r < shape.rows; ++r) {
    if (ids[r] < 0 || ids[r] >= shape.table_rows)
      fail(op, ": id ", ids[r], " at ", r, " is outside the table's ", shape.table_rows, " rows");
    if (!distinct) continue;
    if (seen[static_cast<std::size_t>(ids[r])]) fail(op, ": id ", ids[r], " appears twice (the ids must be distinct)");
    seen[static_cast<std::size_t>(ids[r])] = true;
  }
}

// row(table row ids[r], packed row r, C) for every r, after the checks; rows in parallel.
template <class RowFn>
static void for_each_row_by_id(const CpuBackend& be, const char* op, const Tensor& table, const Tensor& packed,
                               const Tensor& rows, bool distinct, RowFn row) {
  const RowIndexing shape = check_row_indexing(op, table, packed, rows);
  const int32_t* ids = be.ptr<int32_t>(rows, op);
  check_row_ids(op, ids, shape, distinct);
  dispatch_float(table.dtype(), op, [&](auto zero) {
    using T = decltype(zero);
    T* t = be.ptr<T>(table, op);
    T* p = be.ptr<T>(packed, op);
    const int64_t C = shape.channels;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < shape.rows; ++r) row(t + ids[r] * C, p + r * C, C);
  });
}

void CpuBackend::gather_rows(const Tensor& packed, const Tensor& table, const Tensor& rows) {
  for_each_row_by_id(*this, "gather_rows", table, packed, rows, false,
                     [](const auto* t, auto* p, int64_t C) { std::memcpy(p, t, sizeof(*p) * C); });
}

void CpuBackend::scatter_add_rows(const Tensor& table, const Tensor& packed, const Tensor& rows) {
  for_each_row_by_id(*this, "scatter_add_rows", table, packed, rows, true, [](auto* t, const auto* p, int64_t C) {
    for (int64_t c = 0; c < C; ++c) t[c] += p[c];
  });
}

}  // namespace cpu

std::unique_ptr<Backend> make_cpu_backend() {
  return std::make_unique<cpu::CpuBackend>(Device::Host, "cpu (OpenBLAS + OpenMP)");
}

cpu::CpuBackend::CpuBackend(Device device, std::string name)
    : device_(device),
      name_(std::move(name)),
      attention_kernel_(device == Device::Emulated ? cuda::choose_attention_kernel()
                                                  : cuda::AttentionKernel::Gemm),
      poison_unwritten_(device != Device::Host && choose_unwritten_poison()) {
  if (cuda::is_flash(attention_kernel_))
    name_ = name_.substr(0, name_.rfind(')')) + cuda::attention_name_suffix(attention_kernel_) + ")";
}

std::unique_ptr<Backend> make_emulated_backend() {
  return std::make_unique<cpu::CpuBackend>(Device::Emulated, "emulated (CPU arithmetic on device memory)");
}

}  // namespace tripod
