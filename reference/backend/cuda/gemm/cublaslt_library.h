// cuBLASLt, loaded when the first CUDA backend is made instead of linked. Mapping its ~540 MB
// library cost every process start about 0.1 s of kernel time (some 25,000 page faults for its
// relocations), CPU-only runs and every rank of an MPI job included, none of which use it.
#pragma once
#include <cublasLt.h>

#include <string>

namespace tripod::cuda {

// The file loaded: the soname of the cuBLASLt the backend was compiled against (its major
// version). ci/gpu-check-lib.sh looks for the same file on a GPU node (a test keeps the two
// equal).
std::string cublaslt_soname();

// The entry points the backend uses, with cuBLASLt's own signatures.
struct CublasLt {
  decltype(&cublasLtCreate) create;
  decltype(&cublasLtDestroy) destroy;
  decltype(&cublasLtMatmul) matmul;
  decltype(&cublasLtMatmulAlgoGetHeuristic) algo_get_heuristic;
  decltype(&cublasLtMatmulDescCreate) desc_create;
  decltype(&cublasLtMatmulDescDestroy) desc_destroy;
  decltype(&cublasLtMatmulDescSetAttribute) desc_set_attribute;
  decltype(&cublasLtMatmulPreferenceCreate) preference_create;
  decltype(&cublasLtMatmulPreferenceDestroy) preference_destroy;
  decltype(&cublasLtMatmulPreferenceSetAttribute) preference_set_attribute;
  decltype(&cublasLtMatrixLayoutCreate) layout_create;
  decltype(&cublasLtMatrixLayoutDestroy) layout_destroy;
  decltype(&cublasLtMatrixLayoutSetAttribute) layout_set_attribute;
  decltype(&cublasLtGetVersion) get_version;
};

// Loads cublaslt_soname() once per process (thread-safe) and returns its entry points. Throws
// tripod::Error naming the file and the loader's reason when the library or an entry point is
// missing; a failed load is tried again by the next call.
const CublasLt& cublaslt();

// The same for any file (the tests' missing-library path); a new load each call, never unloaded.
CublasLt load_cublaslt(const std::string& soname);

}  // namespace tripod::cuda
