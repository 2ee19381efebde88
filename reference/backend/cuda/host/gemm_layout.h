// The Backend's row-major GEMM as the column-major call cuBLASLt makes, as a pure host function:
// no CUDA header, so the mapping is unit-tested on any machine (suites/unit/test_gemm_layout.cpp
// runs a column-major reference GEMM on the mapped arguments and compares with OpenBLAS).
//
// The identity: a row-major matrix X[r,c] with leading dimension ld is, read column-major, the
// matrix X^T[c,r] with the same ld. So the row-major C[m,n] = op(A)[m,k] @ op(B)[k,n] is, in
// column-major terms, C^T[n,m] = op(B)^T[n,k] @ op(A)^T[k,m]: cuBLASLt's first operand is the
// caller's B, its second the caller's A, its m and n are the caller's n and m, k stays, and each
// operand keeps its own transpose flag (a stored matrix that needed no transpose row-major needs
// none column-major either, because both the operand and the product were transposed).
//
// Everything cublaslt_gemm.cpp passes to cuBLASLt comes from CublasLtGemm (pointers, transposes,
// the layouts' rows/cols/ld, alignments, alpha and beta), so the test covers the mapping whole.
#pragma once
#include <cstddef>
#include <cstdint>

namespace tripod::cuda {

// The call as the Backend states it (backend.h): row-major, leading dimensions in elements.
struct RowMajorGemm {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  double alpha = 1, beta = 0;
  const void* a = nullptr;
  int64_t lda = 0;
  const void* b = nullptr;
  int64_t ldb = 0;
  void* c = nullptr;
  int64_t ldc = 0;
  std::size_t ab_element_bytes = 0;  // A and B share a dtype
  std::size_t c_element_bytes = 0;
  // A strided batch: `batch_count` products, product i reading A + i * stride_a, B + i * stride_b
  // and writing C + i * stride_c (strides in elements). The C matrices must not overlap (stride_c
  // at least C's span), so no element of C has two writers.
  int64_t batch_count = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
};

// One stored matrix as cublasLtMatrixLayoutCreate describes it: column-major, `rows` x `cols`,
// column j starting `ld` elements after column j - 1 (so each column is `rows` contiguous
// elements). `alignment_bytes` is the largest power of two (at most 256, cuBLASLt's default
// preference) dividing both the address and ld * element size: the alignment of every column's
// start, which is what CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES promises the kernels; in a
// batch, the batch stride's bytes divide it too (every matrix's start). `batch_stride` is
// CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET (elements; 0 when there is one product).
struct LtMatrix {
  int64_t rows = 0, cols = 0, ld = 0;
  uint32_t alignment_bytes = 0;
  int64_t batch_stride = 0;
};

// What the GEMM has to do once the sizes are known.
enum class GemmWork {
  Nothing,  // m == 0 or n == 0 (no C), or k == 0 with beta == 1 (C = C)
  ScaleC,   // k == 0: C = beta * C (cuBLASLt is not asked: an empty product is not its case)
  ZeroC,    // k == 0 with beta == 0: C = 0 without reading C, as BLAS (0 * NaN would be NaN)
  Matmul,   // D = C = alpha * op(lt_a) @ op(lt_b) + beta * C through cublasLtMatmul
};

// The cuBLASLt call: D = alpha * op(lt_a)[m,k] @ op(lt_b)[k,n] + beta * C, in place (D = C,
// described by the same layout), all matrices column-major.
struct CublasLtGemm {
  GemmWork work = GemmWork::Nothing;
  bool lt_a_is_callers_b = true;  // always, by the identity above; kept to make the swap visible
  const void* lt_a = nullptr;     // the caller's B
  const void* lt_b = nullptr;     // the caller's A
  void* c = nullptr;
  bool trans_lt_a = false, trans_lt_b = false;  // CUBLASLT_MATMUL_DESC_TRANSA / _TRANSB
  int64_t m = 0, n = 0, k = 0;                  // cuBLASLt's: the caller's n, m, k
  LtMatrix a_layout, b_layout, c_layout;        // of lt_a, lt_b and C (= D)
  double alpha = 1, beta = 0;
  int64_t batch_count = 1;  // CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT of every layout
};

// Maps the row-major call, after validating it: sizes >= 0, every leading dimension at least the
// row length of its stored row-major matrix (A: k, or m transposed; B: n, or k transposed; C: n),
// element sizes > 0; in a batch (batch_count > 1) strides >= 0 and C's matrices apart (stride_c at
// least C's span). A failure throws tripod::Error naming `op`, the operand and the sizes. An empty
// batch (batch_count == 0) is GemmWork::Nothing.
CublasLtGemm map_row_major_gemm(const RowMajorGemm& call, const char* op);

// C = beta * C (GemmWork::ScaleC) or C = 0 (ZeroC) over C's memory: `runs` contiguous runs of `run_length`
// elements, run r starting at c + r * stride: one run when C's rows lie back to back, else one per
// row-major row of C (a column of the column-major layout), stepping over the ld padding, which
// is never touched. In a batch: the same runs for each product, from c + i * c_layout.batch_stride.
struct ScaleRuns {
  int64_t runs = 0, run_length = 0, stride = 0;
};
ScaleRuns scale_c_runs(const CublasLtGemm& g);

// Whether a bias can ride on cuBLASLt's bias epilogue with the bits of a separate addition after
// the product: an fp32 C, alpha 1 and beta 0 (the epilogue adds before the one rounding of
// alpha * AB + beta * C, so only then is the product alone rounded first), one product (not a
// batch), and the bias 16-byte aligned (cuBLASLt faults on less, as other users found).
// `same_bits_as_separate` false (a residual read as C, gemm_bias_residual): any alpha and beta, the
// bias then summed with alpha * AB + beta * C before the one rounding.
// A bf16 C takes it with alpha 1 and beta 0 alone: the product plus the fp32 bias, summed in fp32
// and rounded once to bf16 (Backend::gemm_bias's bf16 c, the bits of the fp32 sum converted).
bool bias_epilogue_applies(const RowMajorGemm& call, const void* bias, bool same_bits_as_separate = true);

// The largest power of two, at most 256, that divides the address and ld * element_bytes.
uint32_t gemm_alignment_bytes(const void* address, int64_t ld, std::size_t element_bytes);

// cuBLASLt's tensor-core kernels need every matrix's columns (row-major rows) at 16-byte
// boundaries; with less (GPT-2's vocabulary of 50257 as a leading dimension) it falls back to a
// far slower kernel (measured on an H200: the LM head's three GEMMs took 17 ms of an 83 ms step).
constexpr uint32_t kTensorCoreAlignmentBytes = 16;
// The smallest leading dimension >= row_length whose rows keep that alignment (from an aligned
// start): what an aligned copy of such a matrix uses.
int64_t padded_leading_dimension(int64_t row_length, std::size_t element_bytes);

// gemm_operands' bf16 copy of an fp32 matrix [rows, cols]: [rows_padded, cols_padded], both
// rounded up to multiples of 8. The padded rows are another product's padded reduction extent (a
// linear layer's weight rows meet its output gradient's columns). A fused producer of the copy
// applies only where it is not padded.
struct OperandCopyShape {
  int64_t rows, cols, rows_padded, cols_padded;
  bool padded() const { return rows_padded != rows || cols_padded != cols; }
};
OperandCopyShape operand_copy_shape(int64_t rows, int64_t cols);

// The elements a stored row-major matrix of `rows` x `row_length` with leading dimension `ld`
// spans (0 when empty): what a tensor must hold for the GEMM to stay inside it.
int64_t gemm_operand_span(int64_t rows, int64_t row_length, int64_t ld);

}  // namespace tripod::cuda
