// Which kernels OpenBLAS runs on this CPU. A DYNAMIC_ARCH build (Debian's) picks them when it is
// loaded, from the CPU's model number, and a model newer than the library gets its oldest x86-64
// kernels: Debian 12's OpenBLAS 0.3.21 takes an Emerald Rapids Xeon (family 6, model 207, with
// AVX-512 and AVX512-BF16) for a "Prescott" (SSE3), where it picked "Cooperlake" on the project's
// earlier VMs. On this project's VM that halved the CPU backend's speed without a word: a
// quick-sweep run (d_model 40, one thread, 600 steps) trained 89-106k tokens/s on Prescott's
// kernels, 190-195k on Cooperlake's or SkylakeX's, 165k on Haswell's (2026-12-07).
//
// So where OpenBLAS picked kernels without AVX2 on a CPU that has AVX2 and FMA (and the OS saves
// their registers), tripod asks for the best that the CPU's features allow: Cooperlake's with
// AVX512-BF16, SkylakeX's with AVX-512 (F, CD, BW, DQ, VL), else Haswell's; OPENBLAS_CORETYPE is
// read only when the library is loaded, so this takes effect by tripod executing itself again
// (process/load_time_settings.h). A choice OpenBLAS made from a model it knows is left alone, and
// so is the user's OPENBLAS_CORETYPE.
#pragma once
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tripod::cpu {

struct CpuVectorFeatures {
  bool avx2_fma = false;
  bool avx512 = false;       // F, CD, BW, DQ and VL: what OpenBLAS's SkylakeX kernels use
  bool avx512_bf16 = false;  // with avx512: Cooperlake's
};
CpuVectorFeatures this_cpus_vector_features();

// The OpenBLAS core to ask for instead of `picked` (OpenBLAS's name for its choice) on a CPU with
// `features`; "" to keep `picked`.
std::string better_openblas_core(std::string_view picked, const CpuVectorFeatures& features);

// OPENBLAS_CORETYPE with the better core, and TRIPOD_SET_OPENBLAS_CORETYPE with the one OpenBLAS
// had picked (for openblas_kernel_note); nothing where the user set OPENBLAS_CORETYPE or the pick
// stays.
std::vector<std::pair<std::string, std::string>> openblas_kernel_settings();

// " (kernels chosen by tripod: this OpenBLAS took the CPU for a Prescott; OPENBLAS_CORETYPE
// chooses)" where tripod chose them, else "".
std::string openblas_kernel_note();

}  // namespace tripod::cpu
