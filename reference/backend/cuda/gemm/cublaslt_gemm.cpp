// The Backend's GEMM through cuBLASLt. Every argument cuBLASLt sees comes from the pure mapping of
// backend/cuda/host/gemm_layout.h (unit-tested without a GPU); this file only turns it into
// descriptors, asks cuBLASLt's heuristic for an algorithm once per distinct problem, and runs it
// in place (D = C) on the backend's stream with the backend's workspace.
//
// Precision: fp32 computes in CUBLAS_COMPUTE_32F, true fp32, unless the caller asks for TF32
// (CUBLAS_COMPUTE_32F_FAST_TF32: fp32 data on tensor cores, 10-bit mantissa products); fp64 in
// CUBLAS_COMPUTE_64F; bf16 A/B in CUBLAS_COMPUTE_32F (fp32 accumulation) into an fp32 or bf16 C.
// Alignment: the mapping promises cuBLASLt each operand's real alignment (address and leading
// dimension), so a view at an odd offset gets a kernel that handles it instead of a misaligned read.
#include "backend/cuda/gemm/cublaslt_gemm.h"
#include "backend/cuda/gemm/cublaslt_library.h"

#include <algorithm>
#include <cstddef>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/host/gemm_layout.h"
#include "backend/cuda/kernels/elementwise.h"
#include "core/error.h"

namespace tripod::cuda {
namespace {

// The cuBLASLt types of one supported combination (backend.h's table).
struct GemmTypes {
  cublasComputeType_t compute;
  cudaDataType_t scale, ab, c;
};

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::F32: return CUDA_R_32F;
    case DType::F64: return CUDA_R_64F;
    case DType::BF16: return CUDA_R_16BF;
    default: fail("gemm: no cuBLASLt type for ", dtype_name(t));
  }
}

GemmTypes gemm_types(DType ab, DType c, DType accumulate, bool fp32_on_tf32) {
  const bool fp32 = ab == DType::F32 && c == DType::F32 && accumulate == DType::F32;
  const bool fp64 = ab == DType::F64 && c == DType::F64 && accumulate == DType::F64;
  const bool bf16_in = ab == DType::BF16 && (c == DType::F32 || c == DType::BF16) && accumulate == DType::F32;
  if (!(fp32 || fp64 || bf16_in))
    fail("gemm: unsupported combination A/B ", dtype_name(ab), ", C ", dtype_name(c), ", accumulate ",
         dtype_name(accumulate), " (backend.h lists the supported ones)");
  if (fp64) return {CUBLAS_COMPUTE_64F, CUDA_R_64F, CUDA_R_64F, CUDA_R_64F};
  const cublasComputeType_t compute = fp32 && fp32_on_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  return {compute, CUDA_R_32F, cuda_type(ab), cuda_type(c)};
}

// Owners of cuBLASLt descriptors: destroyed on every path, the error paths included.
struct MatmulDesc {
  cublasLtMatmulDesc_t desc = nullptr;
  MatmulDesc(cublasComputeType_t compute, cudaDataType_t scale) {
    check_cublas(cublaslt().desc_create(&desc, compute, scale), "cublasLtMatmulDescCreate");
  }
  ~MatmulDesc() { cublaslt().desc_destroy(desc); }
  MatmulDesc(const MatmulDesc&) = delete;
  MatmulDesc& operator=(const MatmulDesc&) = delete;
  void set_transpose(cublasLtMatmulDescAttributes_t attribute, bool transposed) {
    const cublasOperation_t op = transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
    check_cublas(cublaslt().desc_set_attribute(desc, attribute, &op, sizeof op), "cublasLtMatmulDescSetAttribute");
  }
  // The bias epilogue: an fp32 vector as long as cuBLASLt's (column-major) D has rows, which are
  // the row-major C's columns, added to every column of D. False where cuBLASLt refuses one of its
  // attributes (the caller then declines the epilogue, as for a problem with no algorithm).
  bool set_bias(const float* bias) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    const cudaDataType_t type = CUDA_R_32F;
    return cublaslt().desc_set_attribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue) ==
               CUBLAS_STATUS_SUCCESS &&
           cublaslt().desc_set_attribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias) ==
               CUBLAS_STATUS_SUCCESS &&
           cublaslt().desc_set_attribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &type, sizeof type) ==
               CUBLAS_STATUS_SUCCESS;
  }
};

struct MatrixLayout {
  cublasLtMatrixLayout_t layout = nullptr;
  MatrixLayout(cudaDataType_t type, const LtMatrix& m, int64_t batch_count) {
    check_cublas(cublaslt().layout_create(&layout, type, static_cast<uint64_t>(m.rows),
                                            static_cast<uint64_t>(m.cols), m.ld),
                 "cublasLtMatrixLayoutCreate");
    if (batch_count == 1) return;
    // A strided batch: every layout of the call carries the count (cuBLASLt requires them equal)
    // and its own stride, in the attributes' types (int32_t count, int64_t stride in elements).
    const int32_t count = static_cast<int32_t>(batch_count);
    const int64_t stride = m.batch_stride;
    try {
      check_cublas(cublaslt().layout_set_attribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count),
                   "cublasLtMatrixLayoutSetAttribute (batch count)");
      check_cublas(cublaslt().layout_set_attribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                   sizeof stride),
                   "cublasLtMatrixLayoutSetAttribute (batch stride)");
    } catch (...) {
      cublaslt().layout_destroy(layout);  // the destructor does not run for a throwing constructor
      throw;
    }
  }
  ~MatrixLayout() { cublaslt().layout_destroy(layout); }
  MatrixLayout(const MatrixLayout&) = delete;
  MatrixLayout& operator=(const MatrixLayout&) = delete;
};

struct Preference {
  cublasLtMatmulPreference_t pref = nullptr;
  Preference() { check_cublas(cublaslt().preference_create(&pref), "cublasLtMatmulPreferenceCreate"); }
  ~Preference() { cublaslt().preference_destroy(pref); }
  Preference(const Preference&) = delete;
  Preference& operator=(const Preference&) = delete;
  template <typename V>
  void set(cublasLtMatmulPreferenceAttributes_t attribute, V value) {
    check_cublas(cublaslt().preference_set_attribute(pref, attribute, &value, sizeof value),
                 "cublasLtMatmulPreferenceSetAttribute");
  }
};

// The problem in words, for every error: which GEMM of the step it is shows in its sizes.
std::string describe(const CublasLtGemm& g, const GemmTypes& types) {
  return str_cat("m = ", g.n, ", n = ", g.m, ", k = ", g.k, " (row-major; cuBLASLt op A ", g.trans_lt_a ? "T" : "N",
                 ", op B ", g.trans_lt_b ? "T" : "N", "), cudaDataType A/B ", static_cast<int>(types.ab), ", C ",
                 static_cast<int>(types.c), ", compute type ", static_cast<int>(types.compute), ", leading dimensions ",
                 g.a_layout.ld, "/", g.b_layout.ld, "/", g.c_layout.ld, ", alignments ", g.a_layout.alignment_bytes,
                 "/", g.b_layout.alignment_bytes, "/", g.c_layout.alignment_bytes, " bytes",
                 g.batch_count > 1 ? str_cat(", a batch of ", g.batch_count, " (strides ", g.a_layout.batch_stride,
                                             "/", g.b_layout.batch_stride, "/", g.c_layout.batch_stride, ")")
                                   : std::string());
}

// The heuristic's choice depends only on these, so it is asked once per distinct problem (the
// training step repeats the same few shapes) and reused: the query costs more than a small GEMM.
// The device and workspace size are part of the key because a handle's address can be reused by
// a later backend on another device (another architecture) or with a smaller workspace.
// The last element: the bias pointer's alignment with the bias epilogue (the heuristic reads the
// pointer for it, cublasLt.h), 0 without one. "No algorithm" is cached as nullopt; where the
// caller may decline (the bias epilogue, a C read apart from D) it is an answer, else an error.
using AlgoKey = std::tuple<int, cublasLtHandle_t, std::size_t, int, int, int, int, bool, bool, int64_t, int64_t,
                           int64_t, int64_t, int64_t, int64_t, uint32_t, uint32_t, uint32_t, int64_t, int64_t,
                           int64_t, int64_t, uint32_t>;

std::optional<cublasLtMatmulAlgo_t> choose_algo(const CudaContext& ctx, const GemmTypes& types, const CublasLtGemm& g,
                                                const MatmulDesc& desc, const MatrixLayout& a, const MatrixLayout& b,
                                                const MatrixLayout& c, const float* bias, bool may_decline) {
  static std::mutex mutex;
  static std::map<AlgoKey, std::optional<cublasLtMatmulAlgo_t>> chosen;
  const uint32_t bias_alignment = bias != nullptr ? gemm_alignment_bytes(bias, 0, sizeof(float)) : 0;
  const AlgoKey key{ctx.device, ctx.lt, ctx.workspace_bytes, types.compute, types.scale, types.ab, types.c,
                    g.trans_lt_a, g.trans_lt_b, g.m, g.n, g.k, g.a_layout.ld, g.b_layout.ld, g.c_layout.ld,
                    g.a_layout.alignment_bytes, g.b_layout.alignment_bytes, g.c_layout.alignment_bytes,
                    g.batch_count, g.a_layout.batch_stride, g.b_layout.batch_stride, g.c_layout.batch_stride,
                    bias_alignment};
  std::lock_guard<std::mutex> lock(mutex);
  auto no_algorithm = [&]() -> std::optional<cublasLtMatmulAlgo_t> {
    if (may_decline) return std::nullopt;
    fail("gemm: cuBLASLt has no algorithm for ", describe(g, types),
         " (run with CUBLASLT_LOG_LEVEL=2 for cuBLASLt's own reason)");
  };
  if (auto it = chosen.find(key); it != chosen.end()) return it->second ? it->second : no_algorithm();
  Preference pref;
  pref.set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, static_cast<uint64_t>(ctx.workspace_bytes));
  pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, g.a_layout.alignment_bytes);
  pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, g.b_layout.alignment_bytes);
  pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, g.c_layout.alignment_bytes);
  pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, g.c_layout.alignment_bytes);
  // Split-K only with partial sums kept in the compute type and reduced in a separate pass: the
  // in-place scheme adds them into C in C's type (a bf16 C rounded once per part, not once, as
  // the backend promises and the CPU emulation does), as does the output-type scheme.
  pref.set(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, static_cast<uint32_t>(CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status = cublaslt().algo_get_heuristic(ctx.lt, desc.desc, a.layout, b.layout, c.layout,
                                                               c.layout, pref.pref, 1, &result, &found);
  // "Nothing fits" comes back as NOT_SUPPORTED, or as success with no result (or a result whose own
  // state is not success, which cublasLt.h asks to inspect): either way say which problem. Where
  // the caller may decline, INVALID_VALUE ("an impossible configuration": an epilogue or a C apart
  // from D this cuBLASLt does not take) is that answer too; nothing has been written.
  const bool none = status == CUBLAS_STATUS_NOT_SUPPORTED || (may_decline && status == CUBLAS_STATUS_INVALID_VALUE) ||
                    (status == CUBLAS_STATUS_SUCCESS && (found == 0 || result.state != CUBLAS_STATUS_SUCCESS));
  if (none) {
    chosen.emplace(key, std::nullopt);
    return no_algorithm();
  }
  check_cublas(status, str_cat("cublasLtMatmulAlgoGetHeuristic for ", describe(g, types)).c_str());
  chosen.emplace(key, result.algo);
  return result.algo;
}

// C = beta * C for an empty product (k == 0), run by run, the padding untouched.
void scale_c(const CublasLtGemm& g, DType c_dtype, const CudaContext& ctx) {
  const ScaleRuns runs = scale_c_runs(g);
  for (int64_t i = 0; i < g.batch_count; ++i)
    for (int64_t r = 0; r < runs.runs; ++r) {
      const int64_t offset = i * g.c_layout.batch_stride + r * runs.stride;
      if (c_dtype == DType::F32)
        cuda::scale(static_cast<float*>(g.c) + offset, runs.run_length, g.beta, ctx);
      else if (c_dtype == DType::F64)
        cuda::scale(static_cast<double*>(g.c) + offset, runs.run_length, g.beta, ctx);
      else
        fail("gemm: k = 0 with a ", dtype_name(c_dtype), " C and beta = ", g.beta,
             " (an empty product scaling a bf16 C) is not supported");
    }
}

// C = 0 for an empty product with beta == 0 (all-zero bits are +0 in fp32, fp64 and bf16), run by
// run, the padding untouched.
void zero_c(const CublasLtGemm& g, DType c_dtype, const CudaContext& ctx) {
  const ScaleRuns runs = scale_c_runs(g);
  const std::size_t element = dtype_size(c_dtype);
  for (int64_t i = 0; i < g.batch_count; ++i)
    check_cuda(cudaMemset2DAsync(static_cast<char*>(g.c) + i * g.c_layout.batch_stride * element,
                                 static_cast<std::size_t>(runs.stride) * element, 0,
                                 static_cast<std::size_t>(runs.run_length) * element,
                                 static_cast<std::size_t>(runs.runs), ctx.stream),
               "cudaMemset2DAsync (gemm: k = 0, beta = 0)");
}

}  // namespace

bool gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const void* a, int64_t lda,
          const void* b, int64_t ldb, DType ab, double beta, void* c, int64_t ldc, DType c_dtype, DType accumulate,
          bool fp32_on_tf32, const CudaContext& ctx, const float* bias, const void* c_in) {
  const RowMajorGemm call{trans_a, trans_b, m, n, k, alpha, beta, a, lda, b, ldb, c, ldc, dtype_size(ab),
                          dtype_size(c_dtype)};
  return gemm(call, ab, c_dtype, accumulate, fp32_on_tf32, ctx, bias, c_in);
}

bool gemm(const RowMajorGemm& call, DType ab, DType c_dtype, DType accumulate, bool fp32_on_tf32,
          const CudaContext& ctx, const float* bias, const void* c_in) {
  const GemmTypes types = gemm_types(ab, c_dtype, accumulate, fp32_on_tf32);
  if (call.ab_element_bytes != dtype_size(ab) || call.c_element_bytes != dtype_size(c_dtype))
    fail("gemm: element sizes ", call.ab_element_bytes, "/", call.c_element_bytes, " do not match ",
         dtype_name(ab), "/", dtype_name(c_dtype));
  CublasLtGemm g = map_row_major_gemm(call, "gemm");
  if (c_in != nullptr) {
    if (g.work != GemmWork::Matmul)
      fail("gemm: a C read apart from D needs a product (m, n, k > 0), not ", describe(g, types));
    // The chosen algorithm may rely on C's alignment: the lesser of the two matrices'.
    g.c_layout.alignment_bytes =
        std::min(g.c_layout.alignment_bytes, gemm_alignment_bytes(c_in, g.c_layout.ld, call.c_element_bytes));
  }
  if (g.work == GemmWork::Nothing) return false;
  if (g.work == GemmWork::ScaleC) return scale_c(g, c_dtype, ctx), false;
  if (g.work == GemmWork::ZeroC) return zero_c(g, c_dtype, ctx), false;

  MatmulDesc desc(types.compute, types.scale);
  desc.set_transpose(CUBLASLT_MATMUL_DESC_TRANSA, g.trans_lt_a);
  desc.set_transpose(CUBLASLT_MATMUL_DESC_TRANSB, g.trans_lt_b);
  const MatrixLayout a_layout(types.ab, g.a_layout, g.batch_count), b_layout(types.ab, g.b_layout, g.batch_count),
      c_layout(types.c, g.c_layout, g.batch_count);
  std::optional<cublasLtMatmulAlgo_t> algo;
  if (bias_epilogue_applies(call, bias, c_in == nullptr)) {
    if (desc.set_bias(bias)) algo = choose_algo(ctx, types, g, desc, a_layout, b_layout, c_layout, bias, true);
    if (!algo && c_dtype == DType::BF16)
      throw NoBf16BiasEpilogue("gemm: cuBLASLt has no algorithm with an fp32 bias epilogue into a bf16 D for " +
                               describe(g, types));
    if (!algo) {  // none with the epilogue: the plain product, the caller adds the bias
      const cublasLtEpilogue_t plain = CUBLASLT_EPILOGUE_DEFAULT;
      check_cublas(cublaslt().desc_set_attribute(desc.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &plain, sizeof plain),
                   "cublasLtMatmulDescSetAttribute (epilogue)");
      bias = nullptr;
    }
  } else if (bias != nullptr && c_dtype == DType::BF16) {
    throw NoBf16BiasEpilogue("gemm: an fp32 bias into a bf16 D takes the epilogue only for one product, alpha 1, "
                             "beta 0, the bias 16-byte aligned: " + describe(g, types));
  } else {
    bias = nullptr;
  }
  if (!algo) algo = choose_algo(ctx, types, g, desc, a_layout, b_layout, c_layout, nullptr, c_in != nullptr);
  // Nothing written yet: the caller computes D = A B (+ bias) + C its own way.
  if (!algo)
    throw NoAlgorithmWithSeparateC("gemm: cuBLASLt has no algorithm reading C apart from D for " +
                                   describe(g, types));
  // alpha and beta in the scale type, read from the host (the default pointer mode).
  const float alpha32 = static_cast<float>(g.alpha), beta32 = static_cast<float>(g.beta);
  const bool fp64 = types.scale == CUDA_R_64F;
  const void* alpha_ptr = fp64 ? static_cast<const void*>(&g.alpha) : &alpha32;
  const void* beta_ptr = fp64 ? static_cast<const void*>(&g.beta) : &beta32;
  const cublasStatus_t status = cublaslt().matmul(ctx.lt, desc.desc, alpha_ptr, g.lt_a, a_layout.layout, g.lt_b,
                                               b_layout.layout, beta_ptr, c_in != nullptr ? c_in : g.c,
                                               c_layout.layout, g.c, c_layout.layout,
                                               &*algo, ctx.workspace, ctx.workspace_bytes, ctx.stream);
  // The message (with the problem's sizes) is built only on failure: a step makes thousands of calls.
  // An fp32 bias into a bf16 D is not among the pairs cublasLt.h documents: its refusal may come as
  // NOT_SUPPORTED or as INVALID_VALUE ("an impossible configuration"); either way nothing was written.
  if ((status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_INVALID_VALUE) && bias != nullptr &&
      c_dtype == DType::BF16)
    throw NoBf16BiasEpilogue(str_cat(
        "gemm: cublasLtMatmul refused an fp32 bias epilogue into a bf16 D (",
        status == CUBLAS_STATUS_NOT_SUPPORTED ? "CUBLAS_STATUS_NOT_SUPPORTED" : "CUBLAS_STATUS_INVALID_VALUE", ") for ",
        describe(g, types)));
  if (status != CUBLAS_STATUS_SUCCESS)
    check_cublas(status, str_cat("cublasLtMatmul for ", describe(g, types), bias ? " with the bias epilogue" : "")
                             .c_str());
  return bias != nullptr;
}

}  // namespace tripod::cuda
