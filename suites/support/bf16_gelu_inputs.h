// The GELU calls from bf16-mixed's bf16 pre-activation fc and gradient of gelu(fc)
// (Gpt::rounded_activation_dtype) against the same calls on their fp32 widenings: the backends read
// bf16 inputs as the fp32 values they hold, so every result must be bit for bit the same, with the
// same dtype and shape. Shared by the CPU backends' test (test_operand_producers.cpp) and the
// GPU's (test_cuda_backend.cpp).
#pragma once
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "backend/backend.h"
#include "backend/transfer.h"

namespace tripod::testing {

// x16 and dout16 bf16, x32 and dout32 their exact fp32 widenings, dout any fp32 gradient, all of
// one shape; `bias(k)` makes the k-th of two equal fresh bias gradients (or undefined tensors, for
// none). `what` names the case in failures.
template <class MakeBias>
void expect_bf16_gelu_inputs_give_their_widenings_bits(Backend& be, const Tensor& x16, const Tensor& x32,
                                                        const Tensor& dout, const Tensor& dout16, const Tensor& dout32,
                                                        MakeBias&& bias, const std::string& what) {
  auto same = [&](const Tensor& got, const Tensor& want, const char* op) {
    EXPECT_EQ(got.dtype(), want.dtype()) << what << ": " << op;
    EXPECT_EQ(got.shape(), want.shape()) << what << ": " << op;
    EXPECT_EQ(to_host_f64(be, got), to_host_f64(be, want)) << what << ": " << op;
  };
  auto gelu = [&](const Tensor& x) {
    Tensor out = be.alloc(x.shape(), DType::F32);
    be.gelu_forward(out, x);
    return out;
  };
  auto gelu_grad = [&](const Tensor& x, const Tensor& dy) {
    Tensor d = be.alloc(x.shape(), DType::F32);
    be.gelu_backward(d, x, dy);
    return d;
  };
  same(gelu(x16), gelu(x32), "gelu_forward");
  same(gelu_grad(x16, dout), gelu_grad(x32, dout), "gelu_backward");
  same(gelu_grad(x16, dout16), gelu_grad(x32, dout32), "gelu_backward, bf16 dout");
  same(be.gelu_operand(x16), be.gelu_operand(x32), "gelu_operand");
  for (const auto& [dy16, dy32] : {std::pair{dout, dout}, std::pair{dout16, dout32}}) {
    const Tensor got_db = bias(0), want_db = bias(1);
    const char* op = dy16.dtype() == DType::BF16 ? "gelu_backward_operand, bf16 dout" : "gelu_backward_operand";
    same(be.gelu_backward_operand(x16, dy16, got_db), be.gelu_backward_operand(x32, dy32, want_db), op);
    if (got_db.defined()) same(got_db, want_db, op);
  }
}

}  // namespace tripod::testing
