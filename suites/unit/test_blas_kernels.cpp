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

// Sets an environment variable for one scope, restoring what was there.
class ScopedVariable {
 public:
  ScopedVariable(const char* name, const char* value) : name_(name) {
    if (const char* before = std::getenv(name)) saved_ = before;
    setenv(name, value, 1);
  }
  ~ScopedVariable() {
    if (saved_) setenv(name_, saved_->c_str(), 1);
    else unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> saved_;
};

TEST(OpenBlasKernels, TheUsersOpenblasCoretypeIsLeftAlone) {
  const ScopedVariable user("OPENBLAS_CORETYPE", "Prescott");
  EXPECT_TRUE(openblas_kernel_settings().empty());
  EXPECT_EQ(openblas_kernel_note(), "");  // the user chose: no "chosen by tripod"
}

TEST(OpenBlasKernels, TheNoteSaysTripodChoseOnlyWhileTheSettingIsTripods) {
  const std::string ours = better_openblas_core("Prescott", this_cpus_vector_features());
  if (ours.empty()) GTEST_SKIP() << "this CPU has no AVX2 and FMA: tripod asks for no kernels here";
  const ScopedVariable mark("TRIPOD_SET_OPENBLAS_CORETYPE", "Prescott");
  {
    const ScopedVariable set("OPENBLAS_CORETYPE", ours.c_str());
    EXPECT_EQ(openblas_kernel_note(), " (kernels chosen by tripod: this OpenBLAS took the CPU for a Prescott; "
                                      "OPENBLAS_CORETYPE chooses)");
  }
  // A user's own setting in a process that inherited the mark from a tripod above it.
  const ScopedVariable user("OPENBLAS_CORETYPE", ours == "Haswell" ? "SkylakeX" : "Haswell");
  EXPECT_EQ(openblas_kernel_note(), "");
}

TEST(OpenBlasKernels, TheFeaturesComeInOrder) {
  const CpuVectorFeatures f = this_cpus_vector_features();
  EXPECT_TRUE(f.avx2_fma || !f.avx512);
  EXPECT_TRUE(f.avx512 || !f.avx512_bf16);
}

}  // namespace
}  // namespace tripod::cpu
