// ZeRO-3 prefetch: gathering the next buckets while the current one computes changes no bit of the
// losses, norms or parameters (gathers copy values); later passes are served by the prefetched
// gathers; and the gathered buckets held at once stay within the stated bound. Under bf16-mixed
// the GEMM weights travel as bf16: the same bits as fp32 gathers, for little more than half the bytes
// (ZeRO-3's gathers on use, and ZeRO-1/2's after the step).
#include <gtest/gtest.h>

#include <algorithm>

#include "support/test_backend.h"
#include "mpi_test_util.h"
#include "conform/conformance.h"
#include "train/distributed_trainer.h"

namespace tripod {
namespace {

struct PrefetchRun {
  std::vector<double> losses, norms;
  std::vector<std::vector<double>> params;
  int64_t hits = 0, gathered_bytes = 0;
  std::size_t peak_gathered = 0, largest_bucket = 0;
};

PrefetchRun run(const RunConfig& config, ParallelLayout layout, Communicator& group, int steps) {
  ProcessGrid grid(group, layout.grid());
  DistributedTrainer trainer(config, testing::shared_test_backend(), grid, layout);
  trainer.initialise();
  PrefetchRun r;
  for (int s = 0; s < steps; ++s) {
    const StepResult step = trainer.train_step(conform::conformance_batch(config, s));
    r.losses.push_back(step.loss);
    r.norms.push_back(step.grad_norm);
  }
  r.hits = trainer.engine().prefetch_hits();
  r.gathered_bytes = trainer.engine().gathered_bytes();
  r.peak_gathered = trainer.engine().memory().peak_gathered;
  for (const Bucket& b : trainer.engine().layout().buckets())
    r.largest_bucket = std::max(r.largest_bucket, static_cast<std::size_t>(b.size) * dtype_size(config.train.dtype));
  r.params = trainer.gather_params();
  return r;
}

// body(group, config, tied) on a group of the world's first two ranks (the others wait at the
// end), for a tied and an untied head: the conformance model in `dtype`, two micro-batches a step.
template <class Body>
void on_two_ranks_each_head(const char* dtype, const char* name, Body&& body) {
  auto world = testing::test_world();
  if (world->size() < 2) GTEST_SKIP() << "needs 2 ranks";
  if (auto group = world->split(world->rank() < 2 ? 0 : -1, world->rank(), name)) {
    for (bool tied : {true, false}) {
      nlohmann::json j = conform::default_conformance_config(dtype).json;
      j["model"]["tie_embeddings"] = tied;
      j["train"]["micro_batches"] = 2;
      body(*group, parse_run_config(j), tied);
    }
  }
  world->barrier();
}

TEST(Zero3Prefetch, BitIdenticalAndServedAhead) {
  on_two_ranks_each_head("fp32", "prefetch", [](Communicator& group, const RunConfig& config, bool tied) {
    ParallelLayout layout = testing::make_layout(1, 1, 2, 3, 2);
    layout.zero3_prefetch = 0;
    const PrefetchRun on_use = run(config, layout, group, 3);
    EXPECT_EQ(on_use.hits, 0);
    for (int prefetch : {1, 2, 4}) {
      layout.zero3_prefetch = prefetch;
      const PrefetchRun got = run(config, layout, group, 3);
      const std::string what = (tied ? "tied, prefetch " : "untied, prefetch ") + std::to_string(prefetch);
      EXPECT_EQ(got.losses, on_use.losses) << what;
      EXPECT_EQ(got.norms, on_use.norms) << what;
      EXPECT_EQ(got.params, on_use.params) << what;
      // Every pass after the first of its kind acquires most buckets from a prefetch.
      EXPECT_GT(got.hits, 10) << what;
      // At most `prefetch` more buckets than gathering on use holds at once (which holds one,
      // two under the tied head).
      EXPECT_LE(got.peak_gathered, on_use.peak_gathered + static_cast<std::size_t>(prefetch) * got.largest_bucket)
          << what;
      EXPECT_LE(on_use.peak_gathered, (tied ? 2u : 1u) * got.largest_bucket) << what;
    }
  });
}

// Runs `layout` with fp32 and with bf16 operand gathers: the same losses, norms and parameters
// (gather_params gives the owners' exact values), and the bf16 gathers' bytes in (low, high) of the
// fp32 ones'.
void expect_same_bits_for_fewer_bytes(ParallelLayout layout, const RunConfig& config, Communicator& group,
                                      const std::string& what, double low, double high) {
  layout.fp32_param_gathers = true;
  const PrefetchRun fp32 = run(config, layout, group, 3);
  layout.fp32_param_gathers = false;
  const PrefetchRun bf16 = run(config, layout, group, 3);
  EXPECT_EQ(bf16.losses, fp32.losses) << what;
  EXPECT_EQ(bf16.norms, fp32.norms) << what;
  EXPECT_EQ(bf16.params, fp32.params) << what;
  ASSERT_GT(fp32.gathered_bytes, 0) << what;
  const double ratio = static_cast<double>(bf16.gathered_bytes) / static_cast<double>(fp32.gathered_bytes);
  EXPECT_GT(ratio, low) << what;
  EXPECT_LT(ratio, high) << what;
}

TEST(Zero3Bf16OperandGathers, SameBitsAsFp32GathersForLittleMoreThanHalfTheBytes) {
  on_two_ranks_each_head("bf16-mixed", "bf16 gathers", [](Communicator& group, const RunConfig& config, bool tied) {
    for (int prefetch : {0, 1}) {
      ParallelLayout layout = testing::make_layout(1, 1, 2, 3, 2);
      layout.zero3_prefetch = prefetch;
      // A block of the conformance model is 8192 GEMM-weight elements and 352 exact ones: as bf16
      // with its exact head broadcast once in fp32, 0.54 of its fp32 bytes. The embeddings'
      // bucket (gathered twice a pass when tied) travels in fp32 alone: 0.60 of the bytes tied,
      // 0.56 untied (measured: 0.603, 0.561), where every parameter as bf16 would be 0.5. Each
      // rank's head piece all-gathered (dp x min(exact, slice) fp32 elements, before ZeRO-3 took
      // ZeRO-1/2's plan) came to 0.641 and 0.598.
      expect_same_bits_for_fewer_bytes(layout, config, group,
                                       (tied ? "tied, prefetch " : "untied, prefetch ") + std::to_string(prefetch),
                                       0.5, tied ? 0.62 : 0.58);
    }
  });
}

TEST(Zero12Bf16OperandGathers, SameBitsAsFp32GathersForLittleMoreThanHalfTheBytes) {
  on_two_ranks_each_head("bf16-mixed", "bf16 gathers 1-2", [](Communicator& group, const RunConfig& config, bool tied) {
    for (int stage : {1, 2}) {
      ParallelLayout layout = testing::make_layout(1, 1, 2, stage, 2);
      layout.bucket_bytes = 16 << 10;  // a bucket per group (a block is 8544 elements)
      // Each step gathers 4 blocks (each at 0.52 of its fp32 bytes: bf16, and its 352-element head
      // broadcast in fp32), the embeddings in fp32, and the head (tied: its LayerNorm in fp32;
      // untied: with the LM head's weight as bf16). Measured: 0.587 tied, 0.580 untied.
      expect_same_bits_for_fewer_bytes(layout, config, group,
                                       (tied ? "tied, ZeRO-" : "untied, ZeRO-") + std::to_string(stage), 0.52, 0.62);
    }
  });
}

}  // namespace
}  // namespace tripod
