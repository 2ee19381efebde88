// The CUDA flash attention (TRIPOD_CUDA_ATTENTION=flash, and flash-mma's forward) on a GPU against the emulated device's,
// which runs the same block algorithms on the host (backend/kernels/flash_attention_block.h): the
// same tiles, masks and rounding points, so what differs is the order of the tile products' fp32
// sums (tensor cores against a loop) and the bf16 roundings that order moves by a step. Small
// shapes, so that gpu-check's flash step can run this test under racecheck and memcheck in
// seconds. Skipped with the reason where no GPU is usable.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend_factory.h"
#include "backend/transfer.h"
#include "core/bf16.h"
#include "core/counter_rng.h"
#include "core/error.h"
#include "support/flash_attention_asked.h"
#include "support/padding_cpu_backend.h"

namespace tripod {
namespace {

using testing::FlashAttentionAsked;

struct Results {
  std::vector<float> out, lse, dqkv;
  std::vector<float> operand;  // Backend::attention_operand's bf16 copy of out, widened (flash-mma writes it itself)
  // attention_backward_operand's bf16 dqkv, widened, and the bias gradient it added to zeros
  // (flash-mma's register backward writes both itself: the sums from its partial sums)
  std::vector<float> dqkv_operand, dbias;
};

// x's values rounded to bf16 and widened back: what a bf16 copy of x holds.
std::vector<float> bf16_rounded(const std::vector<float>& x) {
  std::vector<float> r(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) r[i] = bf16_to_float(float_to_bf16(x[i]));
  return r;
}

// A GEMM operand's [rows, cols] values, widened: the CUDA backend pads a copy it makes to multiples
// of 8 in both sizes where a size is not one (gemm_layout.h's operand_copy_shape; here B*T = 130),
// with zeros, which are checked and left out.
std::vector<float> operand_values(Backend& be, const Tensor& operand, int64_t rows, int64_t cols) {
  const std::vector<double> all = to_host_f64(be, operand);  // bf16 values, exactly
  const int64_t ld = operand.dim(-1), stored_rows = operand.numel() / std::max<int64_t>(ld, 1);
  EXPECT_GE(ld, cols);
  EXPECT_GE(stored_rows, rows);
  std::vector<float> values;
  int64_t nonzero_padding = 0;
  for (int64_t r = 0; r < stored_rows; ++r)
    for (int64_t c = 0; c < ld; ++c) {
      const double v = all[static_cast<std::size_t>(r * ld + c)];
      if (r < rows && c < cols)
        values.push_back(static_cast<float>(v));
      else if (v != 0.0)
        ++nonzero_padding;
    }
  EXPECT_EQ(nonzero_padding, 0) << "the operand's padding, [" << stored_rows << ", " << ld << "] for [" << rows
                                << ", " << cols << "], must be zeros";
  return values;
}

// `bf16_qkv`: qkv given as its bf16 rounding (Backend::attention_input_dtype's, as the model keeps it
// under flash-mma at head sizes up to 64) instead of fp32; `bf16_dout` (with it): the output
// gradient too, as the model gives it there but under selective recomputation. `flash`: whether the
// backend must take flash attention for it (false only for the host check of the expectations).
Results run(Backend& be, int64_t B, int64_t T, int64_t C, int64_t H, bool bf16_qkv = false, bool bf16_dout = false,
            bool flash = true) {
  be.set_fp32_matmul(Fp32Matmul::Bf16Operands);
  EXPECT_EQ(be.takes_flash_attention(DType::F32, T, C, H), flash) << be.name();
  const CounterRng rng(5, "flash");
  std::vector<float> qkv(static_cast<std::size_t>(B * T * 3 * C)), dout(static_cast<std::size_t>(B * T * C));
  for (std::size_t i = 0; i < qkv.size(); ++i) qkv[i] = static_cast<float>(4 * rng.uniform(i) - 2);
  for (std::size_t i = 0; i < dout.size(); ++i) dout[i] = static_cast<float>(2 * rng.uniform(qkv.size() + i) - 1);
  Tensor tqkv = be.alloc({B, T, 3 * C}, DType::F32), tdout = be.alloc({B, T, C}, DType::F32);
  be.upload(qkv.data(), tqkv);
  be.upload(dout.data(), tdout);
  if (bf16_qkv) {
    EXPECT_EQ(be.attention_input_dtype(DType::F32, T, C, H), DType::BF16) << be.name();
    Tensor rounded = be.alloc({B, T, 3 * C}, DType::BF16);
    be.convert(tqkv, rounded);
    tqkv = rounded;
  }
  if (bf16_dout) {
    Tensor rounded = be.alloc({B, T, C}, DType::BF16);
    be.convert(tdout, rounded);
    tdout = rounded;
  }
  Tensor out = be.alloc({B, T, C}, DType::F32), dqkv = be.alloc({B, T, 3 * C}, DType::F32);
  Tensor state = be.alloc(be.attention_state_shape(DType::F32, B, T, C, H), DType::F32);
  be.attention_forward(out, state, tqkv, H);
  be.attention_backward(dqkv, tdout, tqkv, state, H);
  Results r;
  r.out.resize(dout.size());
  r.dqkv.resize(qkv.size());
  std::vector<float> all(static_cast<std::size_t>(state.numel()));
  be.download(out, r.out.data());
  be.download(dqkv, r.dqkv.data());
  be.download(state, all.data());
  r.lse.assign(all.begin(), all.begin() + B * H * T);
  // The attention's bf16 GEMM operand from a forward of its own (flash-mma's kernel writes it)
  Tensor operand_state = be.alloc(state.shape(), DType::F32);
  r.operand = operand_values(be, be.attention_operand(operand_state, tqkv, H), B * T, C);
  Tensor dbias = be.alloc({3 * C}, DType::F32);
  r.dqkv_operand = operand_values(be, be.attention_backward_operand(tdout, tqkv, state, H, dbias), B * T, 3 * C);
  r.dbias.resize(static_cast<std::size_t>(3 * C));
  be.download(dbias, r.dbias.data());
  return r;
}

// The operand of dqkv is its fp32 values' bf16 rounding, and the bias gradient their column sums
// (in another order: within fp32 rounding of the largest).
void expect_the_backward_operand_of(const Results& r, int64_t columns) {
  EXPECT_EQ(r.dqkv_operand, bf16_rounded(r.dqkv)) << "dqkv's operand: its bf16 rounding";
  std::vector<double> sums(static_cast<std::size_t>(columns), 0.0);
  for (std::size_t i = 0; i < r.dqkv.size(); ++i) sums[i % static_cast<std::size_t>(columns)] += r.dqkv[i];
  double largest = 0;
  for (double s : sums) largest = std::max(largest, std::fabs(s));
  for (std::size_t c = 0; c < sums.size(); ++c)
    EXPECT_NEAR(r.dbias[c], sums[c], 1e-5 * std::max(largest, 1.0)) << "dbias[" << c << "]";
}

double relative_gap(const std::vector<float>& got, const std::vector<float>& want) {
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
    const double d = std::fabs(static_cast<double>(got[i]) - want[i]);
    worst = std::isnan(d) ? INFINITY : std::max(worst, d);
  }
  return scale > 0 ? worst / scale : worst;
}

// The GPU's flash attention of `variant` (TRIPOD_CUDA_ATTENTION) against the emulated device's.
// The CUDA backend, or null with the reason in `why` where no GPU is usable.
std::unique_ptr<Backend> cuda_backend(std::string& why) {
  try {
    return make_backend("cuda");
  } catch (const Error& e) {
    why = e.what();
    return nullptr;
  }
}

void check_against_the_emulated_device(const char* variant, const char* name_part) {
  FlashAttentionAsked asked(variant);
  std::string why;
  std::unique_ptr<Backend> cuda = cuda_backend(why);
  if (!cuda) GTEST_SKIP() << "no GPU: " << why;
  auto emulated = make_backend("emulated");
  ASSERT_NE(cuda->name().find(name_part), std::string::npos) << cuda->name();
  ASSERT_NE(emulated->name().find(name_part), std::string::npos) << emulated->name();
  struct Shape {
    int64_t B, T, C, H;
  };
  // head size 64 over two tiles (the second partial), and 16 with four heads over one; then each
  // other head size's kernels (128: their own launch bounds, the most registers; 32) and four
  // tiles of 64 (whole tiles off the diagonal); head sizes 16 and 32 over three tiles, the last
  // partial (their instantiations' tiles off the diagonal)
  for (const Shape s : {Shape{1, 80, 64, 1}, Shape{2, 40, 64, 4}, Shape{1, 130, 128, 1}, Shape{1, 72, 64, 2},
                        Shape{1, 200, 64, 1}, Shape{1, 150, 32, 2}, Shape{1, 150, 64, 2}}) {
    SCOPED_TRACE("B" + std::to_string(s.B) + " T" + std::to_string(s.T) + " C" + std::to_string(s.C) + " H" +
                 std::to_string(s.H));
    const Results got = run(*cuda, s.B, s.T, s.C, s.H), want = run(*emulated, s.B, s.T, s.C, s.H);
    // The logsumexp: fp32 sums of the same exponentials in another order.
    double lse = 0;
    for (std::size_t i = 0; i < want.lse.size(); ++i)
      lse = std::max(lse, std::fabs(static_cast<double>(got.lse[i]) - want.lse[i]));
    EXPECT_LE(lse, 1e-5) << "lse (absolute)";
    // out and dqkv: a probability or score gradient rounded a bf16 step apart here and there.
    EXPECT_LE(relative_gap(got.out, want.out), 1.0 / 256) << "out";
    EXPECT_LE(relative_gap(got.dqkv, want.dqkv), 1.0 / 256) << "dqkv";
    EXPECT_EQ(got.operand, bf16_rounded(got.out)) << "the operand: out's bf16 rounding";
    expect_the_backward_operand_of(got, 3 * s.C);
  }
  // An empty batch: nothing to do, and no error (flash-mma's scratch is then no pointer at all).
  EXPECT_NO_THROW(run(*cuda, 0, 80, 64, 1));
}

// The operand expectations above on a host backend that pads its copies as CUDA does (B*T = 130
// rows padded to 136; the GEMM attention, whose operands take the same padded copies as flash's
// fallback): they must hold for any correct backend, whatever its padding, so this runs without a
// GPU. (They once compared the padded copy with the unpadded out: a certain failure on
// the device, whose kernels fall back to the padded copy at T 130.)
TEST(CudaFlashAttention, TheOperandExpectationsHoldWhereTheCopiesArePadded) {
  testing::PaddingCpuBackend padding;
  const Results r = run(padding, 1, 130, 128, 1, false, false, /*flash=*/false);
  EXPECT_EQ(r.operand, bf16_rounded(r.out)) << "the operand: out's bf16 rounding";
  expect_the_backward_operand_of(r, 3 * 128);
}

// flash-mma reading the model's bf16 qkv (no copy made) gives the very bits of the fp32 qkv, whose
// copy its launchers make: the same kernels on the same values; and the model's bf16 output
// gradient with it, those of the fp32 one (its copy, and delta's rounding of it). And the emulated
// device's agree.
TEST(CudaFlashAttention, TheRegisterKernelsReadABf16QkvWithTheBitsOfItsFp32Copy) {
  FlashAttentionAsked asked("flash-mma");
  std::string why;
  std::unique_ptr<Backend> cuda = cuda_backend(why);
  if (!cuda) GTEST_SKIP() << "no GPU: " << why;
  auto emulated = make_backend("emulated");
  for (const int64_t T : {80, 200}) {
    SCOPED_TRACE("T" + std::to_string(T));
    const Results from_bf16 = run(*cuda, 2, T, 128, 2, true), from_fp32 = run(*cuda, 2, T, 128, 2);
    EXPECT_EQ(from_bf16.out, from_fp32.out);
    EXPECT_EQ(from_bf16.operand, bf16_rounded(from_fp32.out)) << "the operand: out's bf16 rounding";
    EXPECT_EQ(from_fp32.operand, from_bf16.operand);
    expect_the_backward_operand_of(from_bf16, 3 * 128);
    EXPECT_EQ(from_bf16.dqkv_operand, from_fp32.dqkv_operand);
    EXPECT_EQ(from_bf16.lse, from_fp32.lse);
    EXPECT_EQ(from_bf16.dqkv, from_fp32.dqkv);
    EXPECT_EQ(run(*cuda, 2, T, 128, 2, true, true).dqkv, from_fp32.dqkv) << "bf16 dout";
    const Results want = run(*emulated, 2, T, 128, 2, true);
    EXPECT_LE(relative_gap(from_bf16.out, want.out), 1.0 / 256) << "out";
    EXPECT_LE(relative_gap(from_bf16.dqkv, want.dqkv), 1.0 / 256) << "dqkv";
  }
  EXPECT_NO_THROW(run(*cuda, 0, 80, 64, 1, true));
  EXPECT_NO_THROW(run(*cuda, 0, 80, 64, 1, true, true));
}

TEST(CudaFlashAttention, MatchesTheEmulatedDevicesBlocks) {
  check_against_the_emulated_device("flash", "flash attention");
}

// flash-mma: the tiles in mma.sync fragments (backend/kernels/flash_forward_warp.h and
// flash_backward_warp.h, run on the host by 32 lanes in lockstep on the emulated device); the same
// state. Head size 128 takes the block kernels' backward.
TEST(CudaFlashAttention, TheRegisterKernelsMatchTheEmulatedDevicesWarps) {
  check_against_the_emulated_device("flash-mma", "flash attention (mma tiles)");
}

}  // namespace
}  // namespace tripod
