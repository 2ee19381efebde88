#include "backend/cuda/host/gemm_layout.h"

#include <algorithm>
#include <limits>

#include "core/dtype.h"
#include "core/error.h"

namespace tripod::cuda {
namespace {

constexpr uint32_t kMaxUsefulAlignment = 256;  // cuBLASLt's default preference: more promises nothing

// The stored row-major shape of an operand: op(X) is [rows_op, cols_op]; stored transposed it is
// [cols_op, rows_op].
struct StoredRowMajor {
  int64_t rows = 0, row_length = 0;
};
StoredRowMajor stored(bool transposed, int64_t rows_op, int64_t cols_op) {
  return transposed ? StoredRowMajor{cols_op, rows_op} : StoredRowMajor{rows_op, cols_op};
}

void check_leading_dimension(const char* op, const char* operand, const char* ld_name, StoredRowMajor s, int64_t ld,
                             bool transposed, const RowMajorGemm& g) {
  if (ld < s.row_length)
    fail(op, ": ", ld_name, " = ", ld, " is less than the row length ", s.row_length, " of ", operand, " stored as [",
         s.rows, ", ", s.row_length, "]", transposed ? " (transposed)" : "", " for m = ", g.m, ", n = ", g.n,
         ", k = ", g.k);
}

// A stored row-major [rows, row_length] matrix, read column-major: [row_length, rows], same ld;
// in a batch, every matrix's start is `batch_stride` elements after the previous one's.
LtMatrix column_major_view(StoredRowMajor s, const void* address, int64_t ld, std::size_t element_bytes,
                           int64_t batch_count, int64_t batch_stride) {
  const int64_t stride = batch_count > 1 ? batch_stride : 0;
  // The stride's bytes join the leading dimension's: the power of two dividing both divides every start.
  const uint32_t column_alignment = gemm_alignment_bytes(address, ld, element_bytes);
  const uint32_t batch_alignment = gemm_alignment_bytes(nullptr, stride, element_bytes);
  return LtMatrix{s.row_length, s.rows, ld, std::min(column_alignment, batch_alignment), stride};
}

}  // namespace

uint32_t gemm_alignment_bytes(const void* address, int64_t ld, std::size_t element_bytes) {
  // Column starts are address + j * ld * element_bytes: the power of two dividing both divides all.
  const uint64_t bits = reinterpret_cast<uintptr_t>(address) | static_cast<uint64_t>(ld) * element_bytes |
                        kMaxUsefulAlignment;
  return static_cast<uint32_t>(bits & (~bits + 1));  // the lowest set bit
}

int64_t padded_leading_dimension(int64_t row_length, std::size_t element_bytes) {
  const auto per_boundary = static_cast<int64_t>(kTensorCoreAlignmentBytes / element_bytes);
  if (per_boundary <= 1) return row_length;  // elements of 16 bytes or more: any length aligns
  return (row_length + per_boundary - 1) / per_boundary * per_boundary;
}

OperandCopyShape operand_copy_shape(int64_t rows, int64_t cols) {
  constexpr std::size_t kBf16Bytes = 2;
  return {rows, cols, padded_leading_dimension(rows, kBf16Bytes), padded_leading_dimension(cols, kBf16Bytes)};
}

int64_t gemm_operand_span(int64_t rows, int64_t row_length, int64_t ld) {
  return rows == 0 || row_length == 0 ? 0 : (rows - 1) * ld + row_length;
}

CublasLtGemm map_row_major_gemm(const RowMajorGemm& g, const char* op) {
  if (g.m < 0 || g.n < 0 || g.k < 0) fail(op, ": negative size m = ", g.m, ", n = ", g.n, ", k = ", g.k);
  if (g.ab_element_bytes == 0 || g.c_element_bytes == 0)
    fail(op, ": element sizes of A/B (", g.ab_element_bytes, ") and C (", g.c_element_bytes, ") must be positive");
  const StoredRowMajor a = stored(g.trans_a, g.m, g.k);  // op(A) is [m, k]
  const StoredRowMajor b = stored(g.trans_b, g.k, g.n);  // op(B) is [k, n]
  const StoredRowMajor c{g.m, g.n};
  check_leading_dimension(op, "A", "lda", a, g.lda, g.trans_a, g);
  check_leading_dimension(op, "B", "ldb", b, g.ldb, g.trans_b, g);
  check_leading_dimension(op, "C", "ldc", c, g.ldc, false, g);
  if (g.batch_count < 0 || g.batch_count > std::numeric_limits<int32_t>::max())
    fail(op, ": batch count ", g.batch_count, " is outside cuBLASLt's [0, 2^31 - 1]");
  if (g.batch_count > 1) {
    if (g.stride_a < 0 || g.stride_b < 0 || g.stride_c < 0)
      fail(op, ": negative batch stride (A ", g.stride_a, ", B ", g.stride_b, ", C ", g.stride_c, ")");
    const int64_t c_span = gemm_operand_span(c.rows, c.row_length, g.ldc);
    if (g.stride_c < c_span)
      fail(op, ": the batch's C matrices overlap: stride_c = ", g.stride_c, " is less than C's span ", c_span,
           " ([", g.m, ", ", g.n, "], ldc = ", g.ldc, ") over a batch of ", g.batch_count);
  }

  CublasLtGemm lt;
  lt.alpha = g.alpha;
  lt.beta = g.beta;
  lt.c = g.c;
  // C^T[n,m] = op(B)^T[n,k] @ op(A)^T[k,m], column-major: B first, then A; transposes kept.
  lt.lt_a_is_callers_b = true;
  lt.lt_a = g.b;
  lt.lt_b = g.a;
  lt.trans_lt_a = g.trans_b;
  lt.trans_lt_b = g.trans_a;
  lt.m = g.n;
  lt.n = g.m;
  lt.k = g.k;
  lt.batch_count = g.batch_count;
  lt.a_layout = column_major_view(b, g.b, g.ldb, g.ab_element_bytes, g.batch_count, g.stride_b);
  lt.b_layout = column_major_view(a, g.a, g.lda, g.ab_element_bytes, g.batch_count, g.stride_a);
  lt.c_layout = column_major_view(c, g.c, g.ldc, g.c_element_bytes, g.batch_count, g.stride_c);

  if (g.m == 0 || g.n == 0 || g.batch_count == 0) {
    lt.work = GemmWork::Nothing;  // as OpenBLAS: no element of C exists, nothing is read
  } else if (g.k == 0) {
    // The empty sum: C = beta * C; with beta == 0, BLAS sets C to zero without reading it, so a
    // recycled buffer's NaN or infinity does not survive into the result.
    lt.work = g.beta == 1 ? GemmWork::Nothing : g.beta == 0 ? GemmWork::ZeroC : GemmWork::ScaleC;
  } else {
    lt.work = GemmWork::Matmul;
  }
  return lt;
}

ScaleRuns scale_c_runs(const CublasLtGemm& g) {
  const LtMatrix& c = g.c_layout;
  // Columns back to back (ld == rows, or a single column): one contiguous run, one launch.
  if (c.ld == c.rows || c.cols == 1) return ScaleRuns{1, c.rows * c.cols, c.rows * c.cols};
  return ScaleRuns{c.cols, c.rows, c.ld};
}

bool bias_epilogue_applies(const RowMajorGemm& call, const void* bias, bool same_bits_as_separate) {
  const bool alone = call.alpha == 1.0 && call.beta == 0.0;
  const bool c_takes_it =
      call.c_element_bytes == sizeof(float) || (call.c_element_bytes == dtype_size(DType::BF16) && alone);
  return bias != nullptr && c_takes_it && (!same_bits_as_separate || alone) && call.batch_count == 1 && call.m > 0 &&
         call.n > 0 && call.k > 0 && reinterpret_cast<std::uintptr_t>(bias) % kTensorCoreAlignmentBytes == 0;
}

}  // namespace tripod::cuda
