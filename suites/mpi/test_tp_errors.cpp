// Bad tensor-parallel layouts and inputs throw the same tripod::Error on every rank, before any
// communication, so nothing hangs: expect_same_error_everywhere compares the messages across the
// world and ends with a barrier that a rank which went on communicating would never reach.
#include "support/test_backend.h"
#include "model/config.h"
#include "mpi_test_util.h"
#include "parallel/tp_group.h"
#include "parallel/tp_linear.h"
#include "parallel/tp_shard.h"
#include "parallel/tp_vocab.h"
#include "tp_test_util.h"

namespace tripod::testing {
namespace {

ModelConfig config_with(int64_t n_head, int64_t d_model, int64_t d_ff) {
  ModelConfig c;
  c.n_head = n_head, c.d_model = d_model, c.d_ff = d_ff, c.vocab_size = 11, c.context = 8;
  return c;
}

TEST(TpErrors, ModelDoesNotSplit) {
  auto world = testing::test_world();
  const ModelConfig four_heads = config_with(4, 16, 32);
  expect_same_error_everywhere(*world, "does not divide model.n_head = 4",
                               [&] { tp::validate_tensor_parallel(four_heads, 3); });
  expect_same_error_everywhere(*world, "exceeds model.n_head = 4",
                               [&] { tp::validate_tensor_parallel(four_heads, 8); });
  expect_same_error_everywhere(*world, "must be >= 1", [&] { tp::validate_tensor_parallel(four_heads, 0); });
  expect_same_error_everywhere(*world, "does not divide model.d_ff = 30",
                               [&] { tp::validate_tensor_parallel(config_with(4, 16, 30), 4); });
  expect_same_error_everywhere(*world, "does not divide model.n_head = 4", [&] { tp::tp_shards(four_heads, 3, 0); });
  const ParamSpec fc{"h.0.mlp.c_fc.weight", {30, 16}, InitKind::Normal, 0.02, true, ParamRole::FcWeight, 0, block_group(0)};
  expect_same_error_everywhere(*world, "cannot split h.0.mlp.c_fc.weight [30, 16] by rows",
                               [&] { tp::tp_shard(fc, 4, 0); });
  EXPECT_NO_THROW(tp::validate_tensor_parallel(four_heads, 4));
}

TEST(TpErrors, SequenceParallelNeedsDivisibleTokens) {
  auto world = testing::test_world();
  auto be = testing::make_test_backend();
  for (int t : tp_sizes(world->size())) {
    if (t == 1) continue;
    SCOPED_TRACE("tp=" + std::to_string(t));
    auto comm = tp_group(*world, t);
    const tp::TpGroup group{*comm, true};
    const int64_t N = 2 * t + 1, C = 8;  // N not divisible by t
    Tensor w = be->alloc({C, C}, DType::F32), x = be->alloc({N, C}, DType::F32), y = be->alloc({N, C}, DType::F32);
    Tensor local = be->alloc({2, C}, DType::F32);
    const std::string expected = "does not divide " + std::to_string(N);
    expect_same_error_everywhere(*world, expected,
                                 [&] { tp::column_parallel_linear_forward(*be, group, y, local, x, w, Tensor()); });
    expect_same_error_everywhere(*world, expected,
                                 [&] { tp::row_parallel_linear_forward(*be, group, local, y, x, w, Tensor()); });
    expect_same_error_everywhere(*world, expected,
                                 [&] { tp::row_parallel_linear_backward(*be, group, x, w, Tensor(), local, y, x, w); });
    EXPECT_THROW(tp::sequence_shard_rows(N, t), Error);
  }
}

TEST(TpErrors, BadShapesAndIds) {
  auto world = testing::test_world();
  auto be = testing::make_test_backend();
  for (int t : tp_sizes(world->size())) {
    SCOPED_TRACE("tp=" + std::to_string(t));
    auto comm = tp_group(*world, t);
    const tp::TpGroup group{*comm, false};
    Tensor w = be->alloc({4, 8}, DType::F32), x = be->alloc({6, 8}, DType::F32), out = be->alloc({6, 5}, DType::F32);
    expect_same_error_everywhere(*world, "out [6, 5] should hold [N, out/tp] = 24 elements", [&] {
      tp::column_parallel_linear_forward(*be, group, out, x, Tensor(), w, Tensor());
    });

    const int64_t V = 11, C = 4, N = 4;
    const tp::VocabShard shard = tp::vocab_shard(V, t, comm->rank());
    Tensor ids = be->alloc({N}, DType::I32);
    const int32_t bad[N] = {0, 3, static_cast<int32_t>(V), 1};  // id V is one past the vocabulary
    be->upload(bad, ids);
    Tensor wte = be->alloc({shard.rows, C}, DType::F32), wpe = be->alloc({8, C}, DType::F32);
    Tensor emb = be->alloc({N, C}, DType::F32);
    expect_same_error_everywhere(*world, "token id 11 at position 2 is outside the vocabulary of 11", [&] {
      tp::vocab_parallel_embedding_forward(*be, group, shard, emb, Tensor(), ids, wte, wpe, N);
    });
    Tensor logits = be->alloc({N, shard.rows}, DType::F32), losses = be->alloc({N}, DType::F32);
    Tensor lse = be->alloc({N}, DType::F32);
    expect_same_error_everywhere(*world, "target id 11 at position 2 is outside the vocabulary of 11", [&] {
      tp::vocab_parallel_cross_entropy_forward(*be, *comm, shard, losses, lse, logits, ids);
    });
  }
}

// A replicated parameter whose copies differ between TP ranks is named by assemble_full, on every
// rank (the values depend only on the TP rank, so every group throws the same message).
TEST(TpErrors, DivergedReplicaIsNamed) {
  auto world = testing::test_world();
  for (int t : tp_sizes(world->size())) {
    if (t == 1) continue;
    SCOPED_TRACE("tp=" + std::to_string(t));
    auto comm = tp_group(*world, t);
    const ParamSpec ln{"h.0.ln_1.weight", {4}, InitKind::Ones, 0, false, ParamRole::Ln1Weight, 0, block_group(0)};
    const tp::TpShard shard = tp::tp_shard(ln, t, comm->rank());
    std::vector<double> local = {1, 1, 1, 1 + 0.5 * comm->rank()};
    expect_same_error_everywhere(*world, "replicated parameter h.0.ln_1.weight differs between TP ranks 0 and 1",
                                 [&] { tp::assemble_full(*comm, shard, local); });
  }
}

}  // namespace
}  // namespace tripod::testing
