// The BLAS the CPU backend runs on, as OpenBLAS describes its own build: version, the kernel set
// it picked for this CPU and its thread limit ("OpenBLAS 0.3.29 DYNAMIC_ARCH NO_AFFINITY Haswell
// MAX_THREADS=64"), and whether tripod chose that kernel set (backend/cpu/blas_kernels.h). Two
// machines' GEMM figures are comparable only if this is known.
#include <cblas.h>

#include <string>

#include "backend/backend_factory.h"
#include "backend/cpu/blas_kernels.h"

namespace tripod {

std::string cpu_blas_version() {
  std::string text = openblas_get_config();
  // OpenBLAS separates some words with two spaces.
  for (std::size_t at = text.find("  "); at != std::string::npos; at = text.find("  ")) text.erase(at, 1);
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text + cpu::openblas_kernel_note();
}

}  // namespace tripod
