// The group a rank benchmarks in: the world, or (--tp/--pp/--dp with --group) its TP, DP or PP
// group of a 3D layout, every group of that axis running at once, which is how training loads the
// network.
#pragma once
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "commbench/plan.h"
#include "parallel/process_grid.h"

namespace tripod::commbench {

struct BenchGroup {
  std::unique_ptr<ProcessGrid> grid;
  Communicator* comm = nullptr;
  int index = 0;  // which group, 0 for the group of world rank 0
  int count = 1;  // how many groups run concurrently
  std::string description;
};

// Collective over the world (a grid splits it); throws tripod::Error for a layout that does not fit.
BenchGroup make_group(const CommBenchPlan& plan, Communicator& world);

}  // namespace tripod::commbench
