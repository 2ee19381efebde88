// The weights' bf16 copies under bf16-mixed (model/weight_copies.h): one a weight, shared by the
// micro-batches in flight, held from the first forward that makes it to the last backward that
// takes it; none kept where the owner frees the parameters after each use (ZeRO-3). Neither changes
// a bit of the gradients.
#include <gtest/gtest.h>

#include "support/test_backend.h"
#include "model_test_util.h"
#include "model/gpt.h"
#include "model/weight_copies.h"
#include "train/trainer.h"

namespace tripod {
namespace {

TEST(SharedWeightCopies, CountsItsHoldersAndDropsTheCopyWithTheLast) {
  auto backend = testing::make_test_backend();
  const Tensor copy = backend->alloc({4, 8}, DType::BF16), other = backend->alloc({4, 8}, DType::BF16);
  SharedWeightCopies copies;
  EXPECT_FALSE(copies.find(3).defined());
  copies.hold(3, copy);
  copies.hold(3, copies.find(3));
  EXPECT_EQ(copies.find(3).address(), copy.address());
  EXPECT_EQ(copies.held(), 1u);
  EXPECT_EQ(copies.bytes(), copy.bytes());
  // A second copy of a weight in flight would be a forward that did not look for the first.
  EXPECT_THROW(copies.hold(3, other), Error);
  copies.release(3);
  EXPECT_TRUE(copies.find(3).defined());
  copies.release(3);
  EXPECT_FALSE(copies.find(3).defined());
  EXPECT_EQ(copies.held(), 0u);
  EXPECT_THROW(copies.release(3), Error);
}

constexpr int64_t kB = 4, kT = 5;

// The model's linear weights: four a block, and the LM head's.
std::size_t linear_weights(const ModelConfig& m) { return static_cast<std::size_t>(4 * m.n_layer + 1); }
std::size_t weight_copy_bytes(const ModelConfig& m) {
  const int64_t C = m.d_model, F = m.d_ff;
  return static_cast<std::size_t>(m.n_layer * (4 * C * C + 2 * F * C) + m.vocab_size * C) * sizeof(bf16);
}

struct TwoMicroBatches {
  std::vector<double> grads;
  std::size_t held_after_forwards = 0, held_after_first_backward = 0, held_after_both = 0;
  std::size_t second_forward_growth = 0, first_forward_growth = 0;  // allocator, bytes
};

// Two micro-batches' forwards, then their backwards (`in_flight`, as a pipeline's warm-up), or
// each forward followed by its backward; the gradients they accumulate, and what is held when.
TwoMicroBatches two_micro_batches(bool in_flight, bool keep_weight_copies) {
  const RunConfig config = testing::tiny_run_config("bf16-mixed", true);
  auto backend = testing::make_test_backend();
  Trainer trainer(config, *backend);
  trainer.initialise();
  Gpt& model = trainer.model();
  model.set_keep_weight_copies(keep_weight_copies);
  ResidentParams access(trainer.params(), &trainer.grads());
  const data::Batch first = testing::random_batch(kB, kT, config.model.vocab_size, 11);
  const data::Batch second = testing::random_batch(kB, kT, config.model.vocab_size, 12);
  const double scale = 1.0 / static_cast<double>(2 * kB * kT);
  const int a = model.claim_slot(kB, kT), b = model.claim_slot(kB, kT);  // both slots allocated before
  TwoMicroBatches r;
  auto forward = [&](int slot, const data::Batch& batch) {
    const std::size_t before = backend->memory_stats().live;
    model.forward_slot(access, slot, batch.tokens.data(), batch.targets.data());
    return backend->memory_stats().live - before;
  };
  r.first_forward_growth = forward(a, first);
  if (in_flight) {
    r.second_forward_growth = forward(b, second);
    r.held_after_forwards = model.weight_copies_held();
    model.backward_slot(access, a, scale);
    r.held_after_first_backward = model.weight_copies_held();
    model.backward_slot(access, b, scale);
  } else {
    model.backward_slot(access, a, scale);
    r.second_forward_growth = forward(b, second);
    model.backward_slot(access, b, scale);
  }
  r.held_after_both = model.weight_copies_held();
  model.release_slot(a);
  model.release_slot(b);
  r.grads = to_host_f64(*backend, trainer.grads().flat());
  return r;
}

// Two micro-batches in flight hold one copy of each weight: the second forward rounds no weight
// and allocates none (its growth is the first's less the copies), the first backward leaves the
// copies to the second, which drops them; the gradients are the bits of the two run one by one.
TEST(WeightCopies, MicroBatchesInFlightShareOneCopyOfEachWeight) {
  const ModelConfig m = testing::tiny_run_config("bf16-mixed", true).model;
  const TwoMicroBatches shared = two_micro_batches(true, true);
  const TwoMicroBatches one_by_one = two_micro_batches(false, true);
  EXPECT_EQ(shared.held_after_forwards, linear_weights(m));
  EXPECT_EQ(shared.held_after_first_backward, linear_weights(m));
  EXPECT_EQ(shared.held_after_both, 0u);
  EXPECT_EQ(one_by_one.held_after_both, 0u);
  // The allocator pads each tensor to 64 bytes: at most 64 more a copy.
  const std::size_t padded = weight_copy_bytes(m) + 64 * linear_weights(m);
  EXPECT_GE(shared.first_forward_growth - shared.second_forward_growth, weight_copy_bytes(m));
  EXPECT_LE(shared.first_forward_growth - shared.second_forward_growth, padded);
  // One by one, the second forward makes its own copies again (the first's were dropped).
  EXPECT_EQ(one_by_one.second_forward_growth, one_by_one.first_forward_growth);
  EXPECT_EQ(shared.grads, one_by_one.grads);
}

// Where the weights' copies are not kept (set_keep_weight_copies(false): ZeRO-3), no forward holds
// any, the accounting counts none, and the backward's own copies give the same gradient bits.
TEST(WeightCopies, NotKeptTheBackwardRoundsTheWeightsAgainToTheSameBits) {
  const ModelConfig m = testing::tiny_run_config("bf16-mixed", true).model;
  const TwoMicroBatches kept = two_micro_batches(true, true);
  const TwoMicroBatches remade = two_micro_batches(true, false);
  EXPECT_EQ(remade.held_after_forwards, 0u);
  EXPECT_GE(kept.first_forward_growth - remade.first_forward_growth, weight_copy_bytes(m));
  EXPECT_EQ(remade.grads, kept.grads);

  auto accounted = [&](bool keep) {
    const RunConfig config = testing::tiny_run_config("bf16-mixed", true);
    auto backend = testing::make_test_backend();
    Trainer trainer(config, *backend);
    trainer.model().set_keep_weight_copies(keep);
    trainer.model().reserve(kB, kT);
    trainer.model().claim_slot(kB, kT);
    trainer.model().claim_slot(kB, kT);  // a second slot: the copies are counted once still
    EXPECT_THROW(trainer.model().set_keep_weight_copies(!keep), Error) << "after the activations exist";
    return trainer.model().activation_bytes();
  };
  EXPECT_EQ(accounted(true) - accounted(false), weight_copy_bytes(m));
}

// A slot whose forward is run again without a backward (or given up by release_slot) gives its
// copies back first, so the holder counts stay true.
TEST(WeightCopies, AForwardWithoutItsBackwardGivesItsCopiesBack) {
  const RunConfig config = testing::tiny_run_config("bf16-mixed", true);
  auto backend = testing::make_test_backend();
  Trainer trainer(config, *backend);
  trainer.initialise();
  Gpt& model = trainer.model();
  ResidentParams access(trainer.params(), &trainer.grads());
  const data::Batch batch = testing::random_batch(kB, kT, config.model.vocab_size, 13);
  const int a = model.claim_slot(kB, kT);
  model.forward_slot(access, a, batch.tokens.data(), batch.targets.data());
  const std::size_t live = backend->memory_stats().live;
  model.forward_slot(access, a, batch.tokens.data(), batch.targets.data());
  EXPECT_EQ(backend->memory_stats().live, live) << "the rerun forward holds one set of copies, not two";
  EXPECT_EQ(model.weight_copies_held(), linear_weights(config.model));
  model.release_slot(a);
  EXPECT_EQ(model.weight_copies_held(), 0u);
}

}  // namespace
}  // namespace tripod
