// The emulated device's flash attention (TRIPOD_CUDA_ATTENTION=flash): the CUDA flash kernels'
// block algorithms run on the host, through the model and the trainer. What this proves on the
// CPU before any GPU runs the kernels: the state the model keeps for them (each block's, and the
// recompute buffer's), that training through them stays within the bound gpu-check's flash step
// gates the GPU with, that check-backend compares their results and leaves their state out, and
// that a state buffer sized for the other attention is an error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/backend_factory.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/check/backend_check.h"
#include "backend/transfer.h"
#include "core/error.h"
#include "support/error_text.h"
#include "support/flash_attention_asked.h"
#include "model/gpt.h"
#include "model_test_util.h"
#include "train/trainer.h"

namespace tripod {
namespace {

using testing::FlashAttentionAsked;

// `variant`: flash, or flash-mma (the forward of backend/kernels/flash_forward_warp.h, its warps
// run by the host warp executor; the same state and backward).
std::unique_ptr<Backend> emulated_flash(const char* variant = "flash") {
  FlashAttentionAsked asked(variant);
  return make_backend("emulated");
}

constexpr const char* kVariants[] = {"flash", "flash-mma"};

// tiny's shape at a head size the flash kernels take (16) and T > 16.
RunConfig flash_sized_config(Recompute recompute) {
  RunConfig c = testing::tiny_run_config("bf16-mixed", true);
  c.model.d_model = 32, c.model.n_head = 2, c.model.d_ff = 64, c.model.context = 20;
  c.train.seq_len = 20, c.train.batch_size = 2;
  c.train.recompute = recompute;
  return c;
}

std::vector<double> losses_of(const RunConfig& config, Backend& backend, int steps) {
  Trainer trainer(config, backend);
  trainer.initialise();
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s)
    losses.push_back(trainer.train_step(testing::random_batch(config.train.batch_size, config.train.seq_len,
                                                              config.model.vocab_size, 70 + s))
                         .loss);
  return losses;
}

TEST(EmulatedFlashAttention, TakesFp32OnBf16OperandsAtSupportedShapesOnly) {
  auto flash = emulated_flash();
  EXPECT_NE(flash->name().find("flash attention"), std::string::npos) << flash->name();
  EXPECT_EQ(make_backend("emulated")->name().find("flash"), std::string::npos);  // only when asked
  // B 2, T 20, C 32, H 2: head size 16.
  EXPECT_EQ(flash->attention_state_shape(DType::F32, 2, 20, 32, 2), Shape({2, 2, 20, 20}));  // exact fp32 policy
  flash->set_fp32_matmul(Fp32Matmul::Bf16Operands);
  EXPECT_EQ(flash->attention_state_shape(DType::F32, 2, 20, 32, 2), Shape({2 * 2 * 20 + 2 * 20 * 32}));
  EXPECT_TRUE(flash->takes_flash_attention(DType::F32, 20, 32, 2));
  EXPECT_EQ(flash->attention_state_shape(DType::F64, 2, 20, 32, 2), Shape({2, 2, 20, 20}));
  EXPECT_EQ(flash->attention_state_shape(DType::F32, 2, 20, 40, 2), Shape({2, 2, 20, 20}));  // head size 20
  EXPECT_EQ(flash->attention_state_shape(DType::F32, 2, 16, 32, 2), Shape({2, 2, 16, 16}));  // T = hd
  EXPECT_FALSE(flash->takes_flash_attention(DType::F32, 16, 32, 2));
}

// Flash rounds each probability before the division by the row sum, the CPU's emulation after it:
// on a model this small that is most of what bf16 does to attention, so the losses drift apart by
// about as much as bf16-mixed and fp32 do. The bound is gpu-check's flash gate: 2.5x the bf16
// effect (bf16-mixed vs fp32 on the CPU) of the same run, over 10 steps, as the gate's. Fewer steps
// are too few for the effect: both it and the gap are sums of rounding noise, which can cancel for
// a few steps (2026-12-06, with the gradient of gelu(fc) in bf16: after 4 steps the effect was
// 3.2e-5 and the gap 1.4e-4, after 10 steps 2.2e-4 and 1.7e-4; 4 steps with 2x had passed
// before, 2.1e-4 against 3.5e-4). A wrong index, mask or rescale moves a loss by far more.
TEST(EmulatedFlashAttention, TrainsWithinTheBf16EffectOfTheCpusEmulationAndKeepsItsState) {
  for (const char* variant : kVariants) {
    SCOPED_TRACE(variant);
    for (Recompute mode : {Recompute::None, Recompute::Selective}) {
      const RunConfig config = flash_sized_config(mode);
      RunConfig fp32 = config;
      fp32.train.bf16_mixed = false;
      auto cpu = make_backend("cpu");
      auto flash = emulated_flash(variant);
      const std::vector<double> want = losses_of(config, *cpu, 10), got = losses_of(config, *flash, 10);
      const std::vector<double> exact = losses_of(fp32, *cpu, 10);
      double flash_gap = 0, bf16_effect = 0;
      for (std::size_t i = 0; i < want.size(); ++i) {
        flash_gap = std::max(flash_gap, std::fabs(got[i] - want[i]) / std::fabs(want[i]));
        bf16_effect = std::max(bf16_effect, std::fabs(want[i] - exact[i]) / std::fabs(exact[i]));
      }
      EXPECT_LE(flash_gap, 2.5 * bf16_effect) << recompute_name(mode);
      EXPECT_GT(flash_gap, 0) << recompute_name(mode);  // not the CPU's bits: flash really ran

      // The model keeps the flash state instead of the probabilities: per block (or once, recomputed).
      auto bytes = [&](Backend& be) {
        be.set_fp32_matmul(Fp32Matmul::Bf16Operands);
        Gpt model(config.model, be, DType::F32, nullptr, StageSpan{}, mode);
        model.reserve(2, 20);
        return static_cast<int64_t>(model.activation_bytes());
      };
      auto emulated = make_backend("emulated");  // the same padded logits, the probabilities kept
      const int64_t probs = 2 * 2 * 20 * 20, state = 2 * 2 * 20 + 2 * 20 * 32;
      const int64_t states = mode == Recompute::None ? config.model.n_layer : 1;
      // flash-mma's kernels read only qkv's bf16 rounding: each block keeps qkv in bf16, half its
      // bytes; and the backward's scratch for attention's output gradient, but under selective
      // recomputation (which writes the recomputed fp32 output there)
      const bool mma = std::string(variant) == "flash-mma";
      const int64_t qkv_halved = mma ? config.model.n_layer * 2 * 20 * 3 * 32 * 2 : 0;
      const int64_t datty_halved = mma && mode != Recompute::Selective ? 2 * 20 * 32 * 2 : 0;
      EXPECT_EQ(bytes(*emulated) - bytes(*flash), states * (probs - state) * 4 + qkv_halved + datty_halved)
          << recompute_name(mode);
    }
  }
}

// The emulated device as it is, but keeping qkv in the policy's fp32 although its attention reads
// only qkv's bf16 rounding: what the model ran before attention_input_dtype.
struct Fp32QkvBackend : cpu::CpuBackend {
  Fp32QkvBackend() : cpu::CpuBackend(Device::Emulated, "emulated, fp32 qkv") {}
  DType attention_input_dtype(DType dtype, int64_t, int64_t, int64_t) const override { return dtype; }
};

// flash-mma keeps qkv in bf16 (c_attn's GEMM writes the rounding of its fp32 result, which the
// kernels read instead of a copy made each call), and the backward's output gradient of attention
// (c_proj's dX product, likewise; fp32 under selective recomputation): training gives the very bits
// of the fp32 qkv and gradient, with every recomputation mode (the recomputed qkv is bf16 too).
TEST(EmulatedFlashAttention, FlashMmaKeepsQkvInBf16WithTheBitsOfAnFp32Qkv) {
  auto bf16_qkv = emulated_flash("flash-mma");
  std::unique_ptr<Backend> fp32_qkv;
  {
    FlashAttentionAsked asked("flash-mma");
    fp32_qkv = std::make_unique<Fp32QkvBackend>();
  }
  bf16_qkv->set_fp32_matmul(Fp32Matmul::Bf16Operands);
  EXPECT_EQ(bf16_qkv->attention_input_dtype(DType::F32, 20, 32, 2), DType::BF16);  // head size 16
  EXPECT_EQ(bf16_qkv->attention_input_dtype(DType::F32, 200, 256, 2), DType::F32);  // 128: the block backward
  EXPECT_EQ(bf16_qkv->attention_input_dtype(DType::F64, 20, 32, 2), DType::F64);
  EXPECT_EQ(emulated_flash("flash")->attention_input_dtype(DType::F32, 20, 32, 2), DType::F32);
  bf16_qkv->set_fp32_matmul(Fp32Matmul::Exact);
  EXPECT_EQ(bf16_qkv->attention_input_dtype(DType::F32, 20, 32, 2), DType::F32);  // fp32: no flash
  for (Recompute mode : {Recompute::None, Recompute::Selective, Recompute::Full}) {
    const RunConfig config = flash_sized_config(mode);
    const std::vector<double> got = losses_of(config, *bf16_qkv, 4), want = losses_of(config, *fp32_qkv, 4);
    for (std::size_t i = 0; i < want.size(); ++i)
      EXPECT_EQ(got[i], want[i]) << recompute_name(mode) << " step " << i + 1;
  }
}

// The backward from the model's bf16 output gradient, op by op: the bits of the fp32 gradient's, as
// dqkv and as its operand with the bias gradient.
TEST(EmulatedFlashAttention, FlashMmaTakesABf16OutputGradientWithTheBitsOfItsFp32Value) {
  auto be = emulated_flash("flash-mma");
  be->set_fp32_matmul(Fp32Matmul::Bf16Operands);
  const int64_t B = 2, T = 40, C = 32, H = 2;
  std::vector<double> values(static_cast<std::size_t>(B * T * 3 * C));
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = std::sin(0.7 * static_cast<double>(i));
  Tensor qkv32 = be->alloc({B, T, 3 * C}, DType::F32), qkv = be->alloc({B, T, 3 * C}, DType::BF16);
  from_host_f64(*be, values, qkv32);
  be->convert(qkv32, qkv);
  Tensor dout = be->alloc({B, T, C}, DType::F32), dout16 = be->alloc({B, T, C}, DType::BF16);
  from_host_f64(*be, std::vector<double>(values.begin(), values.begin() + B * T * C), dout);
  be->scale(dout, 0.37);
  be->convert(dout, dout16);
  Tensor out = be->alloc({B, T, C}, DType::F32);
  Tensor state = be->alloc(be->attention_state_shape(DType::F32, B, T, C, H), DType::F32);
  be->attention_forward(out, state, qkv, H);
  auto dqkv_of = [&](const Tensor& dy) {
    Tensor dqkv = be->alloc({B, T, 3 * C}, DType::F32);
    be->attention_backward(dqkv, dy, qkv, state, H);
    return to_host_f64(*be, dqkv);
  };
  EXPECT_EQ(dqkv_of(dout16), dqkv_of(dout));
  auto operand_of = [&](const Tensor& dy) {
    Tensor db = be->alloc({3 * C}, DType::F32);
    std::vector<double> op = to_host_f64(*be, be->attention_backward_operand(dy, qkv, state, H, db));
    for (double x : to_host_f64(*be, db)) op.push_back(x);
    return op;
  };
  EXPECT_EQ(operand_of(dout16), operand_of(dout));
  // where the attention reads fp32 (qkv fp32: the plain flash kernels), a bf16 dout is refused by name
  auto flash = emulated_flash("flash");
  flash->set_fp32_matmul(Fp32Matmul::Bf16Operands);
  Tensor state32 = flash->alloc(flash->attention_state_shape(DType::F32, B, T, C, H), DType::F32);
  flash->attention_forward(out, state32, qkv32, H);
  Tensor dqkv = flash->alloc({B, T, 3 * C}, DType::F32);
  EXPECT_NE(expected_error([&] { flash->attention_backward(dqkv, dout16, qkv32, state32, H); }).find("attention_backward"),
            std::string::npos);
}

// flash-mma's forward writes the attention's bf16 GEMM operand itself (no fp32 out; its state keeps
// its own copy): the bits of the fp32 out's copy, from a bf16 qkv and from an fp32 one (the
// backend's own copy of it), and the same state as the fp32 forward.
TEST(EmulatedFlashAttention, FlashMmaWritesItsOutputsBf16OperandWithTheBitsOfTheFp32OutsCopy) {
  auto be = emulated_flash("flash-mma");
  be->set_fp32_matmul(Fp32Matmul::Bf16Operands);
  const int64_t B = 2, T = 40, C = 32, H = 2;
  std::vector<double> values(static_cast<std::size_t>(B * T * 3 * C));
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = 1.7 * std::sin(0.37 * static_cast<double>(i));
  Tensor qkv32 = be->alloc({B, T, 3 * C}, DType::F32), qkv16 = be->alloc({B, T, 3 * C}, DType::BF16);
  from_host_f64(*be, values, qkv32);
  be->convert(qkv32, qkv16);
  const Shape state_shape = be->attention_state_shape(DType::F32, B, T, C, H);
  Tensor out = be->alloc({B, T, C}, DType::F32), state = be->alloc(state_shape, DType::F32);
  be->attention_forward(out, state, qkv16, H);
  Tensor copy = be->alloc({B, T, C}, DType::BF16);
  be->convert(out, copy);
  for (const Tensor& qkv : {qkv16, qkv32}) {
    Tensor operand_state = be->alloc(state_shape, DType::F32);
    const Tensor operand = be->attention_operand(operand_state, qkv, H);
    ASSERT_EQ(operand.dtype(), DType::BF16) << qkv.describe();
    EXPECT_EQ(to_host_f64(*be, operand), to_host_f64(*be, copy)) << qkv.describe();
    EXPECT_EQ(to_host_f64(*be, operand_state), to_host_f64(*be, state)) << qkv.describe();
  }
}

// flash-mma's register backward writes dqkv as c_attn's bf16 operand itself (no fp32 dqkv): the
// bits of the fp32 dqkv's copy, and the bias gradient added from its partial sums, within fp32
// rounding of bias_grad over the fp32 dqkv (another order of the same sums); from fp32 and bf16
// qkv and dout. Above head size 64 (the block backward) the operand is the fp32 dqkv's copy.
TEST(EmulatedFlashAttention, FlashMmaWritesDqkvAsItsBf16OperandWithTheBiasGradient) {
  auto be = emulated_flash("flash-mma");
  be->set_fp32_matmul(Fp32Matmul::Bf16Operands);
  for (const int64_t C : {int64_t{32}, int64_t{128}, int64_t{256}}) {  // head sizes 16, 64, 128
    SCOPED_TRACE("C " + std::to_string(C));
    const int64_t B = 2, T = 130, H = 2;  // T past the largest head size: flash at each
    ASSERT_TRUE(be->takes_flash_attention(DType::F32, T, C, H));
    std::vector<double> values(static_cast<std::size_t>(B * T * 3 * C));
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = 1.3 * std::sin(0.61 * static_cast<double>(i));
    Tensor qkv32 = be->alloc({B, T, 3 * C}, DType::F32), qkv16 = be->alloc({B, T, 3 * C}, DType::BF16);
    from_host_f64(*be, values, qkv32);
    be->convert(qkv32, qkv16);
    be->convert(qkv16, qkv32);  // exact: the same values either way
    Tensor dout = be->alloc({B, T, C}, DType::F32), dout16 = be->alloc({B, T, C}, DType::BF16);
    from_host_f64(*be, std::vector<double>(values.begin() + 7, values.begin() + 7 + B * T * C), dout);
    be->convert(dout, dout16);
    const bool registers = C / H <= 64;
    const Tensor& qkv = registers ? qkv16 : qkv32;  // the model's bf16 qkv where flash-mma reads only that
    Tensor out = be->alloc({B, T, C}, DType::F32);
    Tensor state = be->alloc(be->attention_state_shape(DType::F32, B, T, C, H), DType::F32);
    be->attention_forward(out, state, qkv, H);
    Tensor dqkv = be->alloc({B, T, 3 * C}, DType::F32), want_db = be->alloc({3 * C}, DType::F32);
    be->attention_backward(dqkv, dout, qkv, state, H);
    be->fill(want_db, 0.5);
    be->bias_grad(want_db, dqkv);
    Tensor want = be->alloc({B, T, 3 * C}, DType::BF16);
    be->convert(dqkv, want);
    const std::vector<double> want_bias = to_host_f64(*be, want_db);
    double largest = 0;
    for (double x : want_bias) largest = std::max(largest, std::fabs(x));
    for (const Tensor& dy : {dout, dout16}) {
      if (!registers && dy.dtype() == DType::BF16) continue;  // (a bf16 dout comes with a bf16 qkv only)
      Tensor db = be->alloc({3 * C}, DType::F32);
      be->fill(db, 0.5);  // accumulated into, as a micro-batch's bias gradient is
      const Tensor operand = be->attention_backward_operand(dy, qkv, state, H, db);
      EXPECT_EQ(to_host_f64(*be, operand), to_host_f64(*be, want)) << dy.describe();
      const std::vector<double> got_bias = to_host_f64(*be, db);
      for (std::size_t i = 0; i < got_bias.size(); ++i)
        EXPECT_NEAR(got_bias[i], want_bias[i], 1e-5 * largest) << "db[" << i << "] " << dy.describe();
    }
  }
}

// A bf16 qkv where the attention reads fp32 (the block flash kernels, or flash-mma's block backward
// above head size 64) is refused by name, not read as floats.
TEST(EmulatedFlashAttention, ABf16QkvForAnAttentionThatReadsFp32IsAnError) {
  auto flash = emulated_flash("flash");
  flash->set_fp32_matmul(Fp32Matmul::Bf16Operands);
  const int64_t B = 2, T = 20, C = 32, H = 2;
  Tensor qkv = flash->alloc({B, T, 3 * C}, DType::BF16), out = flash->alloc({B, T, C}, DType::F32);
  Tensor state = flash->alloc({B * H * T + B * T * C}, DType::F32);
  const std::string error = expected_error([&] { flash->attention_forward(out, state, qkv, H); });
  EXPECT_NE(error.find("attention_forward: a bf16 qkv"), std::string::npos) << error;
  EXPECT_NE(error.find("attention_input_dtype"), std::string::npos) << error;
}

TEST(EmulatedFlashAttention, CheckBackendComparesItsResultsAndLeavesItsStateOut) {
  for (const char* variant : kVariants) {
    SCOPED_TRACE(variant);
    auto cpu = make_backend("cpu");
    auto flash = emulated_flash(variant);
    int flash_cases = 0;
    for (const auto& c : backend_check::all_op_cases({DType::F32, DType::BF16})) {
      if (c.op.find("attention") == std::string::npos) continue;
      const backend_check::OpResult r = backend_check::check_backend(*flash, *cpu, {c}).at(0);
      EXPECT_TRUE(r.pass) << c.op << " " << c.shape << ": " << r.error << " worst " << r.worst_output << " "
                          << r.max_rel;
      if (c.op.find("bf16") != std::string::npos && !r.bit_identical) ++flash_cases;
    }
    EXPECT_GE(flash_cases, 2);  // the head-size-64 shapes ran flash and compared out, dq, dk, dv
  }
}

TEST(EmulatedFlashAttention, TheRegisterForwardSaysSoInTheBackendsName) {
  EXPECT_NE(emulated_flash("flash-mma")->name().find("flash attention (mma tiles)"), std::string::npos);
  EXPECT_EQ(emulated_flash("flash")->name().find("mma"), std::string::npos);
}

TEST(EmulatedFlashAttention, AStateBufferForTheOtherAttentionIsAnErrorNamingBothSizes) {
  auto flash = emulated_flash();
  flash->set_fp32_matmul(Fp32Matmul::Bf16Operands);
  const int64_t B = 2, T = 20, C = 32, H = 2;
  Tensor qkv = flash->alloc({B, T, 3 * C}, DType::F32), out = flash->alloc({B, T, C}, DType::F32);
  Tensor small = flash->alloc({B * H * T + B * T * C}, DType::F32);  // the flash state
  flash->attention_forward(out, small, qkv, H);                      // fits
  flash->set_fp32_matmul(Fp32Matmul::Exact);                         // the GEMM attention needs B*H*T*T
  try {
    flash->attention_forward(out, small, qkv, H);
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("attention_forward: the attention state (probs) holds 1360 elements"), std::string::npos)
        << what;
    EXPECT_NE(what.find("keeps the probabilities, 1600"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace tripod
