#include "train/train_job.h"

#include <cmath>
#include <cstdio>

#include "backend/backend_factory.h"
#include "comm/mpi_communicator.h"
#include "comm/rank_errors.h"
#include "comm/world.h"
#include "parallel/launch.h"

namespace tripod {
namespace {

void print_summary(const TrainSummary& s) {
  if (s.steps == 0 && s.steps_taken == 0) {  // resumed at train.steps (a restarted job that had finished)
    std::printf("done: no steps to run (the run is already at train.steps)\n");
    return;
  }
  if (s.steps == 0) {  // anomaly.policy=rollback went back to where the run started: no losses to show
    std::printf("done: 0 steps kept of %lld run (rolled back to the step the run started from)\n",
                static_cast<long long>(s.steps_taken));
    return;
  }
  if (s.steps_applied > 0)
    std::printf("done: %lld steps, loss %.4f -> %.4f", static_cast<long long>(s.steps), s.first_loss, s.final_loss);
  else  // anomaly.policy=skip skipped every step: no loss of the run to show
    std::printf("done: %lld steps, every update skipped", static_cast<long long>(s.steps));
  if (s.final_val_loss >= 0) std::printf(", val loss %.4f", s.final_val_loss);
  std::printf(", %.0f tok/s, MFU %.2f%%, %.1f s\n", s.tokens_per_second, 100 * s.mfu, s.seconds);
}

StepShape step_shape(const RunConfig& config) {
  return {config.train.batch_size, config.train.seq_len, config.train.pipeline_split};
}

void run_parallel(const TrainJob& job, const LaunchInfo& launch, Backend& backend) {
  MpiRuntime mpi;
  auto world = make_world(backend, job.comm);  // --comm: device tensors staged through the host, or NCCL
  ParallelLayout layout = job.layout;
  // dp not given: the ranks left after tp x pp, which must divide the world (3 ranks at --tp 2 were
  // "layout tp=2 pp=1 dp=1 needs 2 ranks but the world has 3": dp rounded down without a word).
  const bool dp_derived = layout.dp == 0;
  if (dp_derived) layout.dp = std::max(1, world->size() / std::max(1, layout.tp * layout.pp));
  const StepShape step = step_shape(job.config);
  check_on_every_rank(*world, [&] {
    check_launch_matches(launch, *world);
    TRIPOD_CHECK(!dp_derived || layout.tp < 1 || layout.pp < 1 || world->size() % (layout.tp * layout.pp) == 0,
                 "the world's ", world->size(), " ranks are not a multiple of tp x pp = ", layout.tp * layout.pp,
                 " (--tp ", layout.tp, " --pp ", layout.pp, "): launch a multiple of it, or give --dp");
    layout.validate(job.config.model, step, world->size());
  });
  run_or_abort_job(*world, [&] {
    ProcessGrid grid(*world, layout.grid(), layout.grid_order);
    const ParallelRun run{world.get(), &grid, layout, job.pipeline_trace};
    const TrainSummary s = run_training(job.config, job.options, backend, &run);
    if (world->rank() == 0) print_summary(s);
  });
}

}  // namespace

void run_train_job(const TrainJob& job) {
  const LaunchInfo launch = detect_launch();
  auto backend = make_backend(job.backend);
  // Options are checked even where they are not used (one process, no communicator), so that a
  // typo is found on the laptop and not on the cluster.
  resolve_comm_kind(job.comm.kind, *backend);
  check_comm_settings(job.comm);
  check(job.options.exit_after >= 0, "--exit-after: ", job.options.exit_after,
        " is negative (0: run to train.steps)");
  check(std::isfinite(job.options.exit_after_minutes) && job.options.exit_after_minutes >= 0,
        "--exit-after-minutes: ", job.options.exit_after_minutes, " is not a finite number >= 0 (0: no limit)");
  check(job.pipeline_trace.empty() || job.layout.pp > 1, "--pipeline-trace ", job.pipeline_trace,
        ": this layout has no pipeline to trace (pp = 1; give --pp 2 or more)");
  if (job.parallel || launch.world_size > 1) {
    run_parallel(job, launch, *backend);
  } else {
    ParallelLayout single = job.layout;
    single.dp = 1;
    single.validate(job.config.model, step_shape(job.config));
    print_summary(run_training(job.config, job.options, *backend));
  }
}

}  // namespace tripod
