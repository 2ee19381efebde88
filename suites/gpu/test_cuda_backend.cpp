// The CUDA backend on a real GPU: every operation against the CPU backend, training on the
// conformance model against the CPU reference in fp64 and fp32, and a bit-identical rerun. Built
// where nvcc is found; on a machine without a usable GPU every test is SKIPPED with the reason
// (CTest reports them as skipped, never as passed).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend_factory.h"
#include "backend/check/backend_check.h"
#include "backend/kernels/bf16_math.h"
#include "backend/transfer.h"
#include "conform/conformance.h"
#include "support/bf16_gelu_inputs.h"
#include "support/error_text.h"

namespace tripod {
namespace {

// The CUDA backend, or a skip naming why there is none.
std::unique_ptr<Backend> cuda_or_skip(std::string& reason) {
  try {
    return make_backend("cuda");
  } catch (const Error& e) {
    reason = e.what();
    return nullptr;
  }
}

#define REQUIRE_GPU(backend)                          \
  std::string reason;                                 \
  auto backend = cuda_or_skip(reason);                \
  if (!backend) GTEST_SKIP() << "no GPU: " << reason

// For the tests of a fused kernel against the separate ones it replaces: with TRIPOD_CUDA_FUSIONS
// narrowed (the backend's name then lists them) the "fused" call may itself be the separate kernels.
#define REQUIRE_EVERY_FUSION(backend)                                                       \
  if ((backend)->name().find("fusions:") != std::string::npos)                            \
  GTEST_SKIP() << "TRIPOD_CUDA_FUSIONS narrows the fused forms this test compares: " << (backend)->name()

TEST(CudaBackend, EveryOperationMatchesTheCpuBackend) {
  REQUIRE_GPU(cuda);
  auto cpu = make_backend("cpu");
  for (const auto& r : backend_check::check_backend(*cuda, *cpu, backend_check::all_op_cases({DType::F64, DType::F32, DType::BF16})))
    EXPECT_TRUE(r.pass) << r.op << " " << dtype_name(r.dtype) << " " << r.shape << ": max rel " << r.max_rel
                        << " (bound " << r.bound << ", worst output " << r.worst_output << ") " << r.error;
}

// Ten steps of the conformance model (tied head, clipping, ignored targets) on the GPU and on the
// CPU from the same initialisation: fp64 within 1e-10, fp32 and bf16-mixed (tensor-core GEMMs on
// the GPU, their emulation on the CPU up to the order of the sums) within conform's bounds for them.
TEST(CudaBackend, TrainingMatchesTheCpuReference) {
  REQUIRE_GPU(cuda);
  auto cpu = make_backend("cpu");
  for (const char* dtype : {"fp64", "fp32", "bf16-mixed"}) {
    const RunConfig config = conform::default_conformance_config(dtype);
    const conform::Trajectory ref = conform::run_single_device(config, 10, *cpu);
    const conform::Trajectory got = conform::run_single_device(config, 10, *cuda);
    conform::RoundingFloor floor;
    if (std::string(dtype) != "fp64") {  // fp32, bf16-mixed: against the CPU run's distance from fp64
      nlohmann::json j = config.json;
      j["train"]["dtype"] = "fp64";
      floor = conform::rounding_floor(ref, conform::run_single_device(parse_run_config(j), 10, *cpu));
    }
    const conform::Errors e = conform::compare(got, ref, config, floor);
    EXPECT_TRUE(e.pass) << dtype << ": " << e.failure << " (loss rel " << e.loss_rel << ", parameter rel "
                        << e.param_rel << " in " << e.worst_param << ")";
  }
}

// The memory pool keeps what is freed. With the device full of 1 GiB tensors and every other one
// freed, a 2 GiB tensor fits only once the pool gives the freed pieces back (alloc trims the pool
// and retries); and the allocation that finds the device full fails naming what the pool holds.
TEST(CudaBackend, ALargeTensorFitsWhereSmallerFreedOnesWere) {
  REQUIRE_GPU(cuda);
  constexpr int64_t kGiBFloats = int64_t(1) << 28;
  std::vector<Tensor> chunks;
  std::string full;
  for (int i = 0; i < 1024 && full.empty(); ++i) {
    full = error_of([&] { chunks.push_back(cuda->alloc({kGiBFloats}, DType::F32)); });
    if (full == "no error") full.clear();
  }
  ASSERT_GE(chunks.size(), 4u) << full;
  EXPECT_NE(full.find("out of CUDA device memory allocating 1073741824 bytes"), std::string::npos) << full;
  EXPECT_NE(full.find("after giving back what it could"), std::string::npos) << full;
  for (std::size_t i = 0; i < chunks.size(); i += 2) chunks[i] = Tensor();
  EXPECT_EQ(error_of([&] { cuda->alloc({2 * kGiBFloats}, DType::F32); }), "no error");
  chunks.clear();
  cuda->synchronize();
}

// bf16-mixed's pre-activation fc is bf16 (Gpt::rounded_activation_dtype), and the gradient of
// gelu(fc) too: the GELU kernels read them as the fp32 values they hold, so each result has the
// bits of the same kernel on their fp32 widenings, on the device (check-backend compares them with
// the CPU within bounds). Aligned views take the four-wide kernels; views one element in, the
// one-element ones.
TEST(CudaBackend, TheGeluOfBf16InputsHasTheBitsOfTheirFp32Values) {
  REQUIRE_GPU(cuda);
  cuda->set_fp32_matmul(Fp32Matmul::Bf16Operands);
  const int64_t rows = 64, cols = 3072, n = rows * cols;
  std::vector<double> values(static_cast<std::size_t>(n + 1)), grads(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    values[i] = 6.0 * std::sin(0.37 * static_cast<double>(i));
    grads[i] = std::cos(0.11 * static_cast<double>(i));
  }
  const Tensor x16_all = cuda->alloc({n + 1}, DType::BF16), x32_all = cuda->alloc({n + 1}, DType::F32);
  const Tensor dout_all = cuda->alloc({n + 1}, DType::F32);
  from_host_f64(*cuda, values, x32_all);
  cuda->convert(x32_all, x16_all);
  cuda->convert(x16_all, x32_all);  // exact
  from_host_f64(*cuda, grads, dout_all);
  const Tensor dout16_all = cuda->alloc({n + 1}, DType::BF16), dout32_all = cuda->alloc({n + 1}, DType::F32);
  cuda->convert(dout_all, dout16_all);
  cuda->convert(dout16_all, dout32_all);  // exact
  for (int64_t offset : {0, 1}) {
    auto at = [&](const Tensor& t) { return t.view(offset, {rows, cols}); };
    const Tensor x16 = at(x16_all), x32 = at(x32_all), dout = at(dout_all);
    const Tensor dout16 = at(dout16_all), dout32 = at(dout32_all);
    auto bias = [&](int) { return cuda->alloc({cols}, DType::F32); };
    testing::expect_bf16_gelu_inputs_give_their_widenings_bits(*cuda, x16, x32, dout, dout16, dout32, bias,
                                                                "offset " + std::to_string(offset));
  }
}

// A training forward's loss with its gradient in one kernel (cuda::cross_entropy_with_gradient)
// against the separate kernels (Backend's default: logits_stats' one pass, the losses, the
// gradient): the same reduction and arithmetic, so the same bits, at GPT-2's vocabulary padded as
// the trainer pads it, with ignored targets and the last column's, in fp64, fp32 and bf16 logits.
TEST(CudaBackend, TheLossWithItsGradientInOneKernelHasTheSeparateKernelsBits) {
  REQUIRE_GPU(cuda);
  REQUIRE_EVERY_FUSION(cuda);
  const int64_t rows = 300, vocab = 50257, cols = 50264;
  std::vector<double> values(static_cast<std::size_t>(rows * cols));
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = 9.0 * std::sin(0.731 * static_cast<double>(i));
  std::vector<int32_t> targets(rows);
  for (int64_t r = 0; r < rows; ++r) targets[r] = r % 7 == 3 ? -1 : static_cast<int32_t>((r * 7919) % vocab);
  targets[1] = static_cast<int32_t>(vocab - 1);
  const Tensor target_tensor = cuda->alloc({rows}, DType::I32);
  cuda->upload(targets.data(), target_tensor);
  for (DType dt : {DType::F64, DType::F32, DType::BF16}) {
    const DType stats = dt == DType::BF16 ? DType::F32 : dt;
    auto logits = [&] {
      const Tensor wide = cuda->alloc({rows, cols}, stats);
      from_host_f64(*cuda, values, wide);
      if (dt != DType::BF16) return wide;
      const Tensor rounded = cuda->alloc({rows, cols}, DType::BF16);
      cuda->convert(wide, rounded);
      return rounded;
    };
    const Tensor one = logits(), apart = logits();
    const Tensor one_losses = cuda->alloc({rows}, stats), apart_losses = cuda->alloc({rows}, stats);
    cuda->cross_entropy_with_gradient(one_losses, one, target_tensor, vocab, 1.0 / 4097);
    cuda->Backend::cross_entropy_with_gradient(apart_losses, apart, target_tensor, vocab, 1.0 / 4097);
    EXPECT_EQ(to_host_f64(*cuda, one_losses), to_host_f64(*cuda, apart_losses)) << dtype_name(dt);
    EXPECT_EQ(to_host_f64(*cuda, one), to_host_f64(*cuda, apart)) << dtype_name(dt);
  }
}

// The whole-vocabulary kernels' contract (cross_entropy.cu's header): a target the vocabulary lacks
// makes its row's loss and gradient NaN, which the trainer's finite check names, not a finite loss.
TEST(CudaBackend, TheLossWithItsGradientMakesATargetBeyondTheVocabularyNaN) {
  REQUIRE_GPU(cuda);
  REQUIRE_EVERY_FUSION(cuda);
  const int64_t rows = 3, vocab = 5, cols = 8;
  const std::vector<int32_t> targets{2, static_cast<int32_t>(vocab), -1};
  const Tensor target_tensor = cuda->alloc({rows}, DType::I32);
  cuda->upload(targets.data(), target_tensor);
  std::vector<double> values(static_cast<std::size_t>(rows * cols));
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = 0.25 * static_cast<double>(i % 5);
  for (DType dt : {DType::F64, DType::F32}) {
    const Tensor logits = cuda->alloc({rows, cols}, dt), losses = cuda->alloc({rows}, dt);
    from_host_f64(*cuda, values, logits);
    cuda->cross_entropy_with_gradient(losses, logits, target_tensor, vocab, 0.5);
    const std::vector<double> loss = to_host_f64(*cuda, losses), grad = to_host_f64(*cuda, logits);
    EXPECT_TRUE(std::isfinite(loss[0]) && loss[0] > 0) << dtype_name(dt);
    EXPECT_TRUE(std::isnan(loss[1])) << dtype_name(dt) << ": the target beyond the vocabulary gave " << loss[1];
    EXPECT_EQ(loss[2], 0.0) << dtype_name(dt);
    for (int64_t j = 0; j < cols; ++j) {
      EXPECT_EQ(std::isnan(grad[static_cast<std::size_t>(cols + j)]), j < vocab) << dtype_name(dt) << " column " << j;
      EXPECT_EQ(grad[static_cast<std::size_t>(2 * cols + j)], 0.0) << dtype_name(dt) << " column " << j;
    }
  }
}

// qkv's GEMM under flash-mma writes a bf16 C with an fp32 bias from cuBLASLt's epilogue, a pair of
// types its documentation does not list for bf16 A and B (it lists a bf16 bias): the bias must be
// added to the fp32 product before the only rounding, not read as bf16 nor added after a rounding.
// Small integers make every product and sum exact in fp32 in any order, so the expected bits are
// the host's: float(product) + bias, rounded once to bf16. check-backend's case compares within a
// bound, which a rounding too many could pass. Whichever path runs (epilogue, or the fp32 result
// and its conversion where the library declines) must give these bits.
// The elements of `be`'s result off the single rounding, with the first described (empty: none).
std::string elements_off_the_single_rounding(Backend& be) {
  const int64_t m = 64, n = 768, k = 64;
  std::vector<double> a(static_cast<std::size_t>(m * k)), w(static_cast<std::size_t>(n * k)), bias(n);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<double>(static_cast<int>((i * 7 + i / 5) % 7) - 3);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<double>(static_cast<int>((i * 5 + i / 3) % 11) - 5);
  for (std::size_t j = 0; j < bias.size(); ++j)  // full fp32 mantissas, below and above the products' size
    bias[j] = static_cast<double>(static_cast<float>(std::ldexp(std::sin(0.7 * static_cast<double>(j) + 0.1),
                                                                static_cast<int>(j % 12))));
  const Tensor a16 = be.alloc({m, k}, DType::BF16), w16 = be.alloc({n, k}, DType::BF16);
  const Tensor bias32 = be.alloc({n}, DType::F32), c16 = be.alloc({m, n}, DType::BF16);
  from_host_f64(be, a, a16);  // small integers: exact in bf16
  from_host_f64(be, w, w16);
  from_host_f64(be, bias, bias32);
  be.gemm_bias(false, true, m, n, k, a16, k, w16, k, c16, bias32, DType::F32);
  const std::vector<double> got = to_host_f64(be, c16);
  int64_t wrong = 0;
  std::string first;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double product = 0;  // exact: |product| <= 64 * 3 * 5
      for (int64_t p = 0; p < k; ++p) product += a[i * k + p] * w[j * k + p];
      const float sum = static_cast<float>(product) + static_cast<float>(bias[j]);
      const double want = kernels::bf16_bits_to_float(kernels::float_to_bf16_bits(sum));
      if (got[i * n + j] != want && wrong++ == 0)
        first = "[" + std::to_string(i) + ", " + std::to_string(j) + "] = " + std::to_string(got[i * n + j]) +
                " where bf16(" + std::to_string(product) + " + " + std::to_string(bias[j]) + ") = " + std::to_string(want);
    }
  return wrong == 0 ? "" : std::to_string(wrong) + " elements, the first " + first;
}

// qkv's GEMM under flash-mma writes a bf16 C with an fp32 bias from cuBLASLt's epilogue, a pair of
// types its documentation does not list for bf16 A and B (it lists a bf16 bias): the bias must be
// added to the fp32 product before the only rounding, not read as bf16 nor added after a rounding.
// Small integers make every product and sum exact in fp32 in any order, so the expected bits are
// the host's: float(product) + bias, rounded once to bf16. check-backend's case compares within a
// bound, which a rounding too many could pass. Whichever path runs (the epilogue, or the fp32
// result and its conversion where the library declines) must give these bits.
TEST(CudaBackend, AnFp32BiasIsAddedBeforeABf16ResultsOnlyRounding) {
  REQUIRE_GPU(cuda);
  EXPECT_EQ(elements_off_the_single_rounding(*cuda), "")
      << (cuda->library_declined().empty() ? "" : "the library declined: " + cuda->library_declined());
}

// The same check holds on the emulated device (Backend's default: the fp32 result, then its
// conversion), so the expectation above is the policy's, and this runs in CI without a GPU.
TEST(CudaBackend, TheSingleRoundingCheckHoldsOnTheEmulatedDevice) {
  auto emulated = make_backend("emulated");
  EXPECT_EQ(elements_off_the_single_rounding(*emulated), "");
}

TEST(CudaBackend, ARerunIsBitIdentical) {
  REQUIRE_GPU(cuda);
  const RunConfig config = conform::default_conformance_config("fp32");
  const conform::Trajectory a = conform::run_single_device(config, 5, *cuda);
  const conform::Trajectory b = conform::run_single_device(config, 5, *cuda);
  EXPECT_TRUE(conform::bit_identical(a, b)) << conform::first_difference(a, b);
}

}  // namespace
}  // namespace tripod
