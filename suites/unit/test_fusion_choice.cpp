// Which of the CUDA backend's fused forms run (backend/cuda/host/fusion_choice.h), checked without a
// GPU: TRIPOD_CUDA_FUSIONS's values, the names it takes and its refusals.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "backend/cuda/host/fusion_choice.h"
#include "support/error_text.h"

namespace tripod::cuda {
namespace {

CudaFusions choose(const std::string& value) {
  const std::map<std::string, std::string> vars = {{"TRIPOD_CUDA_FUSIONS", value}};
  return choose_cuda_fusions([&](const char* name) { return vars.count(name) ? vars.at(name) : std::string(); });
}

constexpr CudaFusion kAll[] = {CudaFusion::BiasEpilogue, CudaFusion::ResidualEpilogue, CudaFusion::BiasGradCopy,
                               CudaFusion::OperandProducers, CudaFusion::LossStats, CudaFusion::LayernormGrads,
                               CudaFusion::Bf16Qkv, CudaFusion::LossGradient};

TEST(FusionChoice, EveryFusionUnlessToldOtherwise) {
  for (const std::string value : {"", "all"}) {
    const CudaFusions f = choose(value);
    EXPECT_TRUE(f.all()) << value;
    for (CudaFusion x : kAll) EXPECT_TRUE(f.on(x)) << value << " " << fusion_name(x);
    EXPECT_EQ(f.describe(), "all");
  }
  const CudaFusions none = choose("none");
  for (CudaFusion x : kAll) EXPECT_FALSE(none.on(x)) << fusion_name(x);
  EXPECT_EQ(none.describe(), "none");
}

TEST(FusionChoice, AListKeepsOnlyTheNamedOnes) {
  const CudaFusions f = choose("residual,bias");
  EXPECT_TRUE(f.on(CudaFusion::BiasEpilogue));
  EXPECT_TRUE(f.on(CudaFusion::ResidualEpilogue));
  EXPECT_FALSE(f.on(CudaFusion::BiasGradCopy));
  EXPECT_FALSE(f.on(CudaFusion::OperandProducers));
  EXPECT_FALSE(f.on(CudaFusion::LossStats));
  EXPECT_FALSE(f.on(CudaFusion::LayernormGrads));
  EXPECT_FALSE(f.on(CudaFusion::Bf16Qkv));
  EXPECT_FALSE(f.on(CudaFusion::LossGradient));
  EXPECT_FALSE(f.all());
  EXPECT_EQ(f.describe(), "bias,residual");  // in the enum's order
  // every name round-trips on its own
  for (CudaFusion x : kAll) {
    const CudaFusions one = choose(fusion_name(x));
    for (CudaFusion y : kAll) EXPECT_EQ(one.on(y), x == y) << fusion_name(x) << " " << fusion_name(y);
    EXPECT_EQ(one.describe(), fusion_name(x));
  }
  EXPECT_FALSE(choose("bias,residual,bias-grad,operands,loss-stats,layernorm-grads,qkv-bf16").all());
  EXPECT_TRUE(choose("bias,residual,bias-grad,operands,loss-stats,layernorm-grads,qkv-bf16,loss-gradient").all());
}

TEST(FusionChoice, AnUnknownOrEmptyNameIsRefusedWithTheNamesItTakes) {
  for (const std::string value : {"operand", "bias,", ",bias", "bias,,residual", "None", "bias residual"}) {
    const std::string error = expected_error([&] { choose(value); });
    EXPECT_NE(error.find("TRIPOD_CUDA_FUSIONS=" + value + ": '"), std::string::npos) << error;
    EXPECT_NE(error.find("none, or a comma-separated list of those to keep: bias, residual, bias-grad, operands, "
                         "loss-stats, layernorm-grads, qkv-bf16, loss-gradient"),
              std::string::npos)
        << error;
  }
}

}  // namespace
}  // namespace tripod::cuda
