// cuBLASLt is loaded at run time by the CUDA backend (backend/cuda/gemm/cublaslt_library.h). Here,
// without a GPU, the loading itself: the toolkit's library opens and has every entry point the
// backend calls, and a missing one is an error naming the file.
#include <gtest/gtest.h>

#include <string>

#ifdef TRIPOD_HAVE_CUDA_BACKEND
#include "backend/cuda/gemm/cublaslt_library.h"
#include "support/error_text.h"

namespace tripod::cuda {
namespace {

TEST(CublasLtLibrary, TheToolkitsLibraryLoadsWithEveryEntryPointOfTheCompiledVersion) {
  EXPECT_EQ(cublaslt_soname(), "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR));
  const CublasLt& lt = cublaslt();
  for (const void* entry :
       {(const void*)lt.create, (const void*)lt.destroy, (const void*)lt.matmul, (const void*)lt.algo_get_heuristic,
        (const void*)lt.desc_create, (const void*)lt.desc_destroy, (const void*)lt.desc_set_attribute,
        (const void*)lt.preference_create, (const void*)lt.preference_destroy, (const void*)lt.preference_set_attribute,
        (const void*)lt.layout_create, (const void*)lt.layout_destroy, (const void*)lt.layout_set_attribute, (const void*)lt.get_version})
    EXPECT_NE(entry, nullptr);
  // The library's own version (callable without a device) is the major version compiled against.
  EXPECT_EQ(lt.get_version() / 10000, static_cast<size_t>(CUBLAS_VER_MAJOR));
  EXPECT_EQ(&cublaslt(), &lt);  // loaded once
}

TEST(CublasLtLibrary, AMissingLibraryIsAnErrorNamingIt) {
  const std::string message = error_of([] { (void)load_cublaslt("libcublasLt.so.999"); });
  EXPECT_NE(message.find("cannot load its GEMM library libcublasLt.so.999"), std::string::npos) << message;
  EXPECT_NE(message.find("LD_LIBRARY_PATH"), std::string::npos) << message;
}

TEST(CublasLtLibrary, ALibraryWithoutItsEntryPointsIsAnErrorNamingTheEntryPoint) {
  // libm opens but is not cuBLASLt.
  const std::string message = error_of([] { (void)load_cublaslt("libm.so.6"); });
  EXPECT_NE(message.find("libm.so.6 has no cublasLtCreate"), std::string::npos) << message;
}

}  // namespace
}  // namespace tripod::cuda
#endif
