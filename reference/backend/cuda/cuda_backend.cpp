// The CUDA backend's memory, conversions, elementwise operations and reductions (the GEMMs and
// their bf16 operand copies are in cuda_gemm_ops.cpp, the layer kernels' dispatch in
// cuda_layer_ops.cpp), and its constructor from a device index.
#include "backend/cuda/cuda_backend.h"

#include <cstdint>
#include <cstdlib>

#include "backend/backend_factory.h"
#include "backend/convert_dispatch.h"
#include "backend/row_indexing.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/dispatch.h"
#include "backend/cuda/gemm/cublaslt_gemm.h"
#include "backend/cuda/gemm/cublaslt_library.h"
#include "backend/cuda/host/architecture_fit.h"
#include "backend/cuda/host/device_choice.h"
#include "backend/cuda/kernels/elementwise.h"
#include "backend/cuda/kernels/reductions.h"
#include "backend/cuda/stream_alloc.h"

namespace tripod {
namespace cuda {
namespace {

// cuBLASLt's recommended workspace on Hopper (smaller ones restrict its choice of kernels).
constexpr std::size_t kGemmWorkspaceBytes = 32u << 20;

DeviceLimits limits_of(const cudaDeviceProp& p) {
  DeviceLimits l;
  l.max_grid_x = p.maxGridSize[0];
  l.max_grid_y = p.maxGridSize[1];
  l.max_threads_per_block = p.maxThreadsPerBlock;
  l.shared_per_block = p.sharedMemPerBlock;
  l.shared_per_block_optin = p.sharedMemPerBlockOptin;
  l.multiprocessors = p.multiProcessorCount;
  l.warp_size = p.warpSize;
  return l;
}

}  // namespace

CudaBackend::CudaBackend(int device) : device_(device) {
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  cudaDeviceProp props{};
  check_cuda(cudaGetDeviceProperties(&props, device_), "cudaGetDeviceProperties");
  const std::string mismatch =
      architecture_mismatch(TRIPOD_CUDA_ARCHITECTURES_TEXT, props.name, props.major, props.minor);
  check(mismatch.empty(), "CUDA device ", device_, ": ", mismatch);
  name_ = std::string("cuda (") + props.name + ", sm_" + std::to_string(props.major) + std::to_string(props.minor) +
          ", device " + std::to_string(device_) +
          attention_name_suffix(attention_kernel_) +
          (fusions_.all() ? "" : ", fusions: " + fusions_.describe()) + ")";
  ctx_.device = device_;
  ctx_.limits = limits_of(props);
  check_cuda(cudaStreamCreateWithFlags(&counters_->stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  ctx_.stream = counters_->stream;
  // Tensors come from the device's stream-ordered pool (alloc), which keeps what is freed for the
  // next allocation instead of giving it back at every synchronisation.
  check_cuda(cudaDeviceGetDefaultMemPool(&pool_, device_), "cudaDeviceGetDefaultMemPool");
  uint64_t keep_everything = UINT64_MAX;
  check_cuda(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &keep_everything),
             "cudaMemPoolSetAttribute (release threshold)");
  check_cublas(cublaslt().create(&ctx_.lt), "cublasLtCreate");
  check_cuda(cudaMalloc(&ctx_.workspace, kGemmWorkspaceBytes), "cudaMalloc (cuBLASLt workspace)");
  ctx_.workspace_bytes = kGemmWorkspaceBytes;
}

std::string CudaBackend::device_bus_id() const {
  char id[32] = {};
  check_cuda(cudaDeviceGetPCIBusId(id, sizeof id, device_), "cudaDeviceGetPCIBusId");
  return id;
}

CudaBackend::~CudaBackend() {
  // Errors here cannot be reported (a destructor); the work is finished first so frees are safe.
  // The stream stays for the tensors still alive (DeviceMemory destroys it after the last).
  // The backend's own scratch goes first: members die after this body, so their stream-ordered
  // frees would come after the trim and leave ~4 GB at GPT-2 B32 reserved in the pool for good.
  for (Tensor* scratch : {&scratch_a_, &scratch_b_, &scratch_c_, &score_grads_, &attention_scratch_,
                          &attention_scratch16_})
    *scratch = Tensor();
  cudaStreamSynchronize(ctx_.stream);
  cudaFree(ctx_.workspace);
  // The pool's unused memory goes back to the device (a later backend, NCCL or another library of
  // this process can use it); what live tensors hold stays.
  cudaMemPoolTrimTo(pool_, 0);
  cublaslt().destroy(ctx_.lt);
}

CudaBackend::DeviceMemory::~DeviceMemory() {
  if (stream == nullptr) return;  // the constructor failed before making it
  cudaStreamSynchronize(stream);
  cudaStreamDestroy(stream);
}

void CudaBackend::wrong_device(const Tensor& t, const char* op) const {
  fail(op, ": the CUDA backend was given a ", t.describe(), " tensor; it computes on CUDA device memory only (move "
       "host data in with upload)");
}

// cudaMallocAsync from the device's pool, once more after giving the pool's unused memory back
// if the first try fails. The pool keeps what is freed (release threshold: everything), so its
// free pieces can be too small for a larger request while together they would fit: trimming
// returns them to the device, and the retry maps fresh memory. The pool's frees are stream-ordered;
// the synchronisation lets the trim see them complete.
void* CudaBackend::pool_alloc(std::size_t bytes, const Shape& shape) {
  void* p = nullptr;
  const cudaError_t status = malloc_async_or_trim(&p, bytes, ctx_.stream);  // (the pool_ it draws from)
  if (status == cudaSuccess) return p;
  // Not out of memory: the stream held a kernel's failure, which the synchronisation reported.
  if (status != cudaErrorMemoryAllocation) check_cuda(status, "allocating device memory (after an earlier failure)");
  std::size_t free_bytes = 0, total = 0;
  cudaMemGetInfo(&free_bytes, &total);
  uint64_t reserved = 0, used = 0;
  cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrReservedMemCurrent, &reserved);
  cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrUsedMemCurrent, &used);
  fail("out of CUDA device memory allocating ", bytes, " bytes for a tensor of shape ", shape_str(shape), " (",
       free_bytes >> 20, " MiB free of ", total >> 20, " MiB; ", counters_->live.load() >> 20,
       " MiB held by this backend; its pool reserves ", reserved >> 20, " MiB, ", used >> 20,
       " MiB of it in use, after giving back what it could): ", cudaGetErrorString(status));
}

Tensor CudaBackend::alloc(const Shape& shape, DType dtype) {
  Tensor t = alloc_for_overwrite(shape, dtype);
  if (t.bytes() != 0)
    check_cuda(cudaMemsetAsync(t.device_raw(), 0, t.bytes(), ctx_.stream), "cudaMemsetAsync (alloc zero-fill)");
  return t;
}

Tensor CudaBackend::alloc_for_overwrite(const Shape& shape, DType dtype) {
  const std::size_t bytes = allocation_bytes(shape, dtype);
  const std::size_t padded = (bytes + 255) / 256 * 256;  // 256-byte aligned as cudaMalloc's: count what it holds
  void* p = nullptr;
  if (padded != 0) p = pool_alloc(padded, shape);
  if (poison_unwritten_ && padded != 0)
    check_cuda(cudaMemsetAsync(p, kUnwrittenPoisonByte, padded, ctx_.stream), "cudaMemsetAsync (TRIPOD_POISON_UNWRITTEN)");
  const std::size_t live = counters_->live.fetch_add(padded) + padded;
  for (std::size_t peak = counters_->peak.load(); live > peak && !counters_->peak.compare_exchange_weak(peak, live);) {
  }
  auto counters = counters_;
  // Stream-ordered: the memory is reused only by work issued on this stream after the kernels that
  // read it (NCCL's streams are ordered before it by the requests, which keep their tensors until
  // waited for). Not cudaFree: it waits for the whole device, NCCL kernels included, and a receive
  // posted ahead on a pipeline waits for a peer that may be waiting for this rank: a deadlock.
  return Tensor(std::make_shared<Storage>(p, bytes, Device::Cuda,
                                          [counters, padded](void* q) {
                                            counters->live.fetch_sub(padded);
                                            if (q != nullptr) cudaFreeAsync(q, counters->stream);
                                          }),
                0, shape, dtype);
}

void CudaBackend::fill(const Tensor& t, double value) {
  dispatch_float_or_bf16(t.dtype(), "fill", [&](auto zero) {
    using T = decltype(zero);
    cuda::fill<T>(ptr<T>(t, "fill"), t.numel(), value, ctx_);
  });
}

void CudaBackend::copy(const Tensor& src, const Tensor& dst) {
  require_same_dtype(src, dst, "copy");
  if (src.numel() != dst.numel()) fail("copy: ", src.describe(), " into ", dst.describe());
  const char* s = static_cast<const char*>(raw(src, "copy"));
  char* d = static_cast<char*>(raw(dst, "copy"));
  const std::size_t bytes = src.bytes();
  if (bytes == 0 || s == d) return;
  // cudaMemcpy's ranges must not overlap; the CPU backend's copy is a memmove, so match it.
  if (s < d + bytes && d < s + bytes) {
    Tensor staging = alloc(src.shape(), src.dtype());
    check_cuda(cudaMemcpyAsync(staging.device_raw(), s, bytes, cudaMemcpyDeviceToDevice, ctx_.stream), "copy");
    check_cuda(cudaMemcpyAsync(d, staging.device_raw(), bytes, cudaMemcpyDeviceToDevice, ctx_.stream), "copy");
    return;
  }
  check_cuda(cudaMemcpyAsync(d, s, bytes, cudaMemcpyDeviceToDevice, ctx_.stream), "copy");
}

void CudaBackend::upload(const void* host, const Tensor& dst) {
  if (dst.bytes() == 0) return;
  // From pageable memory this returns once the source is staged, so the caller may reuse it.
  check_cuda(cudaMemcpyAsync(raw(dst, "upload"), host, dst.bytes(), cudaMemcpyHostToDevice, ctx_.stream),
             "upload");
}

void CudaBackend::download(const Tensor& src, void* host) {
  if (src.bytes() == 0) return;
  check_cuda(cudaMemcpyAsync(host, raw(src, "download"), src.bytes(), cudaMemcpyDeviceToHost, ctx_.stream),
             "download");
  synchronize();
}

void CudaBackend::synchronize() { check_cuda(cudaStreamSynchronize(ctx_.stream), "synchronize (a kernel failed)"); }

void CudaBackend::convert(const Tensor& src, const Tensor& dst) {
  if (src.numel() != dst.numel()) fail("convert: ", src.describe(), " into ", dst.describe());
  if (src.dtype() == dst.dtype()) return copy(src, dst);
  const int64_t n = src.numel();
  auto run = [&](auto from, auto to) {
    using From = decltype(from);
    using To = decltype(to);
    cuda::convert<From, To>(ptr<From>(src, "convert"), ptr<To>(dst, "convert"), n, ctx_);
  };
  dispatch_conversion(src, dst, run);
}

Tensor& CudaBackend::grown(Tensor& buffer, int64_t elements, DType dtype) {
  // Replacing a buffer frees the old one with cudaFreeAsync on the one stream, after the work
  // already issued that reads it.
  if (!buffer.defined() || buffer.dtype() != dtype || buffer.numel() < elements) buffer = alloc({elements}, dtype);
  return buffer;
}

void CudaBackend::add(const Tensor& out, const Tensor& a, const Tensor& b) {
  require_same_dtype(a, b, "add");
  if (!(a.numel() == b.numel() && a.numel() == out.numel())) fail("add: shape mismatch");
  dispatch_float(a.dtype(), "add", [&](auto zero) {
    using T = decltype(zero);
    cuda::add<T>(ptr<T>(out, "add"), ptr<T>(a, "add"), ptr<T>(b, "add"), a.numel(), ctx_);
  });
}

void CudaBackend::scale(const Tensor& t, double factor) {
  dispatch_float(t.dtype(), "scale", [&](auto zero) {
    using T = decltype(zero);
    cuda::scale<T>(ptr<T>(t, "scale"), t.numel(), factor, ctx_);
  });
}

void CudaBackend::sum_squares(const Tensor& acc, const Tensor& t) {
  double* total = ptr<double>(acc, "sum_squares");
  dispatch_float(t.dtype(), "sum_squares", [&](auto zero) {
    using T = decltype(zero);
    cuda::sum_squares<T>(total, ptr<T>(t, "sum_squares"), t.numel(), ctx_);
  });
}

void CudaBackend::count_nonfinite(const Tensor& acc, const Tensor& t) {
  double* total = ptr<double>(acc, "count_nonfinite");
  if (t.dtype() == DType::I32) return;  // integers are always finite
  dispatch_float_or_bf16(t.dtype(), "count_nonfinite", [&](auto zero) {
    using T = decltype(zero);
    cuda::count_nonfinite<T>(total, ptr<T>(t, "count_nonfinite"), t.numel(), ctx_);
  });
}

void CudaBackend::sum_valid_losses(const Tensor& out, const Tensor& losses, const Tensor& targets) {
  if (losses.numel() != targets.numel()) fail("sum_valid_losses: ", losses.describe(), " for ", targets.describe());
  double* sum = ptr<double>(out, "sum_valid_losses");
  dispatch_float(losses.dtype(), "sum_valid_losses", [&](auto zero) {
    using T = decltype(zero);
    cuda::sum_valid_losses<T>(sum, ptr<T>(losses, "sum_valid_losses"), ptr<int32_t>(targets, "sum_valid_losses"),
                              losses.numel(), ctx_);
  });
}

// The ids are the caller's to get right (in range; distinct for scatter_add_rows): reading them
// back to check would wait for the device.
void CudaBackend::gather_rows(const Tensor& packed, const Tensor& table, const Tensor& rows) {
  const char* op = "gather_rows";
  const RowIndexing shape = check_row_indexing(op, table, packed, rows);
  dispatch_float(table.dtype(), op, [&](auto zero) {
    using T = decltype(zero);
    cuda::gather_rows<T>(ptr<T>(packed, op), ptr<T>(table, op), ptr<int32_t>(rows, op), shape.rows, shape.channels,
                         ctx_);
  });
}

void CudaBackend::scatter_add_rows(const Tensor& table, const Tensor& packed, const Tensor& rows) {
  const char* op = "scatter_add_rows";
  const RowIndexing shape = check_row_indexing(op, table, packed, rows);
  dispatch_float(table.dtype(), op, [&](auto zero) {
    using T = decltype(zero);
    cuda::scatter_add_rows<T>(ptr<T>(table, op), ptr<T>(packed, op), ptr<int32_t>(rows, op), shape.rows,
                              shape.channels, ctx_);
  });
}

}  // namespace cuda

std::string cuda_versions_text() {
  // Neither call makes a context or needs a device; the driver's is 0 where none is installed.
  int runtime = 0, driver = 0;
  const auto version = [](int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); };
  const std::string runtime_text = cudaRuntimeGetVersion(&runtime) == cudaSuccess ? version(runtime) : "unknown";
  const bool has_driver = cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0;
  return "CUDA runtime " + runtime_text + ", " + (has_driver ? "driver " + version(driver) : std::string("no driver")) +
         "; built for " + TRIPOD_CUDA_ARCHITECTURES_TEXT;
}

std::unique_ptr<Backend> make_cuda_backend() {
  // Before the first CUDA call, since the runtime reads it once. Tripod issues work on several
  // streams: compute, one per NCCL group (world, TP, DP, PP, embedding) and one per pipeline
  // sender. With more streams than hardware work queues (CUDA_DEVICE_MAX_CONNECTIONS, default 8)
  // streams share queues, and an NCCL receive waiting for its peer can hold up a send queued
  // behind it on another stream: a deadlock across ranks. So ask for the most (32), unless the
  // user has chosen a value.
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", /*overwrite=*/0);
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess)
    fail("backend 'cuda': no usable CUDA device (", cudaGetErrorName(status), ": ", cudaGetErrorString(status), ")");
  return std::make_unique<cuda::CudaBackend>(cuda::choose_device(count));
}

}  // namespace tripod
