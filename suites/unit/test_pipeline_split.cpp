// The pipeline's layer split: even by default (earlier chunks take the remainder), explicit when
// given, chunk c on rank c % p, owners of every tensor; the spans' parameter specs partition the
// model (plus the tied wte copy on the last stage); shard layouts of a span skip absent groups.
#include <gtest/gtest.h>

#include <map>
#include <numeric>

#include "core/error.h"
#include "model/param_access.h"
#include "parallel/pipeline_split.h"
#include "parallel/shard_layout.h"
#include "train/run_config.h"

namespace tripod {
namespace {

TEST(PipelineSplit, EvenSplitGivesEarlierChunksTheRemainder) {
  const PipelineSplit s(7, 2, 2);
  EXPECT_EQ(s.layers_per_chunk(), (std::vector<int64_t>{2, 2, 2, 1}));
  EXPECT_EQ(s.chunks_of_rank(0), (std::vector<int>{0, 2}));
  EXPECT_EQ(s.chunks_of_rank(1), (std::vector<int>{1, 3}));
  const StageSpan first = s.span(0), last = s.span(3);
  EXPECT_TRUE(first.embedding && !first.head);
  EXPECT_EQ(first.first_layer, 0);
  EXPECT_EQ(first.end_layer, 2);
  EXPECT_TRUE(!last.embedding && last.head);
  EXPECT_EQ(last.first_layer, 6);
  EXPECT_EQ(last.end_layer, 7);
  ModelConfig model;
  model.n_layer = 7;
  const std::vector<ParamSpec> specs = gpt_param_specs(model);
  EXPECT_EQ(s.owner_rank(find_spec(specs, "wte.weight")), 0);
  EXPECT_EQ(s.owner_rank(find_spec(specs, "h.4.attn.c_attn.weight")), 0);  // chunk 2 lives on rank 0
  EXPECT_EQ(s.owner_rank(find_spec(specs, "h.6.ln_1.weight")), 1);
  EXPECT_EQ(s.owner_rank(find_spec(specs, "ln_f.weight")), 1);
  EXPECT_EQ(s.describe(), "[2,2,2,1]");
}

TEST(PipelineSplit, ExplicitSplitIsChecked) {
  EXPECT_EQ(PipelineSplit(4, 2, 1, {3, 1}).span(1).first_layer, 3);
  EXPECT_THROW(PipelineSplit(4, 2, 1, {2, 1}), Error);     // sums to 3
  EXPECT_THROW(PipelineSplit(4, 2, 1, {4, 0}), Error);     // an empty chunk
  EXPECT_THROW(PipelineSplit(4, 2, 1, {1, 1, 2}), Error);  // three counts for two chunks
  EXPECT_THROW(PipelineSplit(3, 4, 1), Error);             // more stages than layers
  EXPECT_THROW(PipelineSplit(3, 2, 2), Error);             // 4 chunks, 3 layers
  try {
    PipelineSplit(1, 2, 1);
    ADD_FAILURE() << "two stages of a one-layer model were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the model has only 1 layer (model.n_layer)"), std::string::npos) << e.what();
  }
  EXPECT_EQ(parse_pipeline_split("2,1,1"), (std::vector<int64_t>{2, 1, 1}));
  EXPECT_TRUE(parse_pipeline_split("").empty());
  EXPECT_THROW(parse_pipeline_split("2,x"), Error);
  EXPECT_THROW(parse_pipeline_split("2,,1"), Error);
}

TEST(PipelineSplit, SpansPartitionTheParametersWithOneTiedCopy) {
  for (bool tied : {true, false}) {
    nlohmann::json j = default_config_json();
    j["model"] = {{"n_layer", 5}, {"n_head", 2}, {"d_model", 16}, {"d_ff", 32}, {"vocab_size", 50},
                  {"context", 64}, {"tie_embeddings", tied}, {"layernorm_eps", 1e-5}};
    const ModelConfig config = parse_run_config(j).model;
    const PipelineSplit split(5, 3, 1);
    std::map<std::string, int> seen;
    for (int c = 0; c < split.chunks(); ++c) {
      const std::vector<ParamSpec> specs = span_param_specs(config, split.span(c));
      for (const ParamSpec& spec : specs) ++seen[spec.name];
      // Groups in spec order and a layout that holds only the span's groups.
      const std::vector<int> groups = param_groups(specs);
      const ShardLayout layout(specs, groups, 2, 64, false);
      for (int g : groups) EXPECT_TRUE(layout.holds_group(g));
      EXPECT_EQ(layout.holds_group(embedding_group()), c == 0 || (tied && c == split.chunks() - 1));
      EXPECT_FALSE(layout.holds_group(head_group(config.n_layer)) && c != split.chunks() - 1);
    }
    for (const ParamSpec& spec : gpt_param_specs(config))
      EXPECT_EQ(seen[spec.name], tied && spec.name == "wte.weight" ? 2 : 1) << spec.name;
  }
}

TEST(PipelineSplit, ATiedEmbeddingGroupGetsABucketOfItsOwn) {
  nlohmann::json j = default_config_json();
  j["model"] = {{"n_layer", 4}, {"n_head", 2}, {"d_model", 16}, {"d_ff", 32}, {"vocab_size", 50},
                {"context", 64}, {"tie_embeddings", true}, {"layernorm_eps", 1e-5}};
  const ModelConfig config = parse_run_config(j).model;
  const PipelineSplit split(4, 2, 1);
  for (int c : {0, 1}) {  // the first stage (wte, wpe, 2 blocks) and the last (wte copy, 2 blocks, head)
    const std::vector<ParamSpec> specs = span_param_specs(config, split.span(c));
    const std::vector<int> groups = param_groups(specs);
    const ShardLayout merged(specs, groups, 2, 1 << 20, false);  // one bucket would hold everything
    EXPECT_EQ(merged.buckets().size(), 1u);
    const ShardLayout alone(specs, groups, 2, 1 << 20, false, {embedding_group()});
    ASSERT_EQ(alone.buckets().size(), 2u);
    EXPECT_EQ(alone.buckets()[static_cast<std::size_t>(alone.bucket_of_group(embedding_group()))].groups,
              std::vector<int>{embedding_group()});
    // Padded to the first stage's wte + wpe, the two stages' embedding buckets are the same size,
    // with wte first: their DP reductions are the same calls on the same data.
    const int64_t first_stage = 50 * 16 + 64 * 16;
    const ShardLayout padded(specs, groups, 4, 1 << 20, false, {embedding_group()}, first_stage);
    const Bucket& b = padded.buckets()[static_cast<std::size_t>(padded.bucket_of_group(embedding_group()))];
    EXPECT_EQ(b.size, (first_stage + 63) / 64 * 64);
    EXPECT_EQ(b.used, c == 0 ? first_stage : 50 * 16);
    EXPECT_EQ(padded.offsets()[0], b.start);  // wte leads its bucket on both stages
  }
}

TEST(PipelineSplit, BalancedSplitCountsTheHead) {
  nlohmann::json j = default_config_json();
  j["model"] = {{"n_layer", 4}, {"n_head", 4}, {"d_model", 128}, {"d_ff", 512}, {"vocab_size", 2048},
                {"context", 64}, {"tie_embeddings", true}, {"layernorm_eps", 1e-5}};
  ModelConfig config = parse_run_config(j).model;
  // the `tiny` preset on KJV: a block costs 1.28 MFLOP/token, the head 1.57: [3,1] beats [2,2]
  EXPECT_EQ(balanced_pipeline_split(config, 64, 2), (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(balanced_pipeline_split(config, 64, 4), (std::vector<int64_t>{1, 1, 1, 1}));
  EXPECT_EQ(balanced_pipeline_split(config, 64, 1), (std::vector<int64_t>{4}));
  config.vocab_size = 16;  // a negligible head: the even split
  EXPECT_EQ(balanced_pipeline_split(config, 64, 2), (std::vector<int64_t>{2, 2}));
  config.n_layer = 12;
  config.vocab_size = 50257;  // GPT-2's head is worth ~4.5 of these blocks
  const std::vector<int64_t> gpt2 = balanced_pipeline_split(config, 64, 4);
  EXPECT_EQ(std::accumulate(gpt2.begin(), gpt2.end(), int64_t{0}), 12);
  EXPECT_LT(gpt2.back(), gpt2.front());
  EXPECT_THROW(balanced_pipeline_split(config, 64, 13), Error);
}

}  // namespace
}  // namespace tripod
