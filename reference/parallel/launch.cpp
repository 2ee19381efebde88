#include "parallel/launch.h"


#include <algorithm>
#include <cstdlib>


namespace tripod {

namespace {

struct LauncherVariables {
  const char* launcher;
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* local_size;
};

constexpr LauncherVariables kLaunchers[] = {
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
};

// The integer at the start of `text`; with `whole`, nothing may follow it.
int parse_count(const std::string& variable, const std::string& text, bool whole) {
  char* end = nullptr;
  const long value = std::strtol(text.c_str(), &end, 10);
  const bool ok = end != text.c_str() && (!whole || *end == '\0') && value >= 0 && value <= 1 << 24;
  check(ok, "launch: environment variable ", variable, "='", text, "' is not a non-negative integer");
  return static_cast<int>(value);
}

std::optional<int> read_count(const EnvLookup& env, const std::string& variable) {
  const std::optional<std::string> text = env(variable);
  if (!text) return std::nullopt;
  return parse_count(variable, *text, true);
}

}  // namespace

std::optional<std::string> process_env(const std::string& name) {
  const char* value = std::getenv(name.c_str());
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

LaunchInfo detect_launch(const EnvLookup& env) {
  for (const LauncherVariables& vars : kLaunchers) {
    const std::optional<int> rank = read_count(env, vars.rank);
    const std::optional<int> size = read_count(env, vars.size);
    if (!rank || !size) continue;
    LaunchInfo info;
    info.launcher = vars.launcher;
    info.rank = *rank;
    info.world_size = *size;
    std::optional<int> local_size = read_count(env, vars.local_size);
    if (!local_size && info.launcher == "slurm") {
      if (auto tasks = env("SLURM_TASKS_PER_NODE")) local_size = parse_count("SLURM_TASKS_PER_NODE", *tasks, false);
    }
    const std::optional<int> local_rank = read_count(env, vars.local_rank);
    info.local_rank = local_rank.value_or(info.rank);
    info.local_size = local_size.value_or(info.world_size);
    check(info.world_size >= 1 && info.rank < info.world_size, "launch (", info.launcher, "): ", vars.rank, "=",
          info.rank, " is not below ", vars.size, "=", info.world_size);
    check(info.local_size >= 1 && info.local_rank < info.local_size && info.local_size <= info.world_size,
          "launch (", info.launcher, "): local rank ", info.local_rank, " of ", info.local_size,
          " does not fit a world of ", info.world_size, " (", vars.local_rank, ", ", vars.local_size, ")");
    return info;
  }
  return LaunchInfo{};
}

std::string describe(const LaunchInfo& launch) {
  return str_cat(launch.launcher, ": rank ", launch.rank, " of ", launch.world_size, ", local ", launch.local_rank,
                 " of ", launch.local_size);
}

void check_launch_matches(const LaunchInfo& launch, const Communicator& world) {
  if (launch.rank == world.rank() && launch.world_size == world.size()) return;
  const std::string hint =
      launch.launcher == "single"
          ? " (no launcher variables were found: start it with mpirun, srun or torchrun-style RANK/WORLD_SIZE)"
          : " (was it started by a launcher of another MPI than the one Tripod links, e.g. srun without "
            "--mpi=pmix, or as a single process inside a batch allocation?)";
  fail("launch: the environment says ", describe(launch), " but the MPI world ", world.name(), " has rank ",
       world.rank(), " of ", world.size(), hint);
}

}  // namespace tripod
