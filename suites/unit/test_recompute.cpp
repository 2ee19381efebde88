// Activation recomputation: the same losses, gradient norms and parameters bit for bit as a run
// that keeps every activation (same arithmetic, same order), for each mode, precision and
// micro-batching; activation bytes that follow the stated per-block formula; and an allocator that
// really holds that much less.
#include <gtest/gtest.h>

#include "backend/cpu/cpu_backend.h"
#include "support/test_backend.h"
#include "model_test_util.h"
#include "model/gpt.h"
#include "train/trainer.h"

namespace tripod {
namespace {

struct TrainedRun {
  std::vector<double> losses, norms, params;
};

TrainedRun train(RunConfig config, Recompute recompute, int steps) {
  config.train.recompute = recompute;
  auto backend = testing::make_test_backend();
  Trainer trainer(config, *backend);
  trainer.initialise();
  TrainedRun r;
  for (int s = 0; s < steps; ++s) {
    const StepResult step = trainer.train_step(testing::random_batch(config.train.batch_size, config.train.seq_len,
                                                                     config.model.vocab_size, 40 + s));
    r.losses.push_back(step.loss);
    r.norms.push_back(step.grad_norm);
  }
  r.params = to_host_f64(*backend, trainer.params().flat());
  return r;
}

TEST(Recompute, EveryModeIsBitIdenticalToKeepingEverything) {
  for (const char* dtype : {"fp32", "fp64", "bf16-mixed"})
    for (bool tied : {true, false})
      for (int64_t micro : {1, 2}) {
        const RunConfig config = testing::tiny_run_config(dtype, tied, micro);
        const TrainedRun kept = train(config, Recompute::None, 3);
        for (Recompute mode : {Recompute::Selective, Recompute::Full}) {
          const TrainedRun got = train(config, mode, 3);
          const std::string what = std::string(dtype) + (tied ? " tied" : " untied") + " mb" + std::to_string(micro) +
                                   " " + recompute_name(mode);
          EXPECT_EQ(got.losses, kept.losses) << what;
          EXPECT_EQ(got.norms, kept.norms) << what;
          EXPECT_EQ(got.params, kept.params) << what;
        }
      }
}

// A model wider than it is deep enough that the modes differ visibly: 3 blocks, B=2, T=8.
ModelConfig wide_model() {
  ModelConfig m;
  m.n_layer = 3, m.n_head = 2, m.d_model = 16, m.d_ff = 64, m.vocab_size = 13, m.context = 8;
  return m;
}

TEST(Recompute, ActivationBytesFollowThePerBlockFormula) {
  const ModelConfig m = wide_model();
  const int64_t B = 2, T = 8, N = B * T;
  auto backend = testing::make_test_backend();
  std::map<Recompute, std::size_t> bytes;
  for (Recompute mode : {Recompute::None, Recompute::Selective, Recompute::Full}) {
    Gpt model(m, *backend, DType::F64, nullptr, StageSpan{}, mode);
    model.reserve(B, T);
    bytes[mode] = model.activation_bytes();
  }
  // Everything outside the blocks (tokens, embedding output, head, backward scratch) is the same in
  // every mode, so the differences are the blocks' alone.
  auto block_bytes = [&](Recompute mode) {
    const BlockActivationElements e = block_activation_elements(mode, N, m.d_model, m.d_ff, m.n_head, T);
    return static_cast<std::size_t>(e.kept_per_block * m.n_layer + e.shared) * sizeof(double);
  };
  for (Recompute mode : {Recompute::Selective, Recompute::Full})
    EXPECT_EQ(bytes[Recompute::None] - bytes[mode], block_bytes(Recompute::None) - block_bytes(mode))
        << recompute_name(mode);
  EXPECT_GT(bytes[Recompute::None], bytes[Recompute::Selective]);
  EXPECT_GT(bytes[Recompute::Selective], bytes[Recompute::Full]);
  // Full keeps one [N,C] output per block and the rest once.
  const BlockActivationElements full = block_activation_elements(Recompute::Full, N, m.d_model, m.d_ff, m.n_head, T);
  EXPECT_EQ(full.kept_per_block, N * m.d_model);
}

TEST(Recompute, TheAllocatorHoldsWhatTheAccountingSays) {
  const ModelConfig m = wide_model();
  std::map<Recompute, std::size_t> live, accounted;
  for (Recompute mode : {Recompute::None, Recompute::Selective, Recompute::Full}) {
    auto backend = testing::make_test_backend();
    const std::size_t before = backend->memory_stats().live;
    Gpt model(m, *backend, DType::F32, nullptr, StageSpan{}, mode);
    model.reserve(2, 8);
    const int second = model.claim_slot(2, 8), third = model.claim_slot(2, 8);  // three micro-batches in flight
    EXPECT_EQ(model.slots_allocated(), 2);  // slot 0 from reserve() is free, so the first claim takes it
    model.release_slot(second);
    model.release_slot(third);
    live[mode] = backend->memory_stats().live - before;
    accounted[mode] = model.activation_bytes();
    // The allocator pads each tensor to 64 bytes: only the few smaller than that (the fp64 loss
    // sum) add anything.
    EXPECT_GE(live[mode], accounted[mode]) << recompute_name(mode);
    EXPECT_LT(live[mode], accounted[mode] + 256) << recompute_name(mode);
  }
  for (Recompute mode : {Recompute::Selective, Recompute::Full})
    EXPECT_EQ(live[Recompute::None] - live[mode], accounted[Recompute::None] - accounted[mode]) << recompute_name(mode);
}

// Under bf16-mixed the single-device layers keep the bf16 copies of ln1, atty, ln2 and fc_gelu
// from the forward for the backward (model/gpt_activations.h's BlockActivations::*_op), with their GEMMs'
// weights' copies, and lnf's and the head weight's for the LM head's (Activations::lnf_op,
// head_w_op): the activation accounting counts them (none for recomputed
// activations: fc_gelu under selective, all of a block's under full; lnf is never recomputed),
// the allocator holds them after the forward, and the backward gives them back. Where ln1's,
// atty's, ln2's, gelu(fc)'s and lnf's copies are kept, those activations are not stored in fp32 at
// all (Backend::layernorm_operand, attention_operand, gelu_operand), and under the policy the
// backward's scratch has no fp32 d fc or d qkv (Backend::gelu_backward_operand,
// attention_backward_operand); the logits, the pre-activations fc and the gradient of gelu(fc)
// are bf16 (Gpt::rounded_activation_dtype).
TEST(Recompute, KeptOperandCopiesAreAccountedAndGivenBackByTheBackward) {
  const int64_t B = 4, T = 5;
  for (Recompute mode : {Recompute::None, Recompute::Selective, Recompute::Full}) {
    auto accounted = [&](const char* dtype, std::size_t* held_after_forward, std::size_t* given_back) {
      RunConfig config = testing::tiny_run_config(dtype, true);
      config.train.recompute = mode;
      auto backend = testing::make_test_backend();
      Trainer trainer(config, *backend);
      trainer.initialise();
      const data::Batch batch = testing::random_batch(B, T, config.model.vocab_size, 3);
      const std::size_t before = backend->memory_stats().live;
      const LossSum s = trainer.model().forward(trainer.params(), batch.tokens.data(), batch.targets.data(), B, T);
      const std::size_t after_forward = backend->memory_stats().live;
      trainer.model().backward(trainer.params(), trainer.grads(), 1.0 / static_cast<double>(s.n_valid));
      *held_after_forward = after_forward - before;
      *given_back = after_forward - backend->memory_stats().live;
      return trainer.model().activation_bytes();
    };
    std::size_t held_fp32 = 0, back_fp32 = 0, held_mixed = 0, back_mixed = 0;
    const std::size_t fp32 = accounted("fp32", &held_fp32, &back_fp32);
    const std::size_t mixed = accounted("bf16-mixed", &held_mixed, &back_mixed);
    const ModelConfig m = testing::tiny_run_config("fp32", true).model;
    const int64_t inputs = mode == Recompute::None        ? 3 * m.d_model + m.d_ff  // ln1, atty, ln2, gelu(fc)
                           : mode == Recompute::Selective ? 3 * m.d_model           // gelu(fc) recomputed
                                                          : 0;                      // all recomputed
    // with each kept input its GEMM's weight's copy: c_attn [3C, C], c_proj [C, C], c_fc [F, C],
    // c_proj [C, F]; and the LM head's [V, C] with lnf's
    const int64_t C = m.d_model, F = m.d_ff;
    const int64_t weights = mode == Recompute::None        ? 4 * C * C + 2 * F * C
                            : mode == Recompute::Selective ? 4 * C * C + F * C
                                                           : 0;
    const std::size_t head_weight = static_cast<std::size_t>(m.vocab_size * C) * sizeof(bf16);
    const std::size_t kept =
        static_cast<std::size_t>(B * T * (m.n_layer * inputs + m.d_model) + m.n_layer * weights) * sizeof(bf16) +
        head_weight;  // + lnf, + the head's weight
    // what the allocator holds for them: it pads each tensor to 64 bytes (the head weight's copy here)
    const std::size_t kept_held = kept - head_weight + (head_weight + 63) / 64 * 64;
    const int64_t not_stored_per_token = mode == Recompute::None        ? 3 * m.d_model + m.d_ff  // ln1, atty, ln2, gelu(fc)
                                         : mode == Recompute::Selective ? 3 * m.d_model            // ln1, atty, ln2
                                                                        : 0;
    const std::size_t fp32_not_stored =
        static_cast<std::size_t>(B * T * (m.d_ff + 3 * m.d_model + m.d_model + m.n_layer * not_stored_per_token)) *
        sizeof(float);  // + the d fc and d qkv scratch, lnf
    // and the logits [N, V'] held in bf16 instead of fp32 (V' = V padded to the backend's row
    // multiple; the allocator pads each tensor to 64 bytes)
    const int64_t row_multiple = testing::make_test_backend()->gemm_row_multiple();
    const int64_t width = (m.vocab_size + row_multiple - 1) / row_multiple * row_multiple;
    const std::size_t logits32 = static_cast<std::size_t>(B * T * width) * sizeof(float);
    const std::size_t logits16 = static_cast<std::size_t>(B * T * width) * sizeof(bf16);
    const std::size_t logits_halved = logits32 - logits16;
    const std::size_t logits_halved_held = (logits32 + 63) / 64 * 64 - (logits16 + 63) / 64 * 64;
    // and the MLP's pre-activations fc [N, F] in bf16: each layer's, or under full recomputation
    // the one buffer every layer's recomputation refills; and the backward's gradient of gelu(fc)
    // [N, F] (one scratch)
    const std::size_t fc_count = (mode == Recompute::Full ? 1 : static_cast<std::size_t>(m.n_layer)) + 1;
    const std::size_t fc32 = static_cast<std::size_t>(B * T * F) * sizeof(float);
    const std::size_t fc16 = static_cast<std::size_t>(B * T * F) * sizeof(bf16);
    const std::size_t fc_halved = fc_count * (fc32 - fc16);
    const std::size_t fc_halved_held = fc_count * ((fc32 + 63) / 64 * 64 - (fc16 + 63) / 64 * 64);
    EXPECT_EQ(mixed + fp32_not_stored + logits_halved + fc_halved, fp32 + kept) << recompute_name(mode);
    EXPECT_EQ(held_mixed + fp32_not_stored + logits_halved_held + fc_halved_held, held_fp32 + kept_held)
        << recompute_name(mode) << ": the allocator after the forward";
    EXPECT_EQ(back_mixed - back_fp32, kept_held) << recompute_name(mode) << ": given back by the backward";
  }
}

// An evaluation's forward (Trainer::eval_loss: ForwardOnly) keeps no operand copies: after it the
// allocator holds as much under bf16-mixed as in fp32 but for the fp32 ln1, atty, ln2, gelu(fc),
// lnf and d fc and d qkv scratch that bf16-mixed never stores and the logits and pre-activations
// it holds in bf16, and the next training step still gives the bits of a run that never evaluated.
TEST(Recompute, AnEvaluationKeepsNoOperandCopies) {
  const int64_t B = 4, T = 5;
  auto held_after_eval = [&](const char* dtype) {
    const RunConfig config = testing::tiny_run_config(dtype, true);
    auto backend = testing::make_test_backend();
    Trainer trainer(config, *backend);
    trainer.initialise();
    const std::size_t before = backend->memory_stats().live;
    trainer.eval_loss(testing::random_batch(B, T, config.model.vocab_size, 5));
    return backend->memory_stats().live - before;
  };
  const ModelConfig m = testing::tiny_run_config("fp32", true).model;
  const std::size_t not_stored =  // d fc, d qkv, lnf, and each block's ln1, atty, ln2 and gelu(fc)
      static_cast<std::size_t>(B * T * (m.d_ff + 3 * m.d_model + m.d_model + m.n_layer * (3 * m.d_model + m.d_ff))) *
      sizeof(float);
  // the logits [N, V'] in bf16, not fp32 (V' padded to the backend's row multiple; the allocator
  // pads each tensor to 64 bytes)
  const int64_t row_multiple = testing::make_test_backend()->gemm_row_multiple();
  const int64_t width = (m.vocab_size + row_multiple - 1) / row_multiple * row_multiple;
  const std::size_t logits_halved = (static_cast<std::size_t>(B * T * width) * sizeof(float) + 63) / 64 * 64 -
                                    (static_cast<std::size_t>(B * T * width) * sizeof(bf16) + 63) / 64 * 64;
  // and each layer's pre-activation fc [N, F] in bf16, and the backward's gradient of gelu(fc)
  const std::size_t fc_halved =
      static_cast<std::size_t>(m.n_layer + 1) * ((static_cast<std::size_t>(B * T * m.d_ff) * sizeof(float) + 63) / 64 * 64 -
                                                (static_cast<std::size_t>(B * T * m.d_ff) * sizeof(bf16) + 63) / 64 * 64);
  EXPECT_EQ(held_after_eval("bf16-mixed") + not_stored + logits_halved + fc_halved, held_after_eval("fp32"));
  auto trained = [&](bool evaluate_first) {
    const RunConfig config = testing::tiny_run_config("bf16-mixed", true);
    auto backend = testing::make_test_backend();
    Trainer trainer(config, *backend);
    trainer.initialise();
    if (evaluate_first) trainer.eval_loss(testing::random_batch(B, T, config.model.vocab_size, 5));
    const StepResult step = trainer.train_step(testing::random_batch(B, T, config.model.vocab_size, 6));
    std::vector<double> trace = to_host_f64(*backend, trainer.params().flat());
    trace.push_back(step.loss);
    return trace;
  };
  EXPECT_EQ(trained(true), trained(false));
}

// A backend whose attention keeps something else than the probabilities (the CUDA flash
// attention: its rows' logsumexp and a copy of out) says how much in attention_state_shape; the
// model allocates that for every block's state and for the recompute buffer, and its accounting
// follows. This one keeps the CPU's probabilities and 5 elements more, in a flat buffer.
class LargerStateCpuBackend : public cpu::CpuBackend {
 public:
  static constexpr int64_t kExtra = 5;
  LargerStateCpuBackend() : cpu::CpuBackend(Device::Host, "cpu") {}
  Shape attention_state_shape(DType, int64_t batch, int64_t seq_len, int64_t, int64_t n_head) const override {
    return {batch * n_head * seq_len * seq_len + kExtra};
  }
  // The CPU's attention writes the probabilities into the first B*H*T*T elements.
  void attention_forward(const Tensor& out, const Tensor& state, const Tensor& qkv, int64_t n_head) override {
    expect_state(state, qkv, n_head);
    cpu::CpuBackend::attention_forward(out, state, qkv, n_head);
  }
  void attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& state,
                          int64_t n_head) override {
    expect_state(state, qkv, n_head);
    cpu::CpuBackend::attention_backward(dqkv, dout, qkv, state, n_head);
  }

 private:
  static void expect_state(const Tensor& state, const Tensor& qkv, int64_t n_head) {
    const int64_t b = qkv.dim(0), t = qkv.dim(1);
    EXPECT_EQ(state.shape(), Shape({b * n_head * t * t + kExtra}));
  }
};

TEST(Recompute, TheModelKeepsTheAttentionStateTheBackendAsksFor) {
  const ModelConfig m = wide_model();
  for (Recompute mode : {Recompute::None, Recompute::Selective, Recompute::Full}) {
    cpu::CpuBackend plain(Device::Host, "cpu");
    LargerStateCpuBackend larger;
    auto bytes = [&](Backend& be) {
      Gpt model(m, be, DType::F64, nullptr, StageSpan{}, mode);
      model.reserve(2, 8);
      return model.activation_bytes();
    };
    // Each block's own state, or (recomputed) the one shared buffer.
    const int64_t states = mode == Recompute::None ? m.n_layer : 1;
    EXPECT_EQ(bytes(larger) - bytes(plain), states * LargerStateCpuBackend::kExtra * sizeof(double))
        << recompute_name(mode);
  }
  // Training through it gives the plain backend's bits.
  const RunConfig config = testing::tiny_run_config("fp32", true);
  for (Recompute mode : {Recompute::None, Recompute::Selective}) {
    std::vector<double> losses[2];
    cpu::CpuBackend plain(Device::Host, "cpu");
    LargerStateCpuBackend larger;
    Backend* backends[2] = {&plain, &larger};
    for (int i = 0; i < 2; ++i) {
      RunConfig c = config;
      c.train.recompute = mode;
      Trainer trainer(c, *backends[i]);
      trainer.initialise();
      for (int step = 0; step < 2; ++step)
        losses[i].push_back(trainer.train_step(testing::random_batch(c.train.batch_size, c.train.seq_len,
                                                                     c.model.vocab_size, 40 + step)).loss);
    }
    EXPECT_EQ(losses[0], losses[1]) << recompute_name(mode);
  }
}

TEST(Recompute, NamesRoundTripAndBadOnesAreRefused) {
  for (Recompute mode : {Recompute::None, Recompute::Selective, Recompute::Full})
    EXPECT_EQ(parse_recompute(recompute_name(mode)), mode);
  EXPECT_THROW(parse_recompute("partial"), Error);
  nlohmann::json j = default_config_json();
  j["train"]["recompute"] = "everything";
  try {
    parse_run_config(j);
    FAIL() << "an unknown train.recompute was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("train.recompute"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tripod
