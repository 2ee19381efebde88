// Launch detection from fake environments (each launcher, precedence, missing local variables,
// bad values), and against the real one: under mpirun it must find Open MPI and agree with MPI.
#include <gtest/gtest.h>

#include <map>

#include "support/test_backend.h"
#include "mpi_test_util.h"
#include "parallel/launch.h"

namespace tripod::testing {
namespace {

EnvLookup fake_env(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

void expect_launch(const LaunchInfo& got, const std::string& launcher, int rank, int size, int local_rank,
                   int local_size) {
  EXPECT_EQ(got.launcher, launcher);
  EXPECT_EQ(got.rank, rank);
  EXPECT_EQ(got.world_size, size);
  EXPECT_EQ(got.local_rank, local_rank);
  EXPECT_EQ(got.local_size, local_size);
}

TEST(Launch, EachLauncher) {
  expect_launch(detect_launch(fake_env({})), "single", 0, 1, 0, 1);
  expect_launch(detect_launch(fake_env({{"OMPI_COMM_WORLD_RANK", "5"}, {"OMPI_COMM_WORLD_SIZE", "8"},
                                        {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}})),
                "openmpi", 5, 8, 1, 4);
  expect_launch(detect_launch(fake_env({{"SLURM_PROCID", "6"}, {"SLURM_NTASKS", "16"}, {"SLURM_LOCALID", "2"},
                                        {"SLURM_NTASKS_PER_NODE", "8"}})),
                "slurm", 6, 16, 2, 8);
  expect_launch(detect_launch(fake_env({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "3"},
                                        {"SLURM_TASKS_PER_NODE", "4(x2)"}})),
                "slurm", 3, 8, 3, 4);
  expect_launch(detect_launch(fake_env({{"RANK", "2"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "0"},
                                        {"LOCAL_WORLD_SIZE", "2"}})),
                "torchrun", 2, 4, 0, 2);
}

TEST(Launch, PrecedenceAndMissingLocalVariables) {
  // mpirun inside a Slurm allocation: Open MPI's variables describe the real processes.
  expect_launch(detect_launch(fake_env({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"OMPI_COMM_WORLD_RANK", "3"},
                                        {"OMPI_COMM_WORLD_SIZE", "4"}})),
                "openmpi", 3, 4, 3, 4);
  // Only RANK (no WORLD_SIZE) is not a launch: one process.
  expect_launch(detect_launch(fake_env({{"RANK", "1"}})), "single", 0, 1, 0, 1);
  // No local variables: one node.
  expect_launch(detect_launch(fake_env({{"RANK", "1"}, {"WORLD_SIZE", "3"}})), "torchrun", 1, 3, 1, 3);
}

TEST(Launch, BadValuesNameTheVariable) {
  auto message_of = [](std::map<std::string, std::string> vars) -> std::string {
    try {
      detect_launch(fake_env(std::move(vars)));
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_EQ(message_of({{"RANK", "two"}, {"WORLD_SIZE", "4"}}),
            "launch: environment variable RANK='two' is not a non-negative integer");
  EXPECT_EQ(message_of({{"RANK", "4"}, {"WORLD_SIZE", "4"}}), "launch (torchrun): RANK=4 is not below WORLD_SIZE=4");
  EXPECT_NE(message_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "2"},
                        {"SLURM_NTASKS_PER_NODE", "2"}}).find("local rank 2 of 2 does not fit"),
            std::string::npos);
}

TEST(Launch, RealEnvironmentAgreesWithMpi) {
  std::unique_ptr<Communicator> world = testing::test_world();
  const LaunchInfo launch = detect_launch();
  EXPECT_EQ(launch.launcher, "openmpi") << "these suites run under Open MPI's mpirun";
  EXPECT_EQ(launch.rank, world->rank());
  EXPECT_EQ(launch.world_size, world->size());
  EXPECT_LT(launch.local_rank, launch.local_size);
  EXPECT_NO_THROW(check_launch_matches(launch, *world));
  LaunchInfo wrong = launch;
  wrong.world_size = world->size() + 1;
  try {
    check_launch_matches(wrong, *world);
    ADD_FAILURE() << "a world-size mismatch was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(str_cat("but the MPI world mpi:world has rank ", world->rank(), " of ",
                                                 world->size())),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tripod::testing
