#include "train/train_job.h"

#include <cstdio>

#include "backend/backend_factory.h"
#include "comm/mpi_communicator.h"
#include "comm/rank_errors.h"
#include "comm/world.h"
#include "parallel/launch.h"

namespace tripod {
namespace {

void print_summary(const TrainSummary& s) {
  std::printf("done: %lld steps, loss %.4f -> %.4f", static_cast<long long>(s.steps), s.first_loss, s.final_loss);
  if (s.final_val_loss >= 0) std::printf(", val loss %.4f", s.final_val_loss);
  std::printf(", %.0f tok/s, MFU %.2f%%, %.1f s\n", s.tokens_per_second, 100 * s.mfu, s.seconds);
}

void run_parallel(const TrainJob& job, const LaunchInfo& launch, Backend& backend) {
  MpiRuntime mpi;
  auto world = make_world(backend, job.comm);  // --comm: device tensors staged through the host, or NCCL
  ParallelLayout layout = job.layout;
  if (layout.dp == 0) layout.dp = std::max(1, world->size() / std::max(1, layout.tp * layout.pp));
  const StepShape step{job.config.train.batch_size, job.config.train.seq_len, job.config.train.pipeline_split};
  check_on_every_rank(*world, [&] {
    check_launch_matches(launch, *world);
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
  resolve_comm_kind(job.comm.kind, *backend);  // a bad --comm is refused even where no communicator is made
  if (job.parallel || launch.world_size > 1) {
    run_parallel(job, launch, *backend);
  } else {
    print_summary(run_training(job.config, job.options, *backend));
  }
}

}  // namespace tripod
