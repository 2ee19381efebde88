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

std::string printed(const nlohmann::json& summary, void (*print)(const nlohmann::json&, std::FILE*) = print_gemm_summary) {
  char* text = nullptr;
  std::size_t size = 0;
  std::FILE* out = open_memstream(&text, &size);
  print(summary, out);
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

// The kernel summary likewise: a filter that left STREAM out printed "copy 0.0 GB/s, triad 0.0 GB/s"
// and every kernel at "0.0%" of triad.
TEST(KernelSummary, WhatTheFilterLeftOutShowsADashAndFlopsAreSaidToBeNominal) {
  const nlohmann::json summary = {
      {"setup", {{"threads", 2}}},
      {"stream", {{"array_mib", 8}}},
      {"kernels", nlohmann::json::array({{{"name", "attention_fwd"}, {"gbps", 3.5}, {"gflops", 59.7}}})}};
  const std::string text = printed(summary, print_kernel_summary);
  EXPECT_EQ(text.find("0.0"), std::string::npos) << text;
  EXPECT_NE(text.find("copy - GB/s, triad - GB/s"), std::string::npos) << text;
  EXPECT_NE(text.find("3.50          -       59.7"), std::string::npos) << text;
  EXPECT_NE(text.find("* nominal: attention's FLOPs are counted over the whole T x T square"), std::string::npos) << text;
}

TEST(KernelSummary, MeasuredSharesOfTriadArePrinted) {
  const nlohmann::json summary = {
      {"setup", {{"threads", 2}}},
      {"stream", {{"array_mib", 8}, {"copy_gbps", 10.0}, {"triad_gbps", 12.0}}},
      {"kernels", nlohmann::json::array({{{"name", "gelu_fwd"}, {"gbps", 6.0}, {"pct_of_triad", 50.0}}})}};
  const std::string text = printed(summary, print_kernel_summary);
  EXPECT_NE(text.find("copy 10.0 GB/s, triad 12.0 GB/s"), std::string::npos) << text;
  EXPECT_NE(text.find("50.0%"), std::string::npos) << text;
  EXPECT_EQ(text.find("nominal"), std::string::npos) << text;
}

}  // namespace
}  // namespace tripod::microbench
