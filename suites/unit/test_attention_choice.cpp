// Which attention the CUDA backend runs (backend/cuda/host/attention_choice.h), checked without a
// GPU: TRIPOD_CUDA_ATTENTION, and the shapes the flash kernels take.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "backend/cuda/host/attention_choice.h"
#include "backend/cuda/host/launch_geometry.h"
#include "core/error.h"

namespace tripod::cuda {
namespace {

AttentionKernel choose(std::map<std::string, std::string> vars) {
  return choose_attention_kernel([&](const char* name) { return vars.count(name) ? vars[name] : std::string(); });
}

TEST(AttentionChoice, GemmUnlessFlashIsAsked) {
  EXPECT_EQ(choose({}), AttentionKernel::Gemm);
  EXPECT_EQ(choose({{"TRIPOD_CUDA_ATTENTION", "gemm"}}), AttentionKernel::Gemm);
  EXPECT_EQ(choose({{"TRIPOD_CUDA_ATTENTION", "flash"}}), AttentionKernel::Flash);
  EXPECT_EQ(choose({{"TRIPOD_CUDA_ATTENTION", "flash-mma"}}), AttentionKernel::FlashMma);
  for (const char* bad : {"Flash2", "mma", "flash_mma"}) {
    try {
      choose({{"TRIPOD_CUDA_ATTENTION", bad}});
      FAIL() << "no error for " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("TRIPOD_CUDA_ATTENTION=") + bad +
                                           ": expected gemm (the default), flash or flash-mma"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(AttentionChoice, BothFlashFormsTakeGpt2OnAnH200AndSayWhichTheyAre) {
  const std::size_t h200 = h200_limits().shared_per_block_optin;
  for (AttentionKernel k : {AttentionKernel::Flash, AttentionKernel::FlashMma}) {
    EXPECT_TRUE(is_flash(k));
    EXPECT_TRUE(takes_flash_attention(k, DType::F32, Fp32Matmul::Bf16Operands, 1024, 768, 12, h200));
    EXPECT_FALSE(takes_flash_attention(k, DType::F32, Fp32Matmul::Exact, 1024, 768, 12, h200));
    EXPECT_FALSE(takes_flash_attention(k, DType::F64, Fp32Matmul::Bf16Operands, 1024, 768, 12, h200));
  }
  EXPECT_FALSE(is_flash(AttentionKernel::Gemm));
  EXPECT_FALSE(takes_flash_attention(AttentionKernel::Gemm, DType::F32, Fp32Matmul::Bf16Operands, 1024, 768, 12, h200));
  EXPECT_STREQ(attention_name_suffix(AttentionKernel::Gemm), "");
  EXPECT_STREQ(attention_name_suffix(AttentionKernel::Flash), ", flash attention");
  EXPECT_STREQ(attention_name_suffix(AttentionKernel::FlashMma), ", flash attention (mma tiles)");
}

TEST(AttentionChoice, FlashTakesHeadSizesOfItsKernelsWhenItsStateAndSharedMemoryFit) {
  const std::size_t h200 = h200_limits().shared_per_block_optin;  // 227 KiB
  EXPECT_TRUE(flash_attention_supported(1024, 768, 12, h200));  // GPT-2 124M: head size 64
  EXPECT_TRUE(flash_attention_supported(64, 128, 4, h200));     // tiny: 32
  EXPECT_TRUE(flash_attention_supported(17, 64, 4, h200));      // 16, T = hd + 1: B*H*T*T = B*H*T + B*T*C
  EXPECT_FALSE(flash_attention_supported(16, 64, 4, h200));     // T = hd: the state would not fit
  EXPECT_TRUE(flash_attention_supported(129, 128, 1, h200));    // 128
  EXPECT_FALSE(flash_attention_supported(1024, 40, 4, h200));   // 10
  EXPECT_FALSE(flash_attention_supported(1024, 768, 3, h200));  // 256
  EXPECT_FALSE(flash_attention_supported(1024, 100, 0, h200));
  EXPECT_FALSE(flash_attention_supported(1024, 100, 3, h200));  // C not divisible by H
  // 99 KiB a block (an RTX 4090's or A10's opt-in limit): head size 32's kernels fit, 64's
  // key-gradient kernel (105.5 KiB) does not; an A100's 163 KiB holds them all.
  EXPECT_TRUE(flash_attention_supported(1024, 384, 12, 99 * 1024));
  EXPECT_FALSE(flash_attention_supported(1024, 768, 12, 99 * 1024));
  EXPECT_GT(flash_attention_shared_bytes(64), 99u * 1024);
  EXPECT_TRUE(flash_attention_supported(1024, 1536, 12, 163 * 1024));
  EXPECT_LE(flash_attention_shared_bytes(128), 163u * 1024);
  EXPECT_EQ(flash_attention_shared_bytes(48), 0u);
}

TEST(AttentionChoice, FlashMmaNeedsOnlyStaticSharedMemoryUpToHeadSize64) {
  // Its own kernels fit the 48 KiB every device gives a block without opting in; at head size 128
  // its backward is the block kernels', which need what flash needs.
  constexpr std::size_t kStatic = 48 * 1024;
  for (int64_t hd : {16, 32, 64}) {
    EXPECT_LE(flash_attention_shared_bytes(hd, AttentionKernel::FlashMma), kStatic) << hd;
    EXPECT_GT(flash_attention_shared_bytes(hd, AttentionKernel::FlashMma), 0u) << hd;
  }
  EXPECT_EQ(flash_attention_shared_bytes(128, AttentionKernel::FlashMma), flash_attention_shared_bytes(128));
  EXPECT_EQ(flash_attention_shared_bytes(48, AttentionKernel::FlashMma), 0u);
  // GPT-2's head size 64 on a 99 KiB device (an RTX 4090, an L40): flash-mma yes, flash no.
  const auto takes = [](AttentionKernel k, int64_t channels, int64_t heads, std::size_t optin) {
    return takes_flash_attention(k, DType::F32, Fp32Matmul::Bf16Operands, 1024, channels, heads, optin);
  };
  EXPECT_TRUE(takes(AttentionKernel::FlashMma, 768, 12, 99 * 1024));
  EXPECT_FALSE(takes(AttentionKernel::Flash, 768, 12, 99 * 1024));
  EXPECT_TRUE(takes(AttentionKernel::FlashMma, 768, 12, kStatic));   // even at the static limit alone
  EXPECT_FALSE(takes(AttentionKernel::FlashMma, 1536, 12, 99 * 1024));  // head size 128: the block backward
  EXPECT_TRUE(takes(AttentionKernel::FlashMma, 1536, 12, 163 * 1024));
  // the other conditions stay: T > head size, the head sizes built
  EXPECT_FALSE(flash_attention_supported(64, 256, 4, 99 * 1024, AttentionKernel::FlashMma));
  EXPECT_FALSE(flash_attention_supported(1024, 480, 12, 99 * 1024, AttentionKernel::FlashMma));
}

TEST(AttentionChoice, OnlyFlashMmasRegisterBackwardTakesTheBf16Copies) {
  // The CUDA backend makes bf16 copies of qkv and dout for a flash backward only where its register
  // kernels run it: at head size 128 flash-mma's backward is the block kernels', which read fp32.
  EXPECT_TRUE(flash_backward_in_registers(AttentionKernel::FlashMma, 768, 12));   // GPT-2, head size 64
  EXPECT_TRUE(flash_backward_in_registers(AttentionKernel::FlashMma, 64, 4));     // head size 16
  EXPECT_FALSE(flash_backward_in_registers(AttentionKernel::FlashMma, 1536, 12));  // head size 128
  EXPECT_FALSE(flash_backward_in_registers(AttentionKernel::Flash, 768, 12));
  EXPECT_FALSE(flash_backward_in_registers(AttentionKernel::Gemm, 768, 12));
  EXPECT_FALSE(flash_backward_in_registers(AttentionKernel::FlashMma, 768, 0));  // no division by zero heads
}

TEST(AttentionChoice, AFlashBackendSaysWhyItRunsTheGemmAttention) {
  const std::size_t h200 = h200_limits().shared_per_block_optin;
  const auto declined = [&](AttentionKernel k, DType dtype, Fp32Matmul policy, int64_t channels, int64_t heads) {
    return flash_attention_declined(k, dtype, policy, 1024, channels, heads, h200);
  };
  // taken, or not asked: nothing to say
  EXPECT_EQ(declined(AttentionKernel::FlashMma, DType::F32, Fp32Matmul::Bf16Operands, 768, 12), "");
  EXPECT_EQ(declined(AttentionKernel::Gemm, DType::F32, Fp32Matmul::Exact, 96, 2), "");
  // the head size (48), with what the kernels take
  const std::string shape = declined(AttentionKernel::FlashMma, DType::F32, Fp32Matmul::Bf16Operands, 96, 2);
  EXPECT_NE(shape.find("TRIPOD_CUDA_ATTENTION=flash-mma does not take head size 48 at T = 1024"), std::string::npos)
      << shape;
  EXPECT_NE(shape.find("16, 32, 64 or 128"), std::string::npos) << shape;
  EXPECT_NE(shape.find("227 KiB"), std::string::npos) << shape;
  EXPECT_NE(shape.find("the GEMM attention runs instead"), std::string::npos) << shape;
  // the policy: fp32 without bf16 operands, fp64
  const std::string fp32 = declined(AttentionKernel::Flash, DType::F32, Fp32Matmul::Exact, 768, 12);
  EXPECT_NE(fp32.find("TRIPOD_CUDA_ATTENTION=flash takes fp32 tensors under bf16-mixed only (this run: fp32, not "
                      "bf16-mixed)"),
            std::string::npos)
      << fp32;
  EXPECT_NE(declined(AttentionKernel::Flash, DType::F64, Fp32Matmul::Exact, 768, 12).find("this run: fp64"),
            std::string::npos);
}

}  // namespace
}  // namespace tripod::cuda
