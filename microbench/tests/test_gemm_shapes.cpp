// The benchmarked layer GEMMs are the ones the model runs (model/linear.cpp), split the way
// Megatron's tensor parallelism splits them, and their FLOPs add up to perf/flops.h's count.
#include <gtest/gtest.h>

#include <map>

#include "microbench/gemm_shapes.h"
#include "perf/flops.h"

namespace tripod::microbench {
namespace {

ModelConfig gpt2_small() {
  ModelConfig c;
  c.n_layer = 12;
  c.n_head = 12;
  c.d_model = 768;
  c.d_ff = 3072;
  c.vocab_size = 50257;
  c.context = 1024;
  return c;
}

std::map<std::string, GemmShape> by_name(const std::vector<GemmShape>& shapes) {
  std::map<std::string, GemmShape> m;
  for (const GemmShape& s : shapes) m[s.name] = s;
  return m;
}

TEST(GemmShapes, Gpt2SmallOneRank) {
  const auto s = by_name(transformer_layer_gemms(gpt2_small(), 1, 1024));
  ASSERT_EQ(s.size(), 15u);  // five linears x (forward, input grad, weight grad)
  EXPECT_EQ(s.at("qkv.fwd").dims(), "1024x2304x768");
  EXPECT_EQ(s.at("qkv.bwd_input").dims(), "1024x768x2304");
  EXPECT_EQ(s.at("qkv.bwd_weight").dims(), "2304x768x1024");
  EXPECT_EQ(s.at("attn_proj.fwd").dims(), "1024x768x768");
  EXPECT_EQ(s.at("fc.fwd").dims(), "1024x3072x768");
  EXPECT_EQ(s.at("fc_proj.fwd").dims(), "1024x768x3072");
  EXPECT_EQ(s.at("lm_head.fwd").dims(), "1024x50257x768");
  // Transposes and accumulation as model/linear.cpp issues them.
  EXPECT_TRUE(!s.at("fc.fwd").trans_a && s.at("fc.fwd").trans_b && s.at("fc.fwd").beta == 0);
  EXPECT_TRUE(!s.at("fc.bwd_input").trans_a && !s.at("fc.bwd_input").trans_b);
  EXPECT_TRUE(s.at("fc.bwd_weight").trans_a && !s.at("fc.bwd_weight").trans_b && s.at("fc.bwd_weight").beta == 1);
}

TEST(GemmShapes, TensorParallelSplitsColumnsThenRows) {
  const auto s = by_name(transformer_layer_gemms(gpt2_small(), 2, 1024));
  EXPECT_EQ(s.at("qkv.fwd").dims(), "1024x1152x768");       // [N, 3C/tp, C]
  EXPECT_EQ(s.at("attn_proj.fwd").dims(), "1024x768x384");  // [N, C, C/tp]
  EXPECT_EQ(s.at("fc.fwd").dims(), "1024x1536x768");        // [N, F/tp, C]
  EXPECT_EQ(s.at("fc_proj.fwd").dims(), "1024x768x1536");   // [N, C, F/tp]
  EXPECT_EQ(s.at("lm_head.fwd").dims(), "1024x25129x768");  // [N, ceil(V/tp), C]
}

TEST(GemmShapes, FlopsAddUpToTheModelCount) {
  const ModelConfig c = gpt2_small();
  const int64_t tokens = 1024;
  for (int64_t tp : {1, 2, 4}) {
    double layer = 0, head = 0;
    for (const GemmShape& s : transformer_layer_gemms(c, tp, tokens))
      (s.name.rfind("lm_head", 0) == 0 ? head : layer) += s.flops();
    // 6 FLOPs per matmul weight per token (forward + two backward GEMMs), split over tp ranks.
    const FlopCount f = count_flops(c, tokens);
    const double head_params = static_cast<double>(c.vocab_size * c.d_model);
    const double layer_params = (static_cast<double>(f.n_params_matmul) - head_params) / static_cast<double>(c.n_layer);
    EXPECT_DOUBLE_EQ(layer * static_cast<double>(tp), 6 * layer_params * tokens) << "tp " << tp;
    if (tp == 1) EXPECT_DOUBLE_EQ(head, 6 * head_params * tokens);
  }
}

}  // namespace
}  // namespace tripod::microbench
