// Conformance through a checkpoint (tripod conform --reshard): K/2 steps of one layout, its state
// saved as a sharded checkpoint on disk, loaded into another layout (each rank reading only what
// it holds there), the remaining steps in that layout - against the same single-device reference
// and tolerance as a straight run. Resharding moves values without arithmetic, so any difference
// beyond the reduction-order noise of the two layouts is a bug of saving, loading or resuming: a
// block in the wrong place, a lost AdamW moment, the step count.
#pragma once
#include <filesystem>

#include "conform/conformance.h"

namespace tripod::conform {

struct ReshardRun {
  const ParallelLayout* saved;   // the layout that trains first and saves
  Communicator* save_group;      // this rank's replica of it
  int save_replica = 0;          // which replica (each writes its own checkpoint root)
  const ParallelLayout* loaded;  // the layout that resumes
  Communicator* load_group;      // this rank's replica of it (every replica reads replica 0's)
};

// Collective over `world` (every rank is in one group of each layout). Checkpoints go under
// `root`, which every rank must see (a shared folder across nodes).
// `faults` as the straight rows take them (planted faults, released buffers filled with NaN): the
// checkpoint rows ran without, so a fault or a read after release on the save/resume path passed.
Trajectory run_through_checkpoint(const RunConfig& config, const ReshardRun& run, Communicator& world, int steps,
                                  Backend& backend, const std::filesystem::path& root, const FaultPlan& faults);

}  // namespace tripod::conform
