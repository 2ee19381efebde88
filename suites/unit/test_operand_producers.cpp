// Activations made only as their GEMM's operand: under bf16-mixed the model (model/gpt.cpp) makes
// ln1 and ln2 (Backend::layernorm_operand) and the MLP's gelu(fc) (gelu_operand) only as bf16
// copies, feeds them to linear_forward_from_operand, and never stores them in fp32; likewise the
// backward's d fc (gelu_backward_operand), d qkv (attention_backward_operand) and the loss gradient
// (cross_entropy_backward_window_operand), fed to linear_backward_from_operand. The operand must be the
// bits gemm_operands makes of gelu_forward's output, padded where the backend pads, and the layer
// from it the bits of linear_forward/linear_backward with a kept input; outside the policy the
// operand is gelu(x) itself. (test_recompute.cpp checks the model's bits and memory; the CUDA
// kernel is checked against the emulated device by suites/gpu and check-backend.)
#include <gtest/gtest.h>

#include <array>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend_factory.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/transfer.h"
#include "model/linear.h"
#include "model_test_util.h"
#include "support/error_text.h"
#include "support/bf16_gelu_inputs.h"
#include "support/ordered_sums_cpu_backend.h"
#include "support/padding_cpu_backend.h"
#include "train/trainer.h"
#include "kernel_math_test_util.h"

namespace tripod {
namespace {

Tensor random_tensor(Backend& be, const Shape& shape, uint64_t seed, double lo, double hi) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  Tensor t = be.alloc(shape, DType::F32);
  from_host_f64(be, testing::uniform_values<double>(n, seed, "test.operand_producers", lo, hi), t);
  return t;
}

// The backends that make the operand: the CPU's, the emulated device's and a padding one (CUDA's
// copies are padded to multiples of 8 where a size is not one).
std::vector<std::pair<std::string, std::unique_ptr<Backend>>> backends() {
  std::vector<std::pair<std::string, std::unique_ptr<Backend>>> all;
  all.emplace_back("cpu", make_backend("cpu"));
  all.emplace_back("emulated", make_backend("emulated"));
  all.emplace_back("padding", std::make_unique<testing::PaddingCpuBackend>());
  return all;
}

TEST(OperandProducers, TheGeluOperandIsTheCopyOfGeluForwardBitForBit) {
  for (auto& [name, be] : backends())
    for (Fp32Matmul policy : {Fp32Matmul::Bf16Operands, Fp32Matmul::Exact})
      for (const Shape& shape : {Shape{24, 40}, Shape{3, 7, 13}}) {  // [B,T,F] too, and sizes a device pads
        be->set_fp32_matmul(policy);
        const Tensor x = random_tensor(*be, shape, 81, -6.0, 6.0);
        Tensor gelu = be->alloc(shape, DType::F32);
        be->gelu_forward(gelu, x);
        const Tensor want = be->gemm_operands({gelu})[0];
        const Tensor got = be->gelu_operand(x);
        const std::string what = name + (policy == Fp32Matmul::Exact ? " exact " : " bf16-operands ") +
                                 std::to_string(x.numel()) + " elements";
        EXPECT_EQ(got.dtype(), policy == Fp32Matmul::Exact ? DType::F32 : DType::BF16) << what;
        EXPECT_EQ(got.shape(), want.shape()) << what;
        EXPECT_EQ(to_host_f64(*be, got), to_host_f64(*be, want)) << what;
        if (policy == Fp32Matmul::Exact) EXPECT_NE(got.address(), x.address()) << what << ": a new tensor";
      }
}

// LayerNorm's: the operand gemm_operands makes of layernorm_forward's output, and its statistics.
TEST(OperandProducers, TheLayernormOperandIsTheCopyOfItsOutputBitForBit) {
  for (auto& [name, be] : backends())
    for (Fp32Matmul policy : {Fp32Matmul::Bf16Operands, Fp32Matmul::Exact})
      for (const auto& [rows, channels] : std::vector<std::pair<int64_t, int64_t>>{{24, 40}, {7, 13}}) {
        be->set_fp32_matmul(policy);
        const Tensor x = random_tensor(*be, {rows, channels}, 121, -3.0, 5.0);
        const Tensor w = random_tensor(*be, {channels}, 122, 0.5, 1.5), b = random_tensor(*be, {channels}, 123, -1, 1);
        Tensor out = be->alloc({rows, channels}, DType::F32), mean = be->alloc({rows}, DType::F32);
        Tensor rstd = be->alloc({rows}, DType::F32), got_mean = be->alloc({rows}, DType::F32);
        Tensor got_rstd = be->alloc({rows}, DType::F32);
        be->layernorm_forward(out, mean, rstd, x, w, b, 1e-5);
        const Tensor want = be->gemm_operands({out})[0];
        const Tensor got = be->layernorm_operand(got_mean, got_rstd, x, w, b, 1e-5);
        const std::string what = name + (policy == Fp32Matmul::Exact ? " exact " : " bf16-operands ") +
                                 std::to_string(rows) + "x" + std::to_string(channels);
        EXPECT_EQ(got.dtype(), want.dtype()) << what;
        EXPECT_EQ(got.shape(), want.shape()) << what;
        EXPECT_EQ(to_host_f64(*be, got), to_host_f64(*be, want)) << what;
        EXPECT_EQ(to_host_f64(*be, got_mean), to_host_f64(*be, mean)) << what;
        EXPECT_EQ(to_host_f64(*be, got_rstd), to_host_f64(*be, rstd)) << what;
      }
}

// Attention's: the operand gemm_operands makes of attention_forward's output, and its state.
TEST(OperandProducers, TheAttentionOperandIsTheCopyOfItsOutputBitForBit) {
  for (auto& [name, be] : backends())
    for (Fp32Matmul policy : {Fp32Matmul::Bf16Operands, Fp32Matmul::Exact})
      for (const auto& [batch, seq, channels, heads] :
           std::vector<std::array<int64_t, 4>>{{2, 8, 16, 2}, {1, 5, 12, 3}}) {
        be->set_fp32_matmul(policy);
        const Tensor qkv = random_tensor(*be, {batch, seq, 3 * channels}, 124, -2.0, 2.0);
        const Shape state_shape = be->attention_state_shape(DType::F32, batch, seq, channels, heads);
        Tensor out = be->alloc({batch, seq, channels}, DType::F32), state = be->alloc(state_shape, DType::F32);
        Tensor got_state = be->alloc(state_shape, DType::F32);
        be->attention_forward(out, state, qkv, heads);
        const Tensor want = be->gemm_operands({out})[0];
        const Tensor got = be->attention_operand(got_state, qkv, heads);
        const std::string what = name + (policy == Fp32Matmul::Exact ? " exact " : " bf16-operands ") +
                                 std::to_string(batch) + "x" + std::to_string(seq) + "x" + std::to_string(channels);
        EXPECT_EQ(got.dtype(), want.dtype()) << what;
        EXPECT_EQ(got.numel(), want.numel()) << what;
        EXPECT_EQ(to_host_f64(*be, got), to_host_f64(*be, want)) << what;
        EXPECT_EQ(to_host_f64(*be, got_state), to_host_f64(*be, state)) << what;
      }
}

// The loss gradient's: the copy gemm_operands makes of cross_entropy_backward_window's gradient,
// over rows padded past the vocabulary (zero columns) with an ignored target (a zero row).
TEST(OperandProducers, TheLossGradientOperandIsTheCopyOfTheGradientBitForBit) {
  const int64_t N = 12, V = 13, cols = 16;
  const VocabWindow whole{0, V, V};
  for (auto& [name, be] : backends())
    for (Fp32Matmul policy : {Fp32Matmul::Bf16Operands, Fp32Matmul::Exact}) {
      be->set_fp32_matmul(policy);
      std::vector<int32_t> ids(static_cast<std::size_t>(N));
      for (int64_t i = 0; i < N; ++i) ids[static_cast<std::size_t>(i)] = i == 5 ? -1 : static_cast<int32_t>(i * 7 % V);
      Tensor targets = be->alloc({N}, DType::I32);
      be->upload(ids.data(), targets);
      auto logits = [&] { return random_tensor(*be, {N, cols}, 131, -4.0, 4.0); };
      const Tensor lse = be->alloc({N}, DType::F32), losses = be->alloc({N}, DType::F32);
      const Tensor row_max = be->alloc({N}, DType::F32), sums = be->alloc({2, N}, DType::F32);
      const Tensor in_place = logits(), from = logits();
      be->logits_row_max(row_max, in_place, targets, whole);
      be->logits_exp_sums(sums, in_place, row_max, targets, whole);
      be->cross_entropy_from_sums(losses, lse, row_max, sums, targets);
      be->cross_entropy_backward_window(in_place, lse, targets, whole, 0.25);
      const Tensor want = be->gemm_operands({in_place})[0];
      const Tensor got = be->cross_entropy_backward_window_operand(from, lse, targets, whole, 0.25);
      const std::string what = name + (policy == Fp32Matmul::Exact ? " exact" : " bf16-operands");
      EXPECT_EQ(got.dtype(), want.dtype()) << what;
      EXPECT_EQ(got.shape(), want.shape()) << what;
      EXPECT_EQ(to_host_f64(*be, got), to_host_f64(*be, want)) << what;
    }
}

// c_proj from the operand, backward with no fp32 input: the bits of the layer on the stored
// gelu(x) with its kept copy, forward and backward.
TEST(OperandProducers, TheLayerFromTheOperandGivesTheKeptInputsBits) {
  const int64_t N = 21, O = 12, I = 19;
  for (Fp32Matmul policy : {Fp32Matmul::Bf16Operands, Fp32Matmul::Exact}) {
    const bool mixed = policy == Fp32Matmul::Bf16Operands;
    auto run = [&](Backend& be, bool from_operand) {
      be.set_fp32_matmul(policy);
      const Tensor x = random_tensor(be, {N, I}, 91, -4.0, 4.0), w = random_tensor(be, {O, I}, 92, -0.1, 0.1);
      const Tensor b = random_tensor(be, {O}, 93, -0.5, 0.5), dout = random_tensor(be, {N, O}, 94, -1.0, 1.0);
      Tensor y = be.alloc({N, O}, DType::F32), dx = be.alloc({N, I}, DType::F32), dw = be.alloc({O, I}, DType::F32);
      Tensor db = be.alloc({O}, DType::F32);
      if (from_operand) {
        const Tensor op = be.gelu_operand(x);
        linear_forward_from_operand(be, y, op, w, b);
        // under the policy the bf16 copy is all there is of gelu(x); outside it, gelu(x) itself
        linear_backward(be, dx, dw, db, dout, mixed ? Tensor() : op, w, false, mixed ? op : Tensor());
      } else {
        Tensor gelu = be.alloc({N, I}, DType::F32), kept;
        be.gelu_forward(gelu, x);
        linear_forward(be, y, gelu, w, b, &kept);
        linear_backward(be, dx, dw, db, dout, gelu, w, false, kept);
      }
      return std::vector<std::vector<double>>{to_host_f64(be, y), to_host_f64(be, dx), to_host_f64(be, dw),
                                              to_host_f64(be, db)};
    };
    for (auto& [name, be] : backends())
      EXPECT_EQ(run(*be, true), run(*be, false)) << name << (mixed ? " bf16-operands" : " exact");
  }
}

// The LM head from lnf's operand (model/gpt.cpp under bf16-mixed): the logits' rows padded past the
// vocabulary (LayerOps::local_width), no bias. The bits of linear_forward on the stored LayerNorm
// output into the same padded rows (whose padding columns stay as they were), and of the backward
// with the operand as the kept input.
TEST(OperandProducers, TheLmHeadFromTheLayernormOperandFillsPaddedRowsWithTheStoredOutputsBits) {
  const int64_t N = 13, V = 11, padded = 16, C = 24;
  for (Fp32Matmul policy : {Fp32Matmul::Bf16Operands, Fp32Matmul::Exact}) {
    const bool mixed = policy == Fp32Matmul::Bf16Operands;
    auto run = [&](Backend& be, bool from_operand) {
      be.set_fp32_matmul(policy);
      const Tensor res = random_tensor(be, {N, C}, 81, -3.0, 3.0), head = random_tensor(be, {V, C}, 82, -0.1, 0.1);
      const Tensor g = random_tensor(be, {C}, 83, 0.5, 1.5), b = random_tensor(be, {C}, 84, -0.5, 0.5);
      const Tensor dlogits = random_tensor(be, {N, padded}, 85, -1.0, 1.0);
      Tensor logits = random_tensor(be, {N, padded}, 86, 7.0, 8.0);  // the padding columns' old values
      Tensor mean = be.alloc({N}, DType::F32), rstd = be.alloc({N}, DType::F32);
      Tensor dx = be.alloc({N, C}, DType::F32), dw = be.alloc({V, C}, DType::F32);
      be.fill(dw, 0.0);
      if (from_operand) {
        const Tensor op = be.layernorm_operand(mean, rstd, res, g, b, 1e-5);
        linear_forward_from_operand(be, logits, op, head, Tensor());
        linear_backward(be, dx, dw, Tensor(), dlogits, mixed ? Tensor() : op, head, false, mixed ? op : Tensor());
      } else {
        Tensor lnf = be.alloc({N, C}, DType::F32);
        be.layernorm_forward(lnf, mean, rstd, res, g, b, 1e-5);
        linear_forward(be, logits, lnf, head, Tensor());
        linear_backward(be, dx, dw, Tensor(), dlogits, lnf, head, false);
      }
      return std::vector<std::vector<double>>{to_host_f64(be, logits), to_host_f64(be, dx), to_host_f64(be, dw)};
    };
    for (auto& [name, be] : backends())
      EXPECT_EQ(run(*be, true), run(*be, false)) << name << (mixed ? " bf16-operands" : " exact");
  }
  // a bias needs unpadded rows, from the operand as from the input
  auto be = make_backend("cpu");
  be->set_fp32_matmul(Fp32Matmul::Bf16Operands);
  const Tensor w = random_tensor(*be, {V, C}, 87, -1.0, 1.0), bias = random_tensor(*be, {V}, 88, -1.0, 1.0);
  Tensor logits = be->alloc({N, padded}, DType::F32);
  const Tensor op = be->gelu_operand(random_tensor(*be, {N, C}, 89, -1.0, 1.0));
  EXPECT_NE(expected_error([&] { linear_forward_from_operand(*be, logits, op, w, bias); }).find("with a bias"),
            std::string::npos);
}

// The backward's operand: d = gelu_backward(inp, dout) as gemm_operands({d}, dbias) makes it, the
// bias gradient added once; without a bias gradient, the copy alone.
TEST(OperandProducers, TheBackwardOperandIsTheCopyOfTheGeluGradientWithItsBiasGradient) {
  const int64_t N = 21, F = 19;
  for (auto& [name, be] : backends())
    for (Fp32Matmul policy : {Fp32Matmul::Bf16Operands, Fp32Matmul::Exact})
      for (bool with_bias : {true, false}) {
        be->set_fp32_matmul(policy);
        const Tensor inp = random_tensor(*be, {N, F}, 101, -5.0, 5.0), dout = random_tensor(*be, {N, F}, 102, -1, 1);
        const Tensor db_start = random_tensor(*be, {F}, 103, -1.0, 1.0);
        auto bias = [&] {
          if (!with_bias) return Tensor();
          Tensor db = be->alloc({F}, DType::F32);
          be->copy(db_start, db);
          return db;
        };
        const Tensor want_db = bias(), got_db = bias();
        Tensor d = be->alloc({N, F}, DType::F32);
        be->gelu_backward(d, inp, dout);
        const Tensor want = be->gemm_operands({d}, want_db)[0];
        const Tensor got = be->gelu_backward_operand(inp, dout, got_db);
        const std::string what = name + (policy == Fp32Matmul::Exact ? " exact" : " bf16-operands") +
                                 (with_bias ? " with" : " without") + " a bias gradient";
        EXPECT_EQ(got.dtype(), want.dtype()) << what;
        EXPECT_EQ(got.shape(), want.shape()) << what;
        EXPECT_EQ(to_host_f64(*be, got), to_host_f64(*be, want)) << what;
        if (with_bias) EXPECT_EQ(to_host_f64(*be, got_db), to_host_f64(*be, want_db)) << what;
      }
}

// bf16-mixed's pre-activation fc is bf16 (Gpt::rounded_activation_dtype), and so is the gradient
// of gelu(fc) that the backward reads: the GELU, its backward and their operands take them as the
// fp32 values they hold, so each gives the bits (and dtype) of the same call on their fp32
// widenings; under the exact policy too (no operand: fp32 results).
TEST(OperandProducers, ABf16PreActivationGivesTheBitsOfItsFp32Values) {
  for (auto& [name, be] : backends())
    for (Fp32Matmul policy : {Fp32Matmul::Bf16Operands, Fp32Matmul::Exact})
      for (const Shape& shape : {Shape{24, 40}, Shape{3, 7, 13}}) {  // [B,T,F] too, and sizes a device pads
        be->set_fp32_matmul(policy);
        const std::string what = name + (policy == Fp32Matmul::Exact ? " exact " : " bf16-operands ") +
                                 std::to_string(shape.back()) + " columns";
        const Tensor x16 = be->alloc(shape, DType::BF16), x32 = be->alloc(shape, DType::F32);
        be->convert(random_tensor(*be, shape, 121, -6.0, 6.0), x16);
        be->convert(x16, x32);  // exact
        const Tensor dout = random_tensor(*be, shape, 122, -1.0, 1.0), dout16 = be->alloc(shape, DType::BF16);
        be->convert(dout, dout16);
        const Tensor dout32 = be->alloc(shape, DType::F32);
        be->convert(dout16, dout32);  // exact
        for (bool with_bias : {true, false}) {
          auto bias = [&](int) { return with_bias ? random_tensor(*be, {shape.back()}, 123, -1.0, 1.0) : Tensor(); };
          testing::expect_bf16_gelu_inputs_give_their_widenings_bits(*be, x16, x32, dout, dout16, dout32, bias,
                                                                      what + (with_bias ? ", bias" : ""));
        }
      }
  // Only an fp32 output takes a bf16 input.
  auto be = make_backend("cpu");
  const Tensor x16 = be->alloc({4, 8}, DType::BF16), out16 = be->alloc({4, 8}, DType::BF16);
  EXPECT_NE(expected_error([&] { be->gelu_forward(out16, x16); }).find("gelu_forward"), std::string::npos);
  EXPECT_NE(expected_error([&] { be->gelu_backward(out16, x16, out16); }).find("gelu_backward"), std::string::npos);
  // and a bf16 output gradient only with a bf16 input
  const Tensor x32 = be->alloc({4, 8}, DType::F32), d32 = be->alloc({4, 8}, DType::F32);
  EXPECT_NE(expected_error([&] { be->gelu_backward(d32, x32, out16); }).find("gelu_backward"), std::string::npos);
}

// Attention's backward operand: dqkv = attention_backward(...) as gemm_operands({dqkv}, dbias)
// makes it (c_attn's bias gradient added once), from the state attention_forward kept; without a
// bias gradient, the copy alone.
TEST(OperandProducers, TheAttentionBackwardOperandIsTheCopyOfDqkvWithItsBiasGradient) {
  for (auto& [name, be] : backends())
    for (Fp32Matmul policy : {Fp32Matmul::Bf16Operands, Fp32Matmul::Exact})
      for (bool with_bias : {true, false})
        for (const auto& [batch, seq, channels, heads] :
             std::vector<std::array<int64_t, 4>>{{2, 8, 16, 2}, {1, 5, 12, 3}}) {
          be->set_fp32_matmul(policy);
          const Tensor qkv = random_tensor(*be, {batch, seq, 3 * channels}, 131, -2.0, 2.0);
          const Tensor dout = random_tensor(*be, {batch, seq, channels}, 132, -1.0, 1.0);
          Tensor out = be->alloc({batch, seq, channels}, DType::F32);
          Tensor state = be->alloc(be->attention_state_shape(DType::F32, batch, seq, channels, heads), DType::F32);
          be->attention_forward(out, state, qkv, heads);
          const Tensor db_start = random_tensor(*be, {3 * channels}, 133, -1.0, 1.0);
          auto bias = [&] {
            if (!with_bias) return Tensor();
            Tensor db = be->alloc({3 * channels}, DType::F32);
            be->copy(db_start, db);
            return db;
          };
          const Tensor want_db = bias(), got_db = bias();
          Tensor dqkv = be->alloc(qkv.shape(), DType::F32);
          be->attention_backward(dqkv, dout, qkv, state, heads);
          const Tensor want = be->gemm_operands({dqkv}, want_db)[0];
          const Tensor got = be->attention_backward_operand(dout, qkv, state, heads, got_db);
          const std::string what = name + (policy == Fp32Matmul::Exact ? " exact " : " bf16-operands ") +
                                   std::to_string(batch) + "x" + std::to_string(seq) + "x" + std::to_string(channels) +
                                   (with_bias ? " with" : " without") + " a bias gradient";
          EXPECT_EQ(got.dtype(), want.dtype()) << what;
          EXPECT_EQ(got.numel(), want.numel()) << what;
          EXPECT_EQ(to_host_f64(*be, got), to_host_f64(*be, want)) << what;
          if (with_bias) EXPECT_EQ(to_host_f64(*be, got_db), to_host_f64(*be, want_db)) << what;
        }
}

// c_fc's backward from that operand: the bits of linear_backward on the stored gradient, with the
// input's kept copy and without one.
TEST(OperandProducers, TheLayerBackwardFromTheOperandGivesLinearBackwardsBits) {
  const int64_t N = 21, O = 19, I = 12;
  for (Fp32Matmul policy : {Fp32Matmul::Bf16Operands, Fp32Matmul::Exact})
    for (bool keep : {true, false}) {
      const bool mixed = policy == Fp32Matmul::Bf16Operands;
      auto run = [&](Backend& be, bool from_operand) {
        be.set_fp32_matmul(policy);
        const Tensor x = random_tensor(be, {N, I}, 111, -1.0, 1.0), w = random_tensor(be, {O, I}, 112, -0.1, 0.1);
        const Tensor b = random_tensor(be, {O}, 113, -0.5, 0.5), pre = random_tensor(be, {N, O}, 114, -4.0, 4.0);
        const Tensor dgelu = random_tensor(be, {N, O}, 115, -1.0, 1.0);
        Tensor y = be.alloc({N, O}, DType::F32), dx = be.alloc({N, I}, DType::F32), dw = be.alloc({O, I}, DType::F32);
        Tensor db = be.alloc({O}, DType::F32), kept;
        linear_forward(be, y, x, w, b, keep ? &kept : nullptr);
        if (from_operand) {
          const Tensor d_op = be.gelu_backward_operand(pre, dgelu, db);
          linear_backward_from_operand(be, dx, dw, d_op, N, kept.defined() ? Tensor() : x, w, kept);
        } else {
          Tensor d = be.alloc({N, O}, DType::F32);
          be.gelu_backward(d, pre, dgelu);
          linear_backward(be, dx, dw, db, d, x, w, false, kept);
        }
        return std::vector<std::vector<double>>{to_host_f64(be, dx), to_host_f64(be, dw), to_host_f64(be, db)};
      };
      for (auto& [name, be] : backends())
        EXPECT_EQ(run(*be, true), run(*be, false))
            << name << (mixed ? " bf16-operands" : " exact") << (keep ? ", input kept" : "");
    }
}

// A CPU backend that counts the calls that make operands (and the loss's statistics, and its
// forward with the gradient).
class ProducerCountingCpuBackend : public cpu::CpuBackend {
 public:
  ProducerCountingCpuBackend() : cpu::CpuBackend(Device::Host, "cpu") {}
  int layernorm = 0, gelu = 0, gelu_backward = 0, loss_gradient = 0, loss_stats = 0, loss_with_gradient = 0,
      attention = 0, attention_backward = 0, plain_copies = 0;
  void cross_entropy_with_gradient(const Tensor& losses, const Tensor& logits, const Tensor& targets, int64_t vocab,
                                   double grad_scale) override {
    ++loss_with_gradient;
    cpu::CpuBackend::cross_entropy_with_gradient(losses, logits, targets, vocab, grad_scale);
  }
  void logits_stats(const Tensor& row_max, const Tensor& sums, const Tensor& logits, const Tensor& targets,
                    VocabWindow window) override {
    ++loss_stats;
    cpu::CpuBackend::logits_stats(row_max, sums, logits, targets, window);
  }

 protected:
  Tensor bf16_operand_copy(const Tensor& x) override {
    ++plain_copies;
    return cpu::CpuBackend::bf16_operand_copy(x);
  }
  Tensor bf16_layernorm_operand(const Tensor& mean, const Tensor& rstd, const Tensor& inp, const Tensor& weight,
                                const Tensor& bias, double eps) override {
    ++layernorm;
    return cpu::CpuBackend::bf16_layernorm_operand(mean, rstd, inp, weight, bias, eps);
  }
  Tensor bf16_attention_operand(const Tensor& state, const Tensor& qkv, int64_t n_head) override {
    ++attention;
    return cpu::CpuBackend::bf16_attention_operand(state, qkv, n_head);
  }
  Tensor bf16_attention_backward_operand(const Tensor& dout, const Tensor& qkv, const Tensor& state, int64_t n_head,
                                         const Tensor& dbias) override {
    ++attention_backward;
    return cpu::CpuBackend::bf16_attention_backward_operand(dout, qkv, state, n_head, dbias);
  }
  Tensor bf16_gelu_operand(const Tensor& x) override {
    ++gelu;
    return cpu::CpuBackend::bf16_gelu_operand(x);
  }
  Tensor bf16_gelu_backward_operand(const Tensor& inp, const Tensor& dout, const Tensor& dbias) override {
    ++gelu_backward;
    return cpu::CpuBackend::bf16_gelu_backward_operand(inp, dout, dbias);
  }
  Tensor bf16_cross_entropy_operand(const Tensor& logits, const Tensor& logsumexp, const Tensor& targets,
                                    VocabWindow window, double grad_scale) override {
    ++loss_gradient;
    return cpu::CpuBackend::bf16_cross_entropy_operand(logits, logsumexp, targets, window, grad_scale);
  }
};

// The training step takes the operand paths: under bf16-mixed each block makes ln1, atty, ln2 and
// gelu(fc) only as operands and its backward d qkv and d fc, and the head lnf, once per
// micro-batch; in fp32 none of them. (The bits are those of the fp32 paths, so a step that fell
// back to them would pass every comparison and only this count would show it.) The loss gradient
// needs no operand: it is written over the bf16 logits, its own operand, by the forward. The plain copies a
// micro-batch makes: in the forward a block's four weights and atty, and the head's weight; in
// the backward only output gradients (here without biases, so not fused with a bias gradient):
// a block's dres twice, through the CPU's unfused producers dqkv and d fc. No weight: the
// backward takes the copies the forward kept (it made a block's four and the head's again
// before, 4 L + 1 more).
TEST(OperandProducers, ABf16MixedStepMakesTheOperandOnlyActivationsAsOperands) {
  for (const char* dtype : {"bf16-mixed", "fp32"}) {
    const int64_t micro = 2;
    const RunConfig config = testing::tiny_run_config(dtype, true, micro);
    ProducerCountingCpuBackend be;
    testing::train_one_step(be, config);
    const bool mixed = std::string(dtype) == "bf16-mixed";
    const int64_t per_layer = mixed ? config.model.n_layer * micro : 0;
    EXPECT_EQ(be.layernorm, 2 * per_layer + (mixed ? micro : 0)) << dtype;  // ln1, ln2 a block; lnf
    EXPECT_EQ(be.gelu, per_layer) << dtype;
    EXPECT_EQ(be.attention, per_layer) << dtype;
    EXPECT_EQ(be.gelu_backward, per_layer) << dtype;
    EXPECT_EQ(be.attention_backward, per_layer) << dtype;
    EXPECT_EQ(be.loss_gradient, 0) << dtype;  // the bf16 logits take their gradient in place: no operand made
    // The trainer's forwards know the backward's scale: the loss and its gradient in one call a
    // micro-batch, under every policy (no separate statistics)
    EXPECT_EQ(be.loss_with_gradient, micro) << dtype;
    EXPECT_EQ(be.loss_stats, 0) << dtype;
    EXPECT_EQ(be.plain_copies, mixed ? micro * ((5 * config.model.n_layer + 1) + 4 * config.model.n_layer) : 0)
        << dtype;
  }
}

// CUDA pads both the LM head's weight copy and the logits' rows to multiples of 8, so the head's
// input-gradient product runs over the padded vocabulary (k = 16 here, not 11): the loss
// gradient's zero columns against the copy's zero rows. The emulated device pads the logits but
// not the copies; a backend that pads both runs the device's shapes on the host, and three steps
// must leave an unpadded backend's parameters bit for bit: the zeros add nothing where both sum
// their GEMMs in index order (support/ordered_sums_cpu_backend.h; OpenBLAS's own kernels need not).
TEST(OperandProducers, APaddedHeadCopyAndPaddedLogitsGiveThePlainBackendsBits) {
  for (const char* dtype : {"bf16-mixed", "fp32"})
    for (bool tied : {true, false}) {
      const RunConfig config = testing::tiny_run_config(dtype, tied);
      ASSERT_NE(config.model.vocab_size % 8, 0) << "the test needs a vocabulary the device pads";
      auto train = [&](Backend& be) {
        Trainer trainer(config, be);
        trainer.initialise();
        std::vector<double> losses;
        for (uint64_t step = 0; step < 3; ++step)
          losses.push_back(trainer.train_step(testing::random_batch(4, 5, config.model.vocab_size, 31 + step)).loss);
        std::vector<double> out = to_host_f64(be, trainer.params().flat());
        out.insert(out.end(), losses.begin(), losses.end());
        return out;
      };
      testing::PaddingCpuBackend padding(8);
      testing::OrderedSumsCpuBackend plain;  // the same GEMM sums, nothing padded
      EXPECT_EQ(train(padding), train(plain)) << dtype << (tied ? " tied" : " untied");
    }
}

TEST(OperandProducers, AMissingInputOrOperandIsNamed) {
  auto be = make_backend("cpu");
  be->set_fp32_matmul(Fp32Matmul::Bf16Operands);
  const Tensor w = random_tensor(*be, {4, 8}, 95, -1.0, 1.0), dout = random_tensor(*be, {6, 4}, 96, -1.0, 1.0);
  Tensor dx = be->alloc({6, 8}, DType::F32), dw = be->alloc({4, 8}, DType::F32);
  EXPECT_NE(expected_error([&] { linear_backward(*be, dx, dw, Tensor(), dout, Tensor(), w, false); })
                .find("no kept copy"),
            std::string::npos);
  EXPECT_NE(expected_error([&] { be->gelu_operand(be->alloc({0, 8}, DType::F32)); }).find("gelu_operand"),
            std::string::npos);
  // an operand with fewer rows than the output asks for
  const Tensor small = be->gelu_operand(random_tensor(*be, {3, 8}, 97, -1.0, 1.0));
  Tensor y = be->alloc({6, 4}, DType::F32);
  EXPECT_NE(expected_error([&] { linear_forward_from_operand(*be, y, small, w, Tensor()); })
                .find("linear_forward_from_operand"),
            std::string::npos);
  // the backward's: no input and no kept copy; an operand with fewer rows; mismatched sizes
  const Tensor dout_op = be->gelu_backward_operand(dout, dout, Tensor());
  EXPECT_NE(expected_error([&] { linear_backward_from_operand(*be, dx, dw, dout_op, 6, Tensor(), w); })
                .find("no kept copy"),
            std::string::npos);
  const Tensor x = random_tensor(*be, {6, 8}, 98, -1.0, 1.0);
  EXPECT_NE(expected_error([&] { linear_backward_from_operand(*be, dx, dw, dout_op, 7, x, w); })
                .find("linear_backward_from_operand"),
            std::string::npos);
  EXPECT_NE(expected_error([&] { be->gelu_backward_operand(dout, x, Tensor()); }).find("gelu_backward_operand"),
            std::string::npos);
  EXPECT_NE(expected_error([&] { be->attention_backward_operand(x, x, x, 2, Tensor()); })
                .find("attention_backward_operand"),
            std::string::npos);
  Tensor mean = be->alloc({0}, DType::F32), rstd = be->alloc({0}, DType::F32);
  EXPECT_NE(expected_error([&] { be->layernorm_operand(mean, rstd, be->alloc({0, 8}, DType::F32), w, w, 1e-5); })
                .find("layernorm_operand"),
            std::string::npos);
}

}  // namespace
}  // namespace tripod
