// The printed GEMM summary. A layer GEMM is compared with the best square sgemm only when the
// square sweep ran; with a --benchmark_filter that left it out, the column printed "0.0%", as if
// the layer had run at no speed at all.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "microbench/summary.h"

namespace tripod::microbench {
namespace {

std::string printed(const nlohmann::json& summary) {
  char* text = nullptr;
  std::size_t size = 0;
  std::FILE* out = open_memstream(&text, &size);
  print_gemm_summary(summary, out);
  std::fclose(out);
  std::string result(text, size);
  std::free(text);
  return result;
}

nlohmann::json summary_with_layer(const nlohmann::json& row) {
  return {{"setup", {{"threads", 2}, {"model", "tiny"}, {"tp", 1}, {"tokens", 512}}},
          {"peak", {{"fp32_flops", 1e12}, {"fp32_source", "nominal"}, {"fp64_flops", 5e11}, {"fp64_source", "nominal"}}},
          {"layer_gemms", nlohmann::json::array({row})}};
}

TEST(GemmSummary, ALayerWithoutASquareSweepToCompareWithShowsADash) {
  const std::string text =
      printed(summary_with_layer({{"name", "attn_proj.fwd 512 x 64 x 64"}, {"tflops", 0.05}, {"pct_of_peak", 5.0}}));
  EXPECT_EQ(text.find("0.0%"), std::string::npos) << text;
  EXPECT_NE(text.find("5.0%            -"), std::string::npos) << text;
}

TEST(GemmSummary, ALayerWithTheSquareSweepShowsItsShareOfTheBest) {
  const std::string text = printed(summary_with_layer(
      {{"name", "mlp_up.fwd"}, {"tflops", 0.05}, {"pct_of_peak", 5.0}, {"pct_of_measured_gemm", 42.5}}));
  EXPECT_NE(text.find("42.5%"), std::string::npos) << text;
}

}  // namespace
}  // namespace tripod::microbench
