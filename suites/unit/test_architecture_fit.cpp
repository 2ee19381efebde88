// Whether a build's CUDA code runs on a device (backend/cuda/host/architecture_fit.h), checked
// without a GPU against CUDA's compatibility rules: machine code within its major version,
// arch-specific code on its own capability only, PTX on any later one.
#include <gtest/gtest.h>

#include <string>

#include "backend/cuda/host/architecture_fit.h"

namespace tripod::cuda {
namespace {

TEST(ArchitectureFit, TheDefaultBuildRunsOnAmpereAndHopperOnly) {
  const std::string build = "80-real,90a-real";  // TRIPOD_CUDA_ARCHITECTURES' default, as --version prints it
  EXPECT_TRUE(build_runs_on(build, 8, 0));   // A100
  EXPECT_TRUE(build_runs_on(build, 8, 6));   // sm_80 code on a later 8.x
  EXPECT_TRUE(build_runs_on(build, 8, 9));   // L4, L40S
  EXPECT_TRUE(build_runs_on(build, 9, 0));   // H100, H200
  EXPECT_FALSE(build_runs_on(build, 7, 0));  // V100
  EXPECT_FALSE(build_runs_on(build, 10, 0)); // B200
  EXPECT_FALSE(build_runs_on(build, 12, 0));
}

TEST(ArchitectureFit, PtxRunsOnLaterCapabilitiesAndSpecificCodeOnlyWhereItIs) {
  EXPECT_TRUE(build_runs_on("80-real;90a-real;90-virtual", 10, 0));  // compute_90 PTX, compiled by the driver
  EXPECT_FALSE(build_runs_on("90-virtual", 8, 9));                    // PTX never runs on an older device
  EXPECT_TRUE(build_runs_on("90", 12, 0));                            // real and virtual
  EXPECT_FALSE(build_runs_on("90a-virtual", 10, 0));                  // arch-specific PTX: 9.0 only
  EXPECT_TRUE(build_runs_on("90a-virtual", 9, 0));
  EXPECT_FALSE(build_runs_on("90-real", 10, 0));                      // machine code: its major only
  EXPECT_TRUE(build_runs_on("100f-real", 10, 3));                     // family code: its major, later minors
  EXPECT_FALSE(build_runs_on("100f-real", 12, 0));
  EXPECT_FALSE(build_runs_on("86-real", 8, 0));                       // not an earlier minor
}

TEST(ArchitectureFit, WhatCannotBeJudgedHereIsLetThrough) {
  for (const char* build : {"all", "all-major", "native", "80-real,native"}) EXPECT_TRUE(build_runs_on(build, 10, 0)) << build;
  EXPECT_FALSE(build_runs_on("", 9, 0));  // nothing built
}

TEST(ArchitectureFit, TheRefusalNamesTheDeviceAndTheOptionToRebuildWith) {
  EXPECT_EQ(architecture_mismatch("80-real,90a-real", "NVIDIA H200", 9, 0), "");
  EXPECT_EQ(architecture_mismatch("80-real,90a-real", "NVIDIA B200", 10, 0),
            "NVIDIA B200 (sm_100) cannot run this build's CUDA code, built for 80-real;90a-real: rebuild with "
            "-DTRIPOD_CUDA_ARCHITECTURES=\"80-real;90a-real;100-real\" (cmake --preset release with it, then the "
            "build)");
}

}  // namespace
}  // namespace tripod::cuda
