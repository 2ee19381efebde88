// Shard maps (parallel/tp_shard.h): every GPT parameter's split, local shape and local -> logical
// element map against formulas written out here per split; layout-independent initialisation
// (init_local_shard == extract_shard(initial_values of the full tensor), bit for bit); the round
// trip extract -> assemble_full == identity; every logical element owned by exactly one rank.
// TP sizes {1, 2, 4} that divide the world, tied and untied embeddings, a vocabulary (11) that
// no TP size > 1 divides.
#include "support/test_backend.h"
#include "model/config.h"
#include "mpi_test_util.h"
#include "parallel/tp_group.h"
#include "parallel/tp_shard.h"
#include "tp_test_util.h"

namespace tripod::testing {
namespace {

constexpr uint64_t kSeed = 1234;

ModelConfig shard_config(bool tied) {
  ModelConfig c;
  c.n_layer = 2, c.n_head = 4, c.d_model = 16, c.d_ff = 32, c.vocab_size = 11, c.context = 8;
  c.tie_embeddings = tied;
  return c;
}

// The split each parameter should have, by its name inside a block or at the top level.
tp::TpSplit expected_split(const std::string& name) {
  auto ends_with = [&](const std::string& s) {
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  if (name == "wte.weight" || name == "lm_head.weight") return tp::TpSplit::VocabRows;
  if (ends_with("c_attn.weight") || ends_with("c_attn.bias")) return tp::TpSplit::QkvRows;
  if (ends_with("c_fc.weight") || ends_with("c_fc.bias")) return tp::TpSplit::Rows;
  if (ends_with("c_proj.weight")) return tp::TpSplit::Columns;
  return tp::TpSplit::Replicated;  // wpe, LayerNorms, row-parallel (c_proj) biases
}

// The logical element of local element i, written out per split (independent of shard_runs).
int64_t expected_logical(const tp::TpShard& s, int64_t i) {
  const int64_t rows = s.logical[0], width = shape_numel(s.logical) / rows;
  const int64_t local_rows = s.local[0], r = s.rank;
  switch (s.split) {
    case tp::TpSplit::Replicated: return i;
    case tp::TpSplit::Rows: return r * local_rows * width + i;
    case tp::TpSplit::Columns: {
      const int64_t in_local = s.local[1];
      return (i / in_local) * width + r * in_local + i % in_local;
    }
    case tp::TpSplit::QkvRows: {
      const int64_t per_block = local_rows / 3, lr = i / width;  // this rank's rows in each of q, k, v
      const int64_t row = (lr / per_block) * (rows / 3) + r * per_block + lr % per_block;
      return row * width + i % width;
    }
    case tp::TpSplit::VocabRows: {
      const int64_t row = r * local_rows + i / width;
      return row < rows ? row * width + i % width : -1;
    }
  }
  return -2;
}

Shape expected_local_shape(const ParamSpec& spec, int t) {
  Shape s = spec.shape;
  switch (expected_split(spec.name)) {
    case tp::TpSplit::Replicated: break;
    case tp::TpSplit::Rows:
    case tp::TpSplit::QkvRows: s[0] /= t; break;
    case tp::TpSplit::Columns: s[1] /= t; break;
    case tp::TpSplit::VocabRows: s[0] = (s[0] + t - 1) / t; break;
  }
  return s;
}

class TpShardMaps : public ::testing::TestWithParam<bool> {};

TEST_P(TpShardMaps, MapsInitExtractAssemble) {
  const ModelConfig config = shard_config(GetParam());
  auto world = testing::test_world();
  for (int t : tp_sizes(world->size())) {
    SCOPED_TRACE("tp=" + std::to_string(t));
    auto comm = tp_group(*world, t);
    const std::vector<ParamSpec> specs = gpt_param_specs(config);
    const std::vector<tp::TpShard> shards = tp::tp_shards(config, t, comm->rank());
    ASSERT_EQ(shards.size(), specs.size());
    for (std::size_t k = 0; k < specs.size(); ++k) {
      const ParamSpec& spec = specs[k];
      const tp::TpShard& shard = shards[k];
      SCOPED_TRACE(spec.name);
      EXPECT_EQ(shard.split, expected_split(spec.name));
      EXPECT_EQ(tp::tp_replicated(spec), expected_split(spec.name) == tp::TpSplit::Replicated);
      EXPECT_EQ(shard.local, expected_local_shape(spec, t)) << shape_str(shard.local);
      const int64_t numel = shape_numel(spec.shape), local_numel = shape_numel(shard.local);

      // The map, and every logical element owned by exactly one rank (all ranks' maps, locally).
      for (int64_t i = 0; i < local_numel; ++i) ASSERT_EQ(tp::logical_index(shard, i), expected_logical(shard, i)) << i;
      std::vector<int> owners(static_cast<std::size_t>(numel), 0);
      const int holders = shard.split == tp::TpSplit::Replicated ? 1 : t;
      for (int r = 0; r < holders; ++r) {
        const tp::TpShard other = tp::tp_shard(spec, t, r);
        for (const tp::ShardRun& run : tp::shard_runs(other))
          for (int64_t j = 0; j < run.length; ++j) ++owners[static_cast<std::size_t>(run.logical + j)];
      }
      EXPECT_TRUE(std::all_of(owners.begin(), owners.end(), [](int n) { return n == 1; }));

      // Layout-independent initialisation, extraction, assembly.
      std::vector<double> full(static_cast<std::size_t>(numel)), local(static_cast<std::size_t>(local_numel));
      initial_values(spec, kSeed, 0, numel, full.data());
      tp::init_local_shard(spec, shard, kSeed, local.data());
      const std::vector<double> extracted = tp::extract_shard(shard, full);
      expect_bitwise(local, extracted, "init_local_shard vs extract_shard(full init)");
      for (int64_t i = 0; i < local_numel; ++i) {
        if (tp::logical_index(shard, i) < 0) {
          EXPECT_EQ(local[static_cast<std::size_t>(i)], 0.0) << "padding " << i;
        }
      }
      expect_bitwise(tp::assemble_full(*comm, shard, extracted), full, "assemble_full(extract_shard(full))");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Embeddings, TpShardMaps, ::testing::Values(true, false),
                         [](const auto& info) { return std::string(info.param ? "tied" : "untied"); });

// Which gradients the trainer must sum over TP before the optimizer step.
TEST(TpShardGradients, WhichToAllReduceOverTp) {
  const std::vector<std::string> partial_under_sp = {"h.0.ln_1.weight", "h.3.ln_2.bias", "ln_f.weight",
                                                     "h.1.attn.c_proj.bias", "h.1.mlp.c_proj.bias"};
  const std::vector<std::string> never = {
      "wte.weight",           "lm_head.weight",         "wpe.weight",          "h.0.attn.c_attn.weight",
      "h.0.attn.c_attn.bias", "h.0.attn.c_proj.weight", "h.0.mlp.c_fc.weight", "h.0.mlp.c_fc.bias",
      "h.0.mlp.c_proj.weight"};
  ModelConfig config;
  config.n_layer = 4;
  config.tie_embeddings = false;
  const std::vector<ParamSpec> specs = gpt_param_specs(config);
  for (const auto& name : partial_under_sp) {
    EXPECT_TRUE(tp::tp_grad_needs_allreduce(find_spec(specs, name), true)) << name;
    EXPECT_FALSE(tp::tp_grad_needs_allreduce(find_spec(specs, name), false)) << name;
  }
  for (const auto& name : never) {
    EXPECT_FALSE(tp::tp_grad_needs_allreduce(find_spec(specs, name), true)) << name;
    EXPECT_FALSE(tp::tp_grad_needs_allreduce(find_spec(specs, name), false)) << name;
  }
  EXPECT_THROW(find_spec(specs, "h.0.attn.rotary.weight"), Error);
}

}  // namespace
}  // namespace tripod::testing
