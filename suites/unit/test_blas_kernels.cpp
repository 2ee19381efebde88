// Which OpenBLAS kernels tripod asks for (backend/cpu/blas_kernels.h): only where OpenBLAS fell
// back to kernels without AVX2 on a CPU that has AVX2 and FMA, the best the features allow; never
// over a choice OpenBLAS made from a model it knows, nor over the user's OPENBLAS_CORETYPE.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "backend/cpu/blas_kernels.h"

namespace tripod::cpu {
namespace {

constexpr CpuVectorFeatures kAvx2{true, false, false};
constexpr CpuVectorFeatures kAvx512{true, true, false};
constexpr CpuVectorFeatures kAvx512Bf16{true, true, true};

TEST(OpenBlasKernels, AFallbackToOldKernelsGetsTheBestTheCpuHas) {
  // Debian 12's OpenBLAS 0.3.21 on an Emerald Rapids Xeon (family 6, model 207): "Prescott".
  EXPECT_EQ(better_openblas_core("Prescott", kAvx512Bf16), "Cooperlake");
  EXPECT_EQ(better_openblas_core("Prescott", kAvx512), "SkylakeX");
  EXPECT_EQ(better_openblas_core("Prescott", kAvx2), "Haswell");
  EXPECT_EQ(better_openblas_core("Core2", kAvx2), "Haswell");
  EXPECT_EQ(better_openblas_core("Sandybridge", kAvx512), "SkylakeX");  // AVX, not AVX2
  EXPECT_EQ(better_openblas_core("Nehalem", kAvx512Bf16), "Cooperlake");
}

TEST(OpenBlasKernels, AChoiceWithAvx2KernelsOrACpuWithoutAvx2KeepsOpenBlassPick) {
  for (const char* picked : {"Haswell", "haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids", "Excavator"})
    EXPECT_EQ(better_openblas_core(picked, kAvx512Bf16), "") << picked;
  EXPECT_EQ(better_openblas_core("Haswell", kAvx512), "");  // a known model's pick, even below the features
  EXPECT_EQ(better_openblas_core("Prescott", CpuVectorFeatures{}), "");  // the CPU has no AVX2 or FMA
  EXPECT_EQ(better_openblas_core("Sandybridge", CpuVectorFeatures{}), "");
}

TEST(OpenBlasKernels, TheUsersOpenblasCoretypeIsLeftAlone) {
  const char* before = std::getenv("OPENBLAS_CORETYPE");
  const std::optional<std::string> saved = before ? std::optional<std::string>(before) : std::nullopt;
  setenv("OPENBLAS_CORETYPE", "Prescott", 1);
  EXPECT_TRUE(openblas_kernel_settings().empty());
  EXPECT_EQ(openblas_kernel_note(), "");  // the user chose: no "chosen by tripod"
  if (saved) setenv("OPENBLAS_CORETYPE", saved->c_str(), 1);
  else unsetenv("OPENBLAS_CORETYPE");
}

TEST(OpenBlasKernels, TheFeaturesComeInOrder) {
  const CpuVectorFeatures f = this_cpus_vector_features();
  EXPECT_TRUE(f.avx2_fma || !f.avx512);
  EXPECT_TRUE(f.avx512 || !f.avx512_bf16);
}

}  // namespace
}  // namespace tripod::cpu
