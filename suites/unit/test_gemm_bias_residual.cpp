// The residual stream's add read by the output projections' GEMMs (Backend::gemm_bias_residual,
// LayerOps::linear_forward_residual): on the CPU and the emulated device the bits of gemm_bias and
// then add (the CUDA backend reads the residual in cuBLASLt's epilogue, checked against the CPU by
// check-backend's gemm_bias_residual cases); the model takes it for both projections of every
// block (a model that fell back to linear_forward and Backend::add would give the same bits, so
// only a count shows it); and a residual that is not C's shape, dtype or device, or that shares C's
// memory, is refused by name.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "backend/backend_factory.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/transfer.h"
#include "core/host_memory.h"
#include "model/linear.h"
#include "model_test_util.h"
#include "support/error_text.h"
#include "train/trainer.h"
#include "kernel_math_test_util.h"

namespace tripod {
namespace {

Tensor random_tensor(Backend& be, const Shape& shape, uint64_t seed, DType dtype = DType::F32) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  Tensor t = be.alloc(shape, dtype);
  from_host_f64(be, testing::uniform_values<double>(n, seed, "test.gemm_bias_residual", -1.0, 1.0), t);
  return t;
}

TEST(GemmBiasResidual, GivesTheBitsOfTheGemmThenTheResidualAdd) {
  const int64_t N = 19, O = 13, I = 23;
  for (const char* backend : {"cpu", "emulated"})
    for (DType dtype : {DType::F32, DType::F64})
      for (Fp32Matmul policy : {Fp32Matmul::Exact, Fp32Matmul::Bf16Operands})
        for (bool with_bias : {true, false}) {
          auto be = make_backend(backend);
          be->set_fp32_matmul(policy);
          const Tensor x = random_tensor(*be, {N, I}, 1, dtype), w = random_tensor(*be, {O, I}, 2, dtype);
          const Tensor bias = with_bias ? random_tensor(*be, {O}, 3, dtype) : Tensor();
          const Tensor residual = random_tensor(*be, {N, O}, 4, dtype);
          Tensor fused = be->alloc({N, O}, dtype), apart = be->alloc({N, O}, dtype);
          be->gemm_bias_residual(false, true, N, O, I, x, I, w, I, fused, bias, residual, gemm_accumulate_dtype(dtype));
          be->gemm_bias(false, true, N, O, I, x, I, w, I, apart, bias, gemm_accumulate_dtype(dtype));
          be->add(apart, apart, residual);
          EXPECT_EQ(to_host_f64(*be, fused), to_host_f64(*be, apart))
              << backend << " " << dtype_name(dtype) << (with_bias ? " with" : " without") << " a bias";
          // the layer: linear_forward with the residual, and from a prepared operand
          Tensor layer = be->alloc({N, O}, dtype), kept;
          linear_forward(*be, layer, x, w, bias, &kept, residual);
          EXPECT_EQ(to_host_f64(*be, layer), to_host_f64(*be, apart)) << backend << " linear_forward";
          if (kept.defined()) {
            Tensor from_operand = be->alloc({N, O}, dtype);
            linear_forward_from_operand(*be, from_operand, kept, w, bias, residual);
            EXPECT_EQ(to_host_f64(*be, from_operand), to_host_f64(*be, apart)) << backend << " from the operand";
          }
        }
}

TEST(GemmBiasResidual, ARefusedResidualIsNamed) {
  auto be = make_backend("cpu");
  const int64_t N = 6, O = 4, I = 8;
  const Tensor x = random_tensor(*be, {N, I}, 5), w = random_tensor(*be, {O, I}, 6);
  Tensor out = be->alloc({N, O}, DType::F32);
  auto refusal = [&](const Tensor& residual) {
    return expected_error([&] {
      be->gemm_bias_residual(false, true, N, O, I, x, I, w, I, out, Tensor(), residual, DType::F32);
    });
  };
  EXPECT_NE(refusal(Tensor()).find("the residual (none) must be 6 x 4 elements"), std::string::npos);
  EXPECT_NE(refusal(be->alloc({N, O + 1}, DType::F32)).find("must be 6 x 4 elements of C's dtype"), std::string::npos);
  EXPECT_NE(refusal(be->alloc({N, O}, DType::F64)).find("of C's dtype"), std::string::npos);
  {  // a residual in host memory for a C on the emulated device
    auto device = make_backend("emulated");
    const Tensor dx = random_tensor(*device, {N, I}, 5), dw = random_tensor(*device, {O, I}, 6);
    Tensor dout = device->alloc({N, O}, DType::F32);
    EXPECT_NE(expected_error([&] {
                device->gemm_bias_residual(false, true, N, O, I, dx, I, dw, I, dout, Tensor(),
                                           host_alloc({N, O}, DType::F32), DType::F32);
              }).find("where C (fp32 [6, 4] on the emulated device) is"),
              std::string::npos);
  }
  // C itself, or an overlapping view of C's buffer: C would be written before the residual is read
  EXPECT_NE(refusal(out).find("shares memory with C"), std::string::npos);
  Tensor wide = be->alloc({N * O + 3}, DType::F32);
  const Tensor c_view = wide.view(0, {N, O}), overlapping = wide.view(3, {N, O});
  EXPECT_NE(expected_error([&] {
              be->gemm_bias_residual(false, true, N, O, I, x, I, w, I, c_view, Tensor(), overlapping, DType::F32);
            }).find("shares memory with C"),
            std::string::npos);
  // the padded logits rows take no residual
  Tensor padded = be->alloc({N, O + 4}, DType::F32);
  EXPECT_NE(expected_error([&] { linear_forward(*be, padded, x, w, Tensor(), nullptr, random_tensor(*be, {N, O}, 7)); })
                .find("with a residual"),
            std::string::npos);
}

// Counts the fused calls of a training step.
class ResidualCountingCpuBackend final : public cpu::CpuBackend {
 public:
  ResidualCountingCpuBackend() : cpu::CpuBackend(Device::Host, "cpu") {}
  int fused = 0;
  void gemm_bias_residual(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const Tensor& a, int64_t lda,
                          const Tensor& b, int64_t ldb, const Tensor& c, const Tensor& bias, const Tensor& residual,
                          DType accumulate) override {
    ++fused;
    cpu::CpuBackend::gemm_bias_residual(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, bias, residual, accumulate);
  }
};

// Both output projections of every block add the residual in their GEMM, once per micro-batch and
// under every policy (the single-device layers; tensor-parallel ones add after their reduction).
TEST(GemmBiasResidual, ATrainingStepAddsEveryBlocksResidualsInTheProjections) {
  for (const char* dtype : {"fp32", "bf16-mixed", "fp64"}) {
    const int64_t micro = 2;
    const RunConfig config = testing::tiny_run_config(dtype, true, micro);
    ResidualCountingCpuBackend be;
    testing::train_one_step(be, config);
    EXPECT_EQ(be.fused, 2 * config.model.n_layer * micro) << dtype;
  }
}

}  // namespace
}  // namespace tripod
