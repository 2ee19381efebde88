// tripod check-backend's machinery, proved on the CPU: the emulated-device backend passes every
// case bit for bit (it runs the CPU arithmetic), and the comparison fails a wrong value, a NaN, a
// missing output and an exception - so a clean report on a GPU means something.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>

#include "backend/backend_factory.h"
#include "backend/check/backend_check.h"
#include "support/padding_cpu_backend.h"

namespace tripod {
namespace {

using backend_check::OpCase;
using backend_check::Output;

TEST(BackendCheck, EmulatedDevicePassesEveryCaseBitForBit) {
  auto cpu = make_backend("cpu"), emulated = make_backend("emulated");
  const auto cases = backend_check::all_op_cases({DType::F64, DType::F32, DType::BF16});
  EXPECT_GE(cases.size(), 40u);
  for (const auto& r : backend_check::check_backend(*emulated, *cpu, cases)) {
    EXPECT_TRUE(r.pass) << r.op << " " << dtype_name(r.dtype) << " " << r.shape << ": " << r.error;
    EXPECT_TRUE(r.bit_identical) << r.op << " " << r.shape;
  }
}

// A backend whose GEMM operand copies are zero-padded as a GPU's are (backend.h allows it): every
// bf16 case still compares its values, not its padding. The attention operands' cases compared the
// padded copy with the CPU's (1600 elements against 1320) until the first GPU run found it.
TEST(BackendCheck, PaddedOperandCopiesPassTheBf16Cases) {
  testing::PaddingCpuBackend padding;
  auto cpu = make_backend("cpu");
  for (const auto& r : backend_check::check_backend(padding, *cpu, backend_check::all_op_cases({DType::BF16})))
    EXPECT_TRUE(r.pass) << r.op << " " << r.shape << ": " << r.error;
}

// A case whose tested value is the reference's plus `offset` (on any backend but the CPU).
OpCase offset_case(double offset, DType dtype = DType::F64) {
  return {"offset", dtype, "3", [=](Backend& be) {
            const bool tested = be.name().find("emulated") != std::string::npos;
            return std::vector<Output>{{"x", dtype, {2.0, -1.0, tested ? 0.5 + offset : 0.5}}};
          }};
}

TEST(BackendCheck, TheComparisonFailsWhatItShould) {
  auto cpu = make_backend("cpu"), emulated = make_backend("emulated");
  auto run = [&](const OpCase& c) { return backend_check::check_backend(*emulated, *cpu, {c}).at(0); };
  auto r = run(offset_case(1e-13));  // rounding-sized in fp64: passes, but is not bit-identical
  EXPECT_TRUE(r.pass);
  EXPECT_FALSE(r.bit_identical);
  // relative to the largest reference element, 2; 0.5 + 1e-13 itself is rounded to a multiple of 2^-53
  EXPECT_NEAR(r.max_rel, 0.5e-13, 1e-16);
  r = run(offset_case(1e-9));               // a bug-sized error in fp64
  EXPECT_FALSE(r.pass);
  EXPECT_GT(r.error_over_bound, 1.0);
  EXPECT_TRUE(run(offset_case(1e-9, DType::F32)).pass);  // fp32's bound is 1e-5
  EXPECT_FALSE(run(offset_case(NAN)).pass);
  EXPECT_FALSE(run(offset_case(INFINITY)).pass);
  r = run({"throws", DType::F64, "1", [](Backend& be) -> std::vector<Output> {
             if (be.name().find("emulated") != std::string::npos) fail("kernel launch failed");
             return {};
           }});
  EXPECT_FALSE(r.pass);
  EXPECT_EQ(r.error, "kernel launch failed");
  r = run({"short", DType::F64, "1", [](Backend& be) {
             const bool tested = be.name().find("emulated") != std::string::npos;
             return std::vector<Output>{{"x", DType::F64, std::vector<double>(tested ? 2 : 3, 1.0)}};
           }});
  EXPECT_FALSE(r.pass);
  EXPECT_NE(r.error.find("output x has 2 elements, the reference 3"), std::string::npos) << r.error;
}

// An output one backend marks not comparable (the CUDA flash attention's probs buffer, which holds
// its own state) is left out; the others are still compared.
TEST(BackendCheck, AnOutputMarkedNotComparableIsLeftOutAndTheRestCompared) {
  auto cpu = make_backend("cpu"), emulated = make_backend("emulated");
  auto marked_case = [](double error_in_y) {
    return OpCase{"marked", DType::F64, "1", [=](Backend& be) {
                    const bool tested = be.name().find("emulated") != std::string::npos;
                    Output x{"x", DType::F64, std::vector<double>(tested ? 2 : 5, tested ? 7.0 : 1.0)};
                    x.not_comparable = tested;
                    Output y{"y", DType::F64, {1.0, tested ? 1.0 + error_in_y : 1.0}};
                    return std::vector<Output>{x, y};
                  }};
  };
  EXPECT_TRUE(backend_check::check_backend(*emulated, *cpu, {marked_case(0)}).at(0).pass);
  EXPECT_FALSE(backend_check::check_backend(*emulated, *cpu, {marked_case(1e-9)}).at(0).pass);
}

// The row reports the output nearest its own bound, with that bound. The case dtype's bound was
// printed beside the largest relative error of any output: an fp32 case whose bf16 operand (bound
// 2^-8) was off by 3e-3 read "3e-3, bound 1e-5, PASS", and a failing fp32 loss beside a bf16
// gradient within its bound was reported as the gradient.
TEST(BackendCheck, TheRowNamesTheOutputNearestItsBoundWithThatBound) {
  auto cpu = make_backend("cpu"), emulated = make_backend("emulated");
  auto run = [&](const OpCase& c) { return backend_check::check_backend(*emulated, *cpu, {c}).at(0); };
  auto two_outputs = [](double operand_error, double loss_error) {
    return OpCase{"two", DType::F32, "2", [=](Backend& be) {
                    const bool tested = be.name().find("emulated") != std::string::npos;
                    return std::vector<Output>{{"operand", DType::BF16, {1.0, tested ? 1.0 + operand_error : 1.0}},
                                               {"loss", DType::F32, {2.0, tested ? 2.0 + loss_error : 2.0}}};
                  }};
  };
  auto r = run(two_outputs(3e-3, 0));  // within bf16's 2^-8
  EXPECT_TRUE(r.pass);
  EXPECT_EQ(r.worst_output, "operand");
  EXPECT_DOUBLE_EQ(r.bound, 1.0 / 256);
  EXPECT_NEAR(r.max_rel, 3e-3, 1e-12);
  r = run(two_outputs(3e-3, 1e-3));  // the loss, 5e-4 relative, is 50 times fp32's bound
  EXPECT_FALSE(r.pass);
  EXPECT_EQ(r.worst_output, "loss");
  EXPECT_DOUBLE_EQ(r.bound, 1e-5);
  EXPECT_NEAR(r.max_rel, 5e-4, 1e-12);
  EXPECT_NEAR(r.error_over_bound, 50, 1e-6);
}

// Any exception fails its case and the next cases still run (only tripod::Error was caught: a
// std::out_of_range ended the whole check without its --json).
TEST(BackendCheck, AnyExceptionFailsItsCaseOnly) {
  auto cpu = make_backend("cpu"), emulated = make_backend("emulated");
  const OpCase throws{"throws", DType::F64, "1", [](Backend& be) -> std::vector<Output> {
                        if (be.name().find("emulated") != std::string::npos) throw std::out_of_range("index 9");
                        return {};
                      }};
  const auto results = backend_check::check_backend(*emulated, *cpu, {throws, offset_case(0)});
  ASSERT_EQ(results.size(), 2u);
  EXPECT_FALSE(results[0].pass);
  EXPECT_EQ(results[0].error, "index 9");
  EXPECT_TRUE(results[1].pass);
}

}  // namespace
}  // namespace tripod
