// How a CUDA failure is worded. Needs no GPU (error names are the runtime's own table), so it runs
// in CI: a kernel's fault is sticky and surfaces at whichever CUDA call comes next, on any stream
// (an NCCL event query included), so the message must not let the reporting call pass for the
// cause.
#include <gtest/gtest.h>

#include "backend/cuda/cuda_check.h"
#include "core/error.h"
#include "support/error_text.h"

namespace tripod::cuda {
namespace {

TEST(CudaErrors, AStickyKernelFaultSaysItMayComeFromAnEarlierKernel) {
  const std::string text = expected_error([] { check_cuda(cudaErrorIllegalAddress, "bias_add"); });
  EXPECT_NE(text.find("CUDA error in bias_add: cudaErrorIllegalAddress"), std::string::npos) << text;
  EXPECT_NE(text.find("may come from an earlier kernel: rerun with CUDA_LAUNCH_BLOCKING=1"), std::string::npos)
      << text;
}

TEST(CudaErrors, AnOrdinaryErrorIsNotBlamedOnAnotherKernel) {
  const std::string text = expected_error([] { check_cuda(cudaErrorMemoryAllocation, "alloc"); });
  EXPECT_NE(text.find("CUDA error in alloc: cudaErrorMemoryAllocation"), std::string::npos) << text;
  EXPECT_EQ(text.find("earlier kernel"), std::string::npos) << text;
  EXPECT_STREQ(cuda_error_hint(cudaSuccess), "");
}

}  // namespace
}  // namespace tripod::cuda
