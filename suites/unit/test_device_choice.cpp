// Which CUDA device a rank uses, checked without a GPU: TRIPOD_CUDA_DEVICE, else the launcher's
// local rank modulo the devices, else 0; bad values are errors naming the variable.
#include <gtest/gtest.h>

#include <map>

#include "backend/cuda/host/device_choice.h"
#include "core/error.h"

namespace tripod::cuda {
namespace {

int choose(int count, std::map<std::string, std::string> vars) {
  return choose_device(count, [&](const char* name) { return vars.count(name) ? vars[name] : std::string(); });
}

std::string error_of(int count, std::map<std::string, std::string> vars) {
  try {
    choose(count, std::move(vars));
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(DeviceChoice, ForcedThenLocalRankThenZero) {
  EXPECT_EQ(choose(8, {}), 0);
  EXPECT_EQ(choose(8, {{"OMPI_COMM_WORLD_LOCAL_RANK", "5"}}), 5);
  EXPECT_EQ(choose(4, {{"OMPI_COMM_WORLD_LOCAL_RANK", "5"}}), 1);  // more ranks than GPUs share them
  EXPECT_EQ(choose(8, {{"LOCAL_RANK", "3"}}), 3);
  EXPECT_EQ(choose(8, {{"SLURM_LOCALID", "7"}}), 7);
  EXPECT_EQ(choose(8, {{"OMPI_COMM_WORLD_LOCAL_RANK", "2"}, {"LOCAL_RANK", "6"}}), 2);
  // The launcher whose rank detect_launch takes (Slurm before torchrun) also picks the GPU: the
  // GPU came from LOCAL_RANK and the rank from SLURM_PROCID.
  EXPECT_EQ(choose(8, {{"SLURM_LOCALID", "1"}, {"LOCAL_RANK", "6"}}), 1);
  EXPECT_EQ(choose(8, {{"TRIPOD_CUDA_DEVICE", "4"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "2"}}), 4);
}

TEST(DeviceChoice, BadValuesAreErrorsNamingTheVariable) {
  EXPECT_NE(error_of(0, {}).find("no CUDA device is visible"), std::string::npos);
  EXPECT_NE(error_of(2, {{"TRIPOD_CUDA_DEVICE", "2"}}).find("TRIPOD_CUDA_DEVICE='2' is not a device index below the 2"),
            std::string::npos);
  EXPECT_NE(error_of(2, {{"TRIPOD_CUDA_DEVICE", "-1"}}).find("TRIPOD_CUDA_DEVICE"), std::string::npos);
  EXPECT_NE(error_of(2, {{"LOCAL_RANK", "x"}}).find("LOCAL_RANK='x' is not a local rank"), std::string::npos);
}

}  // namespace
}  // namespace tripod::cuda
