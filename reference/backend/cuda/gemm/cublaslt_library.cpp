#include "backend/cuda/gemm/cublaslt_library.h"

#include <dlfcn.h>

#include "core/error.h"

namespace tripod::cuda {
namespace {

template <typename Function>
void resolve(void* library, const std::string& soname, const char* symbol, Function& entry) {
  dlerror();  // clears an earlier message, so a null symbol with no message is told apart
  entry = reinterpret_cast<Function>(dlsym(library, symbol));
  if (entry == nullptr) {
    const char* reason = dlerror();
    fail("the CUDA backend's GEMM library ", soname, " has no ", symbol, " (", reason ? reason : "a null symbol",
         "): it is not the cuBLASLt ", CUBLAS_VER_MAJOR, ".x this build was compiled against");
  }
}

}  // namespace

// An object of its own with the major version pasted in, so the name stands whole in the binary
// (suites/python/test_gpu_check.py reads it there; a literal may be built from immediates).
#define TRIPOD_SPELLED(x) #x
#define TRIPOD_SPELLED_VALUE(x) TRIPOD_SPELLED(x)
extern const char kCublasLtSoname[];
const char kCublasLtSoname[] = "libcublasLt.so." TRIPOD_SPELLED_VALUE(CUBLAS_VER_MAJOR);

std::string cublaslt_soname() { return kCublasLtSoname; }

CublasLt load_cublaslt(const std::string& soname) {
  // RTLD_LOCAL: its symbols serve only these pointers; RTLD_NOW: a broken library fails here,
  // with its name, not at the first GEMM.
  void* library = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* reason = dlerror();
    fail("the CUDA backend cannot load its GEMM library ", soname, ": ", reason ? reason : "no reason given",
         " (it is searched for in LD_LIBRARY_PATH, this program's run path and the system's library folders; "
         "the CUDA toolkit keeps it in /usr/local/cuda/lib64)");
  }
  CublasLt lt{};
  resolve(library, soname, "cublasLtCreate", lt.create);
  resolve(library, soname, "cublasLtDestroy", lt.destroy);
  resolve(library, soname, "cublasLtMatmul", lt.matmul);
  resolve(library, soname, "cublasLtMatmulAlgoGetHeuristic", lt.algo_get_heuristic);
  resolve(library, soname, "cublasLtMatmulDescCreate", lt.desc_create);
  resolve(library, soname, "cublasLtMatmulDescDestroy", lt.desc_destroy);
  resolve(library, soname, "cublasLtMatmulDescSetAttribute", lt.desc_set_attribute);
  resolve(library, soname, "cublasLtMatmulPreferenceCreate", lt.preference_create);
  resolve(library, soname, "cublasLtMatmulPreferenceDestroy", lt.preference_destroy);
  resolve(library, soname, "cublasLtMatmulPreferenceSetAttribute", lt.preference_set_attribute);
  resolve(library, soname, "cublasLtMatrixLayoutCreate", lt.layout_create);
  resolve(library, soname, "cublasLtMatrixLayoutDestroy", lt.layout_destroy);
  resolve(library, soname, "cublasLtMatrixLayoutSetAttribute", lt.layout_set_attribute);
  resolve(library, soname, "cublasLtGetVersion", lt.get_version);
  return lt;
}

const CublasLt& cublaslt() {
  // A function-local static: initialised once, thread-safely; an initialisation that throws is
  // tried again by the next call.
  static const CublasLt lt = load_cublaslt(cublaslt_soname());
  return lt;
}

}  // namespace tripod::cuda
