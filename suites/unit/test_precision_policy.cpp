// The bf16-mixed precision policy: train.dtype = bf16-mixed keeps fp32 tensors and sets the
// backend's fp32 GEMMs to round their operands to bf16 (Fp32Matmul::Bf16Operands). On the CPU
// that must be exactly the bf16 GEMM (bf16 A and B, fp32 accumulation) on the rounded inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/backend_factory.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/transfer.h"
#include "core/counter_rng.h"
#include "model/linear.h"
#include "support/ordered_sums_cpu_backend.h"
#include "support/padding_cpu_backend.h"
#include "train/run_config.h"

namespace tripod {
namespace {

std::vector<double> random_values(int64_t n, uint64_t seed, double scale) {
  const CounterRng rng(seed, "test.precision_policy");
  std::vector<double> v(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = scale * rng.normal(static_cast<uint64_t>(i));
  return v;
}

Tensor make(Backend& be, const Shape& shape, DType dtype, const std::vector<double>& v) {
  Tensor t = be.alloc(shape, dtype);
  from_host_f64(be, v, t);
  return t;
}

TEST(PrecisionPolicy, Bf16OperandGemmIsTheBf16GemmOfTheRoundedInputsBitForBit) {
  for (const char* name : {"cpu", "emulated"}) {
    auto be = make_backend(name);
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      const int64_t m = 37, n = 29, k = 130;
      const Shape sa = ta ? Shape{k, m} : Shape{m, k}, sb = tb ? Shape{n, k} : Shape{k, n};
      const std::vector<double> va = random_values(m * k, 1 + t, 1.0), vb = random_values(k * n, 11 + t, 0.05);
      const std::vector<double> vc = random_values(m * n, 21 + t, 1.0);
      // Under the policy, on fp32 tensors.
      Tensor a = make(*be, sa, DType::F32, va), b = make(*be, sb, DType::F32, vb), c = make(*be, {m, n}, DType::F32, vc);
      be->set_fp32_matmul(Fp32Matmul::Bf16Operands);
      be->gemm(ta, tb, m, n, k, 0.5, a, sa[1], b, sb[1], 0.25, c, n, DType::F32);
      be->set_fp32_matmul(Fp32Matmul::Exact);
      // The explicit bf16 GEMM on bf16 copies (fp64 -> fp32 -> bf16, as the fp32 tensors were rounded).
      Tensor a16 = be->alloc(sa, DType::BF16), b16 = be->alloc(sb, DType::BF16);
      be->convert(a, a16);
      be->convert(b, b16);
      Tensor want = make(*be, {m, n}, DType::F32, vc);
      be->gemm(ta, tb, m, n, k, 0.5, a16, sa[1], b16, sb[1], 0.25, want, n, DType::F32);
      const std::vector<double> got = to_host_f64(*be, c), ref = to_host_f64(*be, want);
      EXPECT_EQ(std::memcmp(got.data(), ref.data(), got.size() * sizeof(double)), 0) << name << " case " << t;
      // And it is not the exact fp32 GEMM: bf16 operands move the result by ~2^-9 relative.
      Tensor exact = make(*be, {m, n}, DType::F32, vc);
      be->gemm(ta, tb, m, n, k, 0.5, a, sa[1], b, sb[1], 0.25, exact, n, DType::F32);
      const std::vector<double> ex = to_host_f64(*be, exact);
      double largest = 0, diff = 0;
      for (std::size_t i = 0; i < ex.size(); ++i) {
        largest = std::max(largest, std::fabs(ex[i]));
        diff = std::max(diff, std::fabs(ex[i] - got[i]));
      }
      EXPECT_GT(diff / largest, 1e-5) << "the policy changed nothing";
      EXPECT_LT(diff / largest, 2e-2) << "more than bf16 rounding";
    }
  }
}

// TF32 rounding written independently: the nearer of the two neighbours with 13 low mantissa
// bits clear (ties to the one whose 14th bit is clear), chosen by distance in fp64.
double tf32_by_distance(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const float down = std::bit_cast<float>(u & ~0x1FFFu), up = std::bit_cast<float>((u & ~0x1FFFu) + 0x2000u);
  const double d_down = std::fabs(static_cast<double>(x) - down), d_up = std::fabs(static_cast<double>(up) - x);
  if (d_down != d_up) return d_down < d_up ? down : up;
  return ((u >> 13) & 1u) == 0 ? down : up;
}

TEST(PrecisionPolicy, Tf32OperandGemmMultipliesTheTf32RoundedInputs) {
  auto be = make_backend("cpu");
  const int64_t m = 23, n = 19, k = 301;
  const std::vector<double> va = random_values(m * k, 5, 1.0), vb = random_values(k * n, 6, 0.05);
  Tensor a = make(*be, {m, k}, DType::F32, va), b = make(*be, {k, n}, DType::F32, vb), c = be->alloc({m, n}, DType::F32);
  be->set_fp32_matmul(Fp32Matmul::Tf32Operands);
  be->gemm(false, false, m, n, k, 1.0, a, k, b, n, 0.0, c, n, DType::F32);
  be->set_fp32_matmul(Fp32Matmul::Exact);
  const std::vector<double> got = to_host_f64(*be, c);
  // The fp64 product of the independently rounded operands: the fp32 sums differ from it by
  // at most ~k * 2^-24 of the sum of |products|.
  double largest = 0, worst = 0, exact_worst = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double want = 0, exact = 0;
      for (int64_t p = 0; p < k; ++p) {
        const float x = static_cast<float>(va[i * k + p]), y = static_cast<float>(vb[p * n + j]);
        want += tf32_by_distance(x) * tf32_by_distance(y);
        exact += static_cast<double>(x) * y;
      }
      largest = std::max(largest, std::fabs(want));
      worst = std::max(worst, std::fabs(got[i * n + j] - want));
      exact_worst = std::max(exact_worst, std::fabs(got[i * n + j] - exact));
    }
  EXPECT_LT(worst / largest, 1e-5);
  EXPECT_GT(exact_worst / largest, 1e-5) << "TF32 rounding (2^-11) must show against the exact fp32 operands";
}

TEST(PrecisionPolicy, Bf16MixedIsFp32TensorsWithBf16GemmOperands) {
  nlohmann::json j = default_config_json();
  j["model"]["vocab_size"] = 64;
  j["train"]["dtype"] = "bf16-mixed";
  const RunConfig mixed = parse_run_config(j);
  EXPECT_TRUE(mixed.train.bf16_mixed);
  EXPECT_EQ(mixed.train.dtype, DType::F32);
  EXPECT_EQ(precision_name(mixed.train), "bf16-mixed");
  auto be = make_backend("cpu");
  apply_precision_policy(mixed.train, *be);
  EXPECT_EQ(be->fp32_matmul(), Fp32Matmul::Bf16Operands);

  j["train"]["dtype"] = "tf32";
  const RunConfig tf32 = parse_run_config(j);
  EXPECT_TRUE(tf32.train.tf32 && !tf32.train.bf16_mixed);
  EXPECT_EQ(precision_name(tf32.train), "tf32");
  apply_precision_policy(tf32.train, *be);
  EXPECT_EQ(be->fp32_matmul(), Fp32Matmul::Tf32Operands);

  j["train"]["dtype"] = "fp32";
  const RunConfig plain = parse_run_config(j);
  EXPECT_FALSE(plain.train.bf16_mixed);
  EXPECT_EQ(precision_name(plain.train), "fp32");
  apply_precision_policy(plain.train, *be);  // a later run on the same backend gets its own policy
  EXPECT_EQ(be->fp32_matmul(), Fp32Matmul::Exact);
}

// Attention's products follow the policy too: on bf16-rounded q, k, v, dout, probabilities and
// score gradients (the rounding itself is checked against the CUDA backend's replay in
// test_attention_gemms.cpp); fp64 attention and the Exact policy are untouched.
TEST(PrecisionPolicy, Bf16OperandAttentionRoundsItsProductsOperands) {
  const int64_t B = 2, T = 9, C = 16, H = 2;
  const std::vector<double> vqkv = random_values(B * T * 3 * C, 31, 1.0), vdout = random_values(B * T * C, 32, 1.0);
  for (const char* name : {"cpu", "emulated"}) {
    auto be = make_backend(name);
    auto run = [&](Fp32Matmul mode, DType dtype) {
      Tensor qkv = make(*be, {B, T, 3 * C}, dtype, vqkv), dout = make(*be, {B, T, C}, dtype, vdout);
      Tensor out = be->alloc({B, T, C}, dtype), probs = be->alloc({B, H, T, T}, dtype), dqkv = be->alloc({B, T, 3 * C}, dtype);
      be->set_fp32_matmul(mode);
      be->attention_forward(out, probs, qkv, H);
      be->attention_backward(dqkv, dout, qkv, probs, H);
      be->set_fp32_matmul(Fp32Matmul::Exact);
      std::vector<double> all = to_host_f64(*be, out);
      for (const Tensor& t : {probs, dqkv}) {
        const std::vector<double> v = to_host_f64(*be, t);
        all.insert(all.end(), v.begin(), v.end());
      }
      return all;
    };
    const std::vector<double> exact = run(Fp32Matmul::Exact, DType::F32), mixed = run(Fp32Matmul::Bf16Operands, DType::F32);
    double largest = 0, diff = 0;
    for (std::size_t i = 0; i < exact.size(); ++i) {
      largest = std::max(largest, std::fabs(exact[i]));
      diff = std::max(diff, std::fabs(exact[i] - mixed[i]));
    }
    EXPECT_GT(diff / largest, 1e-4) << name << ": the policy changed nothing";
    EXPECT_LT(diff / largest, 3e-2) << name << ": more than bf16 rounding";
    EXPECT_EQ(run(Fp32Matmul::Bf16Operands, DType::F64), run(Fp32Matmul::Exact, DType::F64)) << name << ": fp64 rounded";
  }
}

// Backend::gemm_operands: shared operands rounded once give the bits the per-GEMM rounding gives;
// all or none are prepared (a GEMM's A and B share a dtype), and only under the policy.
TEST(PrecisionPolicy, SharedGemmOperandsAreRoundedOnceToTheSameBits) {
  const int64_t N = 24, O = 16, I = 40;
  for (const char* name : {"cpu", "emulated"}) {
    auto be = make_backend(name);
    Tensor dout = make(*be, {N, O}, DType::F32, random_values(N * O, 41, 1.0));
    Tensor w = make(*be, {O, I}, DType::F32, random_values(O * I, 42, 0.02));
    Tensor x = make(*be, {N, I}, DType::F32, random_values(N * I, 43, 1.0));
    EXPECT_EQ(be->gemm_operands({dout, w, x})[0].dtype(), DType::F32) << "rounded outside the policy";
    be->set_fp32_matmul(Fp32Matmul::Bf16Operands);
    const std::vector<Tensor> ops = be->gemm_operands({dout, w, x});
    ASSERT_EQ(ops.size(), 3u);
    for (const Tensor& t : ops) EXPECT_EQ(t.dtype(), DType::BF16) << name;
    // dX = dout @ W and dW = dout^T @ x, from the shared copies and from the originals
    Tensor dx1 = be->alloc({N, I}, DType::F32), dx2 = be->alloc({N, I}, DType::F32);
    Tensor dw1 = be->alloc({O, I}, DType::F32), dw2 = be->alloc({O, I}, DType::F32);
    be->gemm(false, false, N, I, O, 1.0, ops[0], O, ops[1], I, 0.0, dx1, I, DType::F32);
    be->gemm(false, false, N, I, O, 1.0, dout, O, w, I, 0.0, dx2, I, DType::F32);
    be->gemm(true, false, O, I, N, 1.0, ops[0], O, ops[2], I, 0.0, dw1, I, DType::F32);
    be->gemm(true, false, O, I, N, 1.0, dout, O, x, I, 0.0, dw2, I, DType::F32);
    EXPECT_EQ(to_host_f64(*be, dx1), to_host_f64(*be, dx2)) << name;
    EXPECT_EQ(to_host_f64(*be, dw1), to_host_f64(*be, dw2)) << name;
    // a size a device pads (an odd vocabulary) is prepared too; an fp64 or empty one prepares none
    Tensor odd = make(*be, {N, 97}, DType::F32, random_values(N * 97, 44, 1.0));
    for (const Tensor& t : be->gemm_operands({dout, odd})) EXPECT_EQ(t.dtype(), DType::BF16) << name;
    Tensor wide = make(*be, {N, 3}, DType::F64, random_values(N * 3, 45, 1.0)), empty = be->alloc({0, 4}, DType::F32);
    for (const Tensor& t : be->gemm_operands({dout, wide})) EXPECT_NE(t.dtype(), DType::BF16) << name;
    for (const Tensor& t : be->gemm_operands({dout, empty})) EXPECT_EQ(t.dtype(), DType::F32) << name;
    be->set_fp32_matmul(Fp32Matmul::Exact);
  }
}

// PaddingCpuBackend (suites/support/padding_cpu_backend.h) pads its operand copies as CUDA does, so
// linear_backward's use of padded copies is checked where it runs.
TEST(PrecisionPolicy, LinearBackwardTakesZeroPaddedSharedOperands) {
  for (const auto& [N, O, I] : {std::array<int64_t, 3>{21, 13, 19}, {16, 24, 40}, {3, 50, 8}}) {
    auto run = [&, N = N, O = O, I = I](Backend& be) {
      be.set_fp32_matmul(Fp32Matmul::Bf16Operands);
      Tensor dout = make(be, {N, O}, DType::F32, random_values(N * O, 51, 1.0));
      Tensor w = make(be, {O, I}, DType::F32, random_values(O * I, 52, 0.02));
      Tensor x = make(be, {N, I}, DType::F32, random_values(N * I, 53, 1.0));
      Tensor dinp = be.alloc({N, I}, DType::F32), dw = make(be, {O, I}, DType::F32, random_values(O * I, 54, 0.1));
      Tensor db = be.alloc({O}, DType::F32);
      linear_backward(be, dinp, dw, db, dout, x, w, /*accumulate_dinp=*/false);
      return std::vector<std::vector<double>>{to_host_f64(be, dinp), to_host_f64(be, dw), to_host_f64(be, db)};
    };
    testing::PaddingCpuBackend padding;
    testing::OrderedSumsCpuBackend plain;  // the same GEMM sums, unpadded copies
    EXPECT_EQ(run(padding), run(plain)) << "N " << N << " O " << O << " I " << I;
  }
}

// A backend that fuses the bias gradient into the output gradient's copy (as CUDA does): its
// hook sums the columns itself, in the CPU's row order, and counts every bias sum it is asked for.
class FusingCpuBackend : public cpu::CpuBackend {
 public:
  FusingCpuBackend() : cpu::CpuBackend(Device::Host, "cpu") {}
  int fused = 0, separate = 0;
  void bias_grad(const Tensor& dbias, const Tensor& dout) override {
    ++separate;
    cpu::CpuBackend::bias_grad(dbias, dout);
  }

 protected:
  Tensor bf16_operand_copy_with_bias_grad(const Tensor& x, const Tensor& dbias) override {
    ++fused;
    const int64_t cols = x.dim(-1), rows = x.numel() / cols;
    const std::vector<double> values = to_host_f64(*this, x);
    std::vector<float> sums(static_cast<std::size_t>(cols));
    download(dbias, sums.data());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) sums[c] += static_cast<float>(values[r * cols + c]);
    upload(sums.data(), dbias);
    return bf16_operand_copy(x);
  }
};

// linear_backward asks for its bias gradient once: through the fused hook under bf16-mixed, through
// bias_grad otherwise, with the bits of a plain backend either way (a hook and a bias_grad both
// would add it twice).
TEST(PrecisionPolicy, LinearBackwardSumsTheBiasOnceWithTheOperandCopy) {
  const int64_t N = 24, O = 16, I = 8;
  for (Fp32Matmul policy : {Fp32Matmul::Bf16Operands, Fp32Matmul::Exact}) {
    auto run = [&](Backend& be) {
      be.set_fp32_matmul(policy);
      Tensor dout = make(be, {N, O}, DType::F32, random_values(N * O, 61, 1.0));
      Tensor w = make(be, {O, I}, DType::F32, random_values(O * I, 62, 0.02));
      Tensor x = make(be, {N, I}, DType::F32, random_values(N * I, 63, 1.0));
      Tensor dinp = be.alloc({N, I}, DType::F32), dw = be.alloc({O, I}, DType::F32);
      Tensor db = make(be, {O}, DType::F32, random_values(O, 64, 1.0));
      linear_backward(be, dinp, dw, db, dout, x, w, /*accumulate_dinp=*/false);
      return std::vector<std::vector<double>>{to_host_f64(be, dinp), to_host_f64(be, dw), to_host_f64(be, db)};
    };
    FusingCpuBackend fusing;
    auto plain = make_backend("cpu");
    const bool mixed = policy == Fp32Matmul::Bf16Operands;
    EXPECT_EQ(run(fusing), run(*plain)) << (mixed ? "bf16-operands" : "exact");
    EXPECT_EQ(fusing.fused, mixed ? 1 : 0);
    EXPECT_EQ(fusing.separate, mixed ? 0 : 1);
  }
}

// A CPU backend that counts the operand copies it prepares.
class CountingCpuBackend : public cpu::CpuBackend {
 public:
  CountingCpuBackend() : cpu::CpuBackend(Device::Host, "cpu") {}
  int copies = 0;

 protected:
  Tensor bf16_operand_copy(const Tensor& x) override {
    ++copies;
    return cpu::CpuBackend::bf16_operand_copy(x);
  }
};

// linear_forward may keep its input's bf16 copy for linear_backward: the same bits as rounding it
// in each GEMM, one copy of the input instead of two; outside the policy nothing is kept.
TEST(PrecisionPolicy, AKeptInputCopyGivesTheSameBitsAndIsPreparedOnce) {
  const int64_t N = 20, O = 12, I = 16;
  for (Fp32Matmul policy : {Fp32Matmul::Bf16Operands, Fp32Matmul::Exact}) {
    const bool mixed = policy == Fp32Matmul::Bf16Operands;
    auto run = [&](Backend& be, bool keep) {
      be.set_fp32_matmul(policy);
      Tensor x = make(be, {N, I}, DType::F32, random_values(N * I, 71, 1.0));
      Tensor w = make(be, {O, I}, DType::F32, random_values(O * I, 72, 0.05));
      Tensor b = make(be, {O}, DType::F32, random_values(O, 73, 0.5));
      Tensor dout = make(be, {N, O}, DType::F32, random_values(N * O, 74, 1.0));
      Tensor y = be.alloc({N, O}, DType::F32), dx = be.alloc({N, I}, DType::F32), dw = be.alloc({O, I}, DType::F32);
      Tensor db = be.alloc({O}, DType::F32), kept;
      linear_forward(be, y, x, w, b, keep ? &kept : nullptr);
      EXPECT_EQ(kept.defined(), keep && mixed);
      if (kept.defined()) EXPECT_EQ(kept.dtype(), DType::BF16);
      linear_backward(be, dx, dw, db, dout, x, w, /*accumulate_dinp=*/false, kept);
      return std::vector<std::vector<double>>{to_host_f64(be, y), to_host_f64(be, dx), to_host_f64(be, dw),
                                              to_host_f64(be, db)};
    };
    CountingCpuBackend keeping;
    auto plain = make_backend("cpu");
    EXPECT_EQ(run(keeping, true), run(*plain, false)) << (mixed ? "bf16-operands" : "exact");
    // forward: x and w; backward: dout and w (x's copy kept); without keeping the backward makes 3
    EXPECT_EQ(keeping.copies, mixed ? 4 : 0);
  }
}

// ZeRO-3's bf16 operand gathers hand the linear layers their weights as bf16 (model/linear.h): every
// entry point takes such a weight as its own GEMM operand, with the bits of the fp32 weight it was
// rounded from - forward with and without a kept input and into padded rows, from an input
// operand, backward with and without kept copies - on unpadded and CUDA-like padded copies.
TEST(PrecisionPolicy, AWeightGivenAsItsBf16OperandGivesTheBitsOfTheFp32Weight) {
  for (const auto& [N, O, I] : {std::array<int64_t, 3>{21, 13, 19}, {16, 24, 40}}) {
    auto run = [&, N = N, O = O, I = I](Backend& be, bool as_operand) {
      be.set_fp32_matmul(Fp32Matmul::Bf16Operands);
      Tensor x = make(be, {N, I}, DType::F32, random_values(N * I, 81, 1.0));
      Tensor w32 = make(be, {O, I}, DType::F32, random_values(O * I, 82, 0.05));
      Tensor b = make(be, {O}, DType::F32, random_values(O, 83, 0.5));
      Tensor dout = make(be, {N, O}, DType::F32, random_values(N * O, 84, 1.0));
      Tensor w = w32;
      if (as_operand) {
        w = be.alloc({O, I}, DType::BF16);
        be.convert(w32, w);
        EXPECT_TRUE(is_weight_operand(w));
      }
      std::vector<std::vector<double>> out;
      for (bool keep : {false, true}) {
        Tensor y = be.alloc({N, O}, DType::F32), dx = be.alloc({N, I}, DType::F32), dw = be.alloc({O, I}, DType::F32);
        Tensor db = be.alloc({O}, DType::F32), kept;
        linear_forward(be, y, x, w, b, keep ? &kept : nullptr);
        linear_backward(be, dx, dw, db, dout, x, w, /*accumulate_dinp=*/false, kept);
        for (const Tensor& t : {y, dx, dw, db}) out.push_back(to_host_f64(be, t));
      }
      Tensor padded = be.alloc({N, O + 3}, DType::F32);  // rows longer than O (padded logits)
      linear_forward(be, padded, x, w, Tensor());
      out.push_back(to_host_f64(be, padded));
      const Tensor x_op = be.gemm_operands({x})[0], dout_op = be.gemm_operands({dout})[0];
      Tensor y = be.alloc({N, O}, DType::F32), dx = be.alloc({N, I}, DType::F32), dw = be.alloc({O, I}, DType::F32);
      linear_forward_from_operand(be, y, x_op, w, b);
      linear_backward_from_operand(be, dx, dw, dout_op, N, x, w);
      for (const Tensor& t : {y, dx, dw}) out.push_back(to_host_f64(be, t));
      return out;
    };
    testing::PaddingCpuBackend padding;
    auto plain = make_backend("cpu");
    EXPECT_EQ(run(*plain, true), run(*plain, false)) << "N " << N << " O " << O << " I " << I;
    // Padded copies against the same GEMM sums over unpadded ones (ordered_sums_cpu_backend.h).
    testing::OrderedSumsCpuBackend ordered;
    EXPECT_EQ(run(padding, true), run(ordered, false)) << "padded copies, N " << N << " O " << O << " I " << I;
  }
}

// A released ZeRO-3 gather is poisoned with NaN, a bf16 one too.
TEST(PrecisionPolicy, TheCpuBackendFillsBf16) {
  for (const char* name : {"cpu", "emulated"}) {
    auto be = make_backend(name);
    Tensor t = be->alloc({5}, DType::BF16);
    be->fill(t, std::nan(""));
    for (double v : to_host_f64(*be, t)) EXPECT_TRUE(std::isnan(v)) << name;
    be->fill(t, 1.5);
    EXPECT_EQ(to_host_f64(*be, t), std::vector<double>(5, 1.5)) << name;
  }
}

TEST(PrecisionPolicy, AnUnknownPrecisionIsNamed) {
  nlohmann::json j = default_config_json();
  j["model"]["vocab_size"] = 64;
  for (const char* bad : {"bf16", "fp16-mixed"}) {
    j["train"]["dtype"] = bad;
    try {
      parse_run_config(j);
      ADD_FAILURE() << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("bf16-mixed"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace tripod
