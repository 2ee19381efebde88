#include "backend/cpu/blas_kernels.h"

#include <cblas.h>
#include <strings.h>

#include <array>
#include <cstdlib>

namespace tripod::cpu {
namespace {

// Marks a choice tripod made (its children inherit it), naming what OpenBLAS had picked.
constexpr const char* kSetByTripod = "TRIPOD_SET_OPENBLAS_CORETYPE";

// OpenBLAS 0.3's x86-64 cores whose sgemm/dgemm kernels use AVX2 or wider.
bool has_avx2_kernels(std::string_view core) {
  static constexpr std::array<std::string_view, 6> kCores = {"Haswell",    "Zen",            "SkylakeX",
                                                             "Cooperlake", "SapphireRapids", "Excavator"};
  for (const std::string_view known : kCores)
    if (known.size() == core.size() && strncasecmp(known.data(), core.data(), core.size()) == 0) return true;
  return false;
}

}  // namespace

CpuVectorFeatures this_cpus_vector_features() {
#if defined(__x86_64__)
  // libgcc's answers include the OS's support (XGETBV): a feature whose registers the OS does not
  // save reads as absent.
  CpuVectorFeatures f;
  f.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  f.avx512 = f.avx2_fma && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512vl");
  f.avx512_bf16 = f.avx512 && __builtin_cpu_supports("avx512bf16");
  return f;
#else
  return {};  // another architecture: OpenBLAS's own choice stays
#endif
}

std::string better_openblas_core(std::string_view picked, const CpuVectorFeatures& features) {
  if (!features.avx2_fma || has_avx2_kernels(picked)) return "";
  if (features.avx512_bf16) return "Cooperlake";
  if (features.avx512) return "SkylakeX";
  return "Haswell";
}

std::vector<std::pair<std::string, std::string>> openblas_kernel_settings() {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return {};
  const std::string picked = openblas_get_corename();
  const std::string better = better_openblas_core(picked, this_cpus_vector_features());
  if (better.empty()) return {};
  return {{"OPENBLAS_CORETYPE", better}, {kSetByTripod, picked}};
}

std::string openblas_kernel_note() {
  const char* asked = std::getenv("OPENBLAS_CORETYPE");
  const char* had = std::getenv(kSetByTripod);
  // Only where the setting is still tripod's (a user's own, under an inherited mark, is not).
  if (asked == nullptr || had == nullptr || better_openblas_core(had, this_cpus_vector_features()) != asked) return "";
  return std::string(" (kernels chosen by tripod: this OpenBLAS took the CPU for a ") + had +
         "; OPENBLAS_CORETYPE chooses)";
}

}  // namespace tripod::cpu
