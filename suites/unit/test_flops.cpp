// perf/flops.h against FLOPs counted by hand, and the MFU formula.
#include <gtest/gtest.h>

#include "perf/flops.h"

namespace tripod {
namespace {

TEST(Flops, SmallConfigByHand) {
  ModelConfig c;  // L=2, H=4, C=64, F=256, V=512, context 64, tied embeddings
  c.n_layer = 2;
  c.n_head = 4;
  c.d_model = 64;
  c.d_ff = 256;
  c.vocab_size = 512;
  c.context = 64;
  c.tie_embeddings = true;
  const int64_t T = 64;

  // Matmul weights of one block:
  //   attn.c_attn  [3C, C] = 192 * 64  = 12288
  //   attn.c_proj  [C, C]  =  64 * 64  =  4096
  //   mlp.c_fc     [F, C]  = 256 * 64  = 16384
  //   mlp.c_proj   [C, F]  =  64 * 256 = 16384
  //                                      ------ 49152 per layer, x 2 layers = 98304
  // LM head (tied wte) [V, C] = 512 * 64 = 32768
  // N_matmul = 98304 + 32768 = 131072
  const int64_t n_matmul = 131072;
  // Attention scores and values, forward and backward: 12 * L * C * T = 12 * 2 * 64 * 64 = 98304.
  const double attention = 98304;
  // Model FLOPs per token = 6 * 131072 + 98304 = 786432 + 98304 = 884736.
  const double per_token = 884736;

  // Every parameter: wte 512*64 = 32768, wpe 64*64 = 4096,
  // per block: ln_1 2*64 = 128, c_attn 12288 + 192, c_proj 4096 + 64, ln_2 128, c_fc 16384 + 256,
  //            mlp.c_proj 16384 + 64 = 49984, x 2 = 99968; ln_f 128.
  // Total = 32768 + 4096 + 99968 + 128 = 136960.
  const int64_t n_total = 136960;

  const FlopCount f = count_flops(c, T);
  EXPECT_EQ(f.n_params_matmul, n_matmul);
  EXPECT_EQ(f.n_params_total, n_total);
  EXPECT_DOUBLE_EQ(f.attention_flops_per_token, attention);
  EXPECT_DOUBLE_EQ(f.model_flops_per_token, per_token);

  // An untied LM head adds V*C parameters but no matmul work that the tied head did not do.
  c.tie_embeddings = false;
  const FlopCount untied = count_flops(c, T);
  EXPECT_EQ(untied.n_params_total, n_total + 512 * 64);
  EXPECT_EQ(untied.n_params_matmul, n_matmul);
  EXPECT_DOUBLE_EQ(untied.model_flops_per_token, per_token);
}

TEST(Flops, Gpt2SmallMatchesThePublishedCount) {
  ModelConfig c;
  c.n_layer = 12;
  c.n_head = 12;
  c.d_model = 768;
  c.d_ff = 3072;
  c.vocab_size = 50257;
  c.context = 1024;
  const FlopCount f = count_flops(c, 1024);
  EXPECT_EQ(f.n_params_total, 124439808);  // GPT-2 small, as Hugging Face counts it
  // 12 * (4 * 768^2 + 2 * 768 * 3072) + 50257 * 768 = 84934656 + 38597376
  EXPECT_EQ(f.n_params_matmul, 123532032);
  // 6 * 123532032 + 12 * 12 * 768 * 1024 = 741192192 + 113246208
  EXPECT_DOUBLE_EQ(f.model_flops_per_token, 854438400.0);
}

TEST(Flops, AttentionTermGrowsWithContextOnly) {
  ModelConfig c;
  const FlopCount short_ctx = count_flops(c, 32), long_ctx = count_flops(c, 64);
  EXPECT_EQ(short_ctx.n_params_matmul, long_ctx.n_params_matmul);
  EXPECT_DOUBLE_EQ(long_ctx.attention_flops_per_token, 2 * short_ctx.attention_flops_per_token);
}

TEST(Mfu, AchievedOverPeak) {
  // 8 sequences of 1024 tokens of GPT-2 small in 0.5 s on a 989.5 TFLOP/s device.
  const double flops_per_step = 854438400.0 * 8 * 1024;
  const double expected = flops_per_step / 0.5 / 989.5e12;
  EXPECT_DOUBLE_EQ(mfu(flops_per_step, 0.5, 989.5e12), expected);
  EXPECT_NEAR(mfu(flops_per_step, 0.5, 989.5e12), 0.01414, 1e-5);
  EXPECT_DOUBLE_EQ(mfu(1e12, 1.0, 4e12), 0.25);
  // Degenerate inputs give 0, not infinity.
  EXPECT_EQ(mfu(1e12, 0.0, 4e12), 0.0);
  EXPECT_EQ(mfu(1e12, 1.0, 0.0), 0.0);
}

}  // namespace
}  // namespace tripod
