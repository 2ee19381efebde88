#include "train/diverged_state.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "backend/transfer.h"
#include "comm/host_collectives.h"
#include "core/error.h"

namespace tripod {

namespace {
std::string values_text(double count) {
  return str_cat(static_cast<int64_t>(count), count == 1 ? " infinite or NaN value" : " infinite or NaN values");
}
}  // namespace

std::string describe_nonfinite_state(Backend& backend, const std::vector<StateRegion>& regions, Communicator* world) {
  // One count per region, over its saved runs, read back in one download.
  const Tensor counts = backend.alloc({static_cast<int64_t>(std::max<std::size_t>(regions.size(), 1))}, DType::F64);
  for (std::size_t i = 0; i < regions.size(); ++i) {
    const StateRegion& region = regions[i];
    if (!region.saves) continue;
    const Tensor count = counts.view(static_cast<int64_t>(i), {1});
    for (const LogicalRun& run : region.runs) backend.count_nonfinite(count, region.local.view(run.local, {run.length}));
  }
  const std::vector<double> host = to_host_f64(backend, counts);
  double mine = 0;
  std::vector<std::string> names;
  for (std::size_t i = 0; i < regions.size(); ++i) {
    if (host[i] == 0) continue;
    mine += host[i];
    names.push_back(regions[i].tensor + " (" + regions[i].kind + ")");
  }
  // Over ranks, which hold them; each rank names only its own tensors (rank 0 prints a rollback).
  double total = mine;
  std::string where = name_list(names, 3);
  if (world) {
    const std::vector<double> per_rank = all_gather_values(*world, {mine});
    total = 0;
    std::vector<std::string> holders;
    for (std::size_t r = 0; r < per_rank.size(); ++r) {
      total += per_rank[r];
      if (per_rank[r] > 0) holders.push_back(std::to_string(r));
    }
    where = str_cat("held by rank", holders.size() == 1 ? " " : "s ", name_list(holders), "; rank ", world->rank(),
                    names.empty() ? "'s are all finite" : "'s in " + where);
  }
  if (total == 0) return {};
  return str_cat(values_text(total), " in the parameters and AdamW moments (", where, ")");
}

bool overflow_first_saved_parameter(Backend& backend, const std::vector<StateRegion>& regions) {
  for (const StateRegion& region : regions) {
    if (region.kind != "param" || !region.saves || region.runs.empty()) continue;
    backend.fill(region.local.view(region.runs.front().local, {1}), std::numeric_limits<double>::infinity());
    return true;
  }
  return false;
}

}  // namespace tripod
