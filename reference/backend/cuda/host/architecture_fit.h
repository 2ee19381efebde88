// Whether this build's CUDA code can run on a device, decided from the architectures it was built
// for (CMake's CUDA_ARCHITECTURES entries, TRIPOD_CUDA_ARCHITECTURES) and the device's compute
// capability, so that a GPU without code in the build (a Blackwell, a V100) is refused at start
// with what to rebuild with, instead of failing at its first kernel with "no kernel image is
// available". Pure host code, unit-tested without a GPU (test_architecture_fit.cpp).
#pragma once
#include <string>

namespace tripod::cuda {

// `architectures`: entries separated by ',' or ';': "80-real" (machine code for sm_80: runs on
// 8.x with x >= 0), "90a-real" (Hopper's arch-specific code: runs on 9.0 only), "100f-real"
// (family code: 10.x with x >= 0), "90-virtual" (PTX: the driver compiles it for any capability
// >= 9.0), "90" (both). CMake's "all", "all-major" and "native" cannot be judged here: true.
bool build_runs_on(const std::string& architectures, int major, int minor);

// Empty where build_runs_on; else the refusal: the device, what the build has, and the option
// that builds for it.
std::string architecture_mismatch(const std::string& architectures, const std::string& device_name, int major,
                                  int minor);

}  // namespace tripod::cuda
