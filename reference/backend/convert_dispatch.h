// The conversions every backend's `convert` has (backend.h): fp32 <-> fp64 and fp32/fp64 <-> bf16.
// Calls fn(From{}, To{}) with the element types of src and dst, or fails naming both tensors.
#pragma once
#include "core/error.h"
#include "core/tensor.h"

namespace tripod {

template <typename Fn>
void dispatch_conversion(const Tensor& src, const Tensor& dst, Fn&& fn) {
  const DType a = src.dtype(), b = dst.dtype();
  if (a == DType::F32 && b == DType::F64) return fn(float{}, double{});
  if (a == DType::F64 && b == DType::F32) return fn(double{}, float{});
  if (a == DType::F32 && b == DType::BF16) return fn(float{}, bf16{});
  if (a == DType::F64 && b == DType::BF16) return fn(double{}, bf16{});
  if (a == DType::BF16 && b == DType::F32) return fn(bf16{}, float{});
  if (a == DType::BF16 && b == DType::F64) return fn(bf16{}, double{});
  fail("convert: no conversion from ", src.describe(), " to ", dst.describe());
}

}  // namespace tripod
