#include "conform/reshard.h"

#include <algorithm>

#include "ckpt/checkpoint_root.h"
#include "comm/host_collectives.h"
#include "train/checkpointing.h"

namespace tripod::conform {
namespace fs = std::filesystem;

namespace {

fs::path replica_root(const fs::path& root, int replica) { return root / ("replica-" + std::to_string(replica)); }

}  // namespace

Trajectory run_through_checkpoint(const RunConfig& config, const ReshardRun& run, Communicator& world, int steps,
                                  Backend& backend, const fs::path& root, const FaultPlan& faults) {
  const int half = steps / 2;
  Trajectory t;
  double seconds = 0;
  {
    const RunConfig saved_config = layout_run_config(config, *run.saved);
    ParallelLayout layout = *run.saved;
    layout.bucket_bytes = 4096;  // as conform's straight runs
    ProcessGrid grid(*run.save_group, layout.grid(), layout.grid_order);
    DistributedTrainer trainer(saved_config, backend, grid, layout, faults);
    trainer.initialise();
    seconds += run_conformance_steps(trainer, saved_config, 0, half, t);
    const CheckpointMeta meta{half, &saved_config, layout.name(), half * saved_config.train.batch_size,
                              ""};  // random batches: no corpus
    save_checkpoint(run.save_group, replica_root(root, run.save_replica), trainer.state_regions(), backend, meta);
  }
  all_reduce_value(world, 0.0, ReduceOp::Sum);  // every replica's checkpoint is published
  {
    const RunConfig loaded_config = layout_run_config(config, *run.loaded);
    ParallelLayout layout = *run.loaded;
    layout.bucket_bytes = 4096;
    ProcessGrid grid(*run.load_group, layout.grid(), layout.grid_order);
    DistributedTrainer trainer(loaded_config, backend, grid, layout, faults);
    trainer.initialise();  // a fresh initialisation, entirely overwritten by the checkpoint
    // train.steps is the suite's --steps (suite_config), so the checkpoint's step is within it.
    const fs::path dir = replica_root(root, 0) / ckpt::step_dir_name(half);
    resume_from_checkpoint(run.load_group, dir, trainer.state_regions(), backend, loaded_config, /*allow_changes=*/true);
    trainer.set_step(half, half);
    seconds += run_conformance_steps(trainer, loaded_config, half, steps, t);
    t.params = trainer.gather_params();
  }
  t.seconds_per_step = seconds / std::max(steps, 1);
  return t;
}

}  // namespace tripod::conform
