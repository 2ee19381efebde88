// Calls fn(T{}) with T = float or double, the floating dtype of a CUDA operation; bf16 only where
// an operation states it (dispatch_float_or_bf16). Other dtypes are an error naming the op.
#pragma once
#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"

namespace tripod::cuda {

template <typename Fn>
void dispatch_float(DType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case DType::F32: fn(float{}); return;
    case DType::F64: fn(double{}); return;
    default: fail(op, ": the CUDA backend runs this operation in fp32 or fp64, not ", dtype_name(dtype));
  }
}

template <typename Fn>
void dispatch_float_or_bf16(DType dtype, const char* op, Fn&& fn) {
  if (dtype == DType::BF16) return fn(bf16{});
  dispatch_float(dtype, op, fn);
}

// Operands that must share a dtype (a GEMM's A and B, a copy's two ends).
inline void require_same_dtype(const Tensor& a, const Tensor& b, const char* op) {
  if (a.dtype() != b.dtype()) fail(op, ": dtype mismatch (", a.describe(), " vs ", b.describe(), ")");
}

}  // namespace tripod::cuda
