// ShardLayout's placement of the tensors the model reads only as GEMM operands: last in their
// bucket, after every exact tensor, so that a bucket's exact head [0, exact) is contiguous (ZeRO-3's
// bf16 operand gathers send the rest as bf16), each 16 elements aligned; and every element still
// lies in exactly one rank's segments.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "model/param_access.h"
#include "parallel/shard_layout.h"
#include "train/run_config.h"

namespace tripod {
namespace {

TEST(ShardLayout, OperandOnlyTensorsComeLastInTheirBucket) {
  for (bool tied : {true, false}) {
    nlohmann::json j = default_config_json();
    j["model"] = {{"n_layer", 3}, {"n_head", 2}, {"d_model", 16}, {"d_ff", 32}, {"vocab_size", 50},
                  {"context", 64}, {"tie_embeddings", tied}, {"layernorm_eps", 1e-5}};
    const std::vector<ParamSpec> specs = gpt_param_specs(parse_run_config(j).model);
    const std::vector<bool> flags = gemm_operand_only_flags(specs);
    for (int dp : {1, 3}) {
      // 2000 elements: buckets of one block (2.4k elements), or of the head with the last block.
      const ShardLayout layout(specs, param_groups(specs), dp, 2000, false, {}, 0, flags);
      int64_t operand_elements = 0;
      for (const Bucket& b : layout.buckets()) {
        int64_t exact = 0, end = 0;
        for (std::size_t i : b.tensors) {
          const int64_t at = layout.offsets()[i] - b.start, n = shape_numel(specs[i].shape);
          end = std::max(end, at + n);
          if (flags[i]) {
            EXPECT_GE(at, b.exact) << specs[i].name;
            EXPECT_EQ(at % ShardLayout::kAlignElements, 0) << specs[i].name;  // a GEMM operand in place
            operand_elements += n;
          } else {
            EXPECT_LE(at + n, b.exact) << specs[i].name;
            exact += n;
          }
        }
        EXPECT_EQ(b.exact, exact);  // nothing but the exact tensors in the head
        // The tensors end at `end`, past `used` by the alignment gaps (ZeRO-1/2's bf16 gathers widen
        // [exact, end): stopping at `used` once left the last weight's tail stale).
        EXPECT_EQ(b.end, end);
        EXPECT_GE(b.end, b.used);
        EXPECT_LE(b.end, b.size);
      }
      // The four weights of each block, and an untied LM head.
      EXPECT_EQ(operand_elements, 3 * (16 * 48 + 16 * 16 + 32 * 16 + 16 * 32) + (tied ? 0 : 50 * 16));
      // Every element of every tensor in exactly one rank's segments.
      std::vector<int64_t> covered(specs.size(), 0);
      for (int r = 0; r < dp; ++r)
        for (const ShardLayout::Segment& seg : layout.segments(r)) covered[seg.tensor] += seg.length;
      for (std::size_t i = 0; i < specs.size(); ++i) EXPECT_EQ(covered[i], shape_numel(specs[i].shape)) << specs[i].name;
    }
    // Without the flags, spec order throughout and every bucket wholly exact.
    const ShardLayout plain(specs, param_groups(specs), 2, 2000, false);
    for (const Bucket& b : plain.buckets()) {
      EXPECT_EQ(b.exact, b.used);
      EXPECT_EQ(b.end, b.used);  // no gaps
      for (std::size_t k = 1; k < b.tensors.size(); ++k)
        EXPECT_GT(plain.offsets()[b.tensors[k]], plain.offsets()[b.tensors[k - 1]]);
    }
  }
}

TEST(ShardLayout, RejectsFlagsForAnotherTensorCount) {
  nlohmann::json j = default_config_json();
  const std::vector<ParamSpec> specs = gpt_param_specs(parse_run_config(j).model);
  EXPECT_THROW(ShardLayout(specs, param_groups(specs), 2, 2000, false, {}, 0, std::vector<bool>(3, true)), Error);
}

}  // namespace
}  // namespace tripod
