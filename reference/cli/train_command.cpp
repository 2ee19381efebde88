// tripod train --config PRESET_OR_FILE [--set key=value]... [--save DIR] [--resume DIR]
//              [--tp N --pp N --dp N --zero S --bucket-mb X --grid-order tp-dp-pp]
//              [--schedule afab|1f1b|interleaved --microbatches M --virtual-stages V
//               --pipeline-split 2,1,1 --pipeline-trace FILE]
// Under mpirun / srun / torchrun-style launchers (or with --dp/--zero) it runs data-parallel
// across the launched ranks; a bad layout is reported by every rank before any communication.
#include <omp.h>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <thread>

#include "backend/backend_factory.h"
#include "cli/commands.h"
#include "comm/mpi_communicator.h"
#include "comm/staged_communicator.h"
#include "data/token_dataset.h"
#include "parallel/launch.h"
#include "parallel/pipeline_executor.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/pipeline_split.h"
#include "parallel/process_grid.h"
#include "parallel/tp_group.h"
#include "train/train_loop.h"

namespace tripod::cli {
namespace {

struct TrainCommandOptions {
  std::string config = "tiny";
  std::vector<std::string> overrides;
  TrainOptions train;
  int tp = 1, pp = 1, dp = 0, zero = 0;  // dp 0: the world size / (tp * pp)
  bool sequence_parallel = false;
  double bucket_mb = 4.0;
  std::string grid_order = "tp-dp-pp";
  std::string schedule = "1f1b", pipeline_split, pipeline_trace;
  int microbatches = 0;  // 0: train.micro_batches from the config
  int virtual_stages = 1;
  std::string backend = "cpu";
};

void print_summary(const TrainSummary& s) {
  std::printf("done: %lld steps, loss %.4f -> %.4f", static_cast<long long>(s.steps), s.first_loss, s.final_loss);
  if (s.final_val_loss >= 0) std::printf(", val loss %.4f", s.final_val_loss);
  std::printf(", %.0f tok/s, MFU %.2f%%, %.1f s\n", s.tokens_per_second, 100 * s.mfu, s.seconds);
}

// Several ranks on one machine share its cores: unless OMP_NUM_THREADS says otherwise, each rank
// takes cores / local ranks threads so that the ranks' BLAS and OpenMP pools do not fight.
void pin_threads(const LaunchInfo& launch) {
  if (std::getenv("OMP_NUM_THREADS") != nullptr || launch.local_size <= 1) return;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  omp_set_num_threads(std::max(1, cores / launch.local_size));
}

void run_parallel(const TrainCommandOptions& o, const RunConfig& config, const LaunchInfo& launch, Backend& backend) {
  MpiRuntime mpi;
  auto world = communicator_for(mpi_world(), backend);  // device tensors reach MPI through host copies
  const std::string where = "rank " + std::to_string(world->rank()) + " of " + std::to_string(world->size()) + ": ";
  // Layout checks use only what every rank has, so every rank fails alike here, before any
  // communication, and exits 1 on its own.
  GridShape shape{o.tp, o.pp, o.dp > 0 ? o.dp : std::max(1, world->size() / std::max(1, o.tp * o.pp))};
  try {
    check_launch_matches(launch, *world);
    check_grid_layout(shape, world->size(), o.grid_order);
    // Pipeline: enough layers for the chunks, a split that adds up, a schedule the micro-batches allow.
    const PipelineSplit split(config.model.n_layer, shape.pp, o.virtual_stages, config.train.pipeline_split);
    check(o.virtual_stages == 1 || shape.pp > 1, "--virtual-stages ", o.virtual_stages, " needs --pp > 1");
    const int64_t micro = config.train.micro_batches;
    check((config.train.batch_size / shape.dp) % micro == 0, "train.batch_size ", config.train.batch_size, " over dp=",
          shape.dp, " gives ", config.train.batch_size / shape.dp, " sequences per rank, which do not split into ",
          micro, " micro-batches (--microbatches)");
    check_message_tags(make_schedule(parse_schedule_kind(o.schedule), shape.pp, static_cast<int>(micro), o.virtual_stages));
    tp::validate_tensor_parallel(config.model, shape.tp);  // heads / d_ff divisible, tp <= heads
    check(o.zero >= 0 && o.zero <= 3, "--zero must be 0, 1, 2 or 3 (got ", o.zero, ")");
    check(o.bucket_mb > 0, "--bucket-mb must be positive (got ", o.bucket_mb, ")");
    check(!o.sequence_parallel || shape.tp > 1, "--sequence-parallel needs --tp > 1");
    if (o.sequence_parallel)
      tp::sequence_shard_rows(config.train.batch_size / shape.dp / config.train.micro_batches * config.train.seq_len,
                              shape.tp);  // the micro-batch's tokens must split evenly
  } catch (const Error& e) {
    // Every rank reports, and waits for the others to have reported before exiting: mpirun kills
    // the remaining ranks as soon as one exits non-zero, which would cut their messages short.
    std::fprintf(stderr, "tripod: error: %s%s\n", where.c_str(), e.what());
    std::fflush(stderr);
    world->barrier();
    throw Error("");
  }
  try {
    ProcessGrid grid(*world, shape, o.grid_order);
    ParallelRun run;
    run.world = world.get();
    run.dp = &grid.dp();
    run.settings = {o.zero, static_cast<int64_t>(o.bucket_mb * 1024 * 1024), -1, &grid.tp(), o.sequence_parallel, {}};
    run.layout = describe(shape) + ", ZeRO-" + std::to_string(o.zero) + (o.sequence_parallel ? ", sequence parallel" : "");
    if (shape.pp > 1) {
      run.settings.pipeline = {&grid.pp(), grid.embedding(), parse_schedule_kind(o.schedule), o.virtual_stages, {}};
      run.layout += ", " + o.schedule + " m=" + std::to_string(config.train.micro_batches) +
                    (o.virtual_stages > 1 ? " v=" + std::to_string(o.virtual_stages) : "");
    }
    run.pipeline_trace = o.pipeline_trace;
    const TrainSummary s = run_training(config, o.train, backend, &run);
    if (world->rank() == 0) print_summary(s);
  } catch (const Error& e) {
    // A rank that fails during the run may fail alone (a file only it reads, say) while the others
    // wait in a collective: report here, then end every rank.
    std::fprintf(stderr, "tripod: error: %s%s\n", where.c_str(), e.what());
    std::fflush(stderr);
    if (world->size() > 1) MPI_Abort(MPI_COMM_WORLD, 1);
    throw Error("");  // one rank: already reported; main exits 1
  }
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "train a GPT on a prepared token directory");
  auto o = std::make_shared<TrainCommandOptions>();
  cmd->add_option("-c,--config", o->config, "preset name (tiny, small, gpt2-124m) or JSON config file")
      ->capture_default_str();
  cmd->add_option("--set", o->overrides, "override a config key, e.g. --set train.steps=50 (repeatable)");
  cmd->add_option("--save", o->train.save_dir, "write a checkpoint directory here at the end of the run");
  cmd->add_option("--resume", o->train.resume_dir, "continue from this checkpoint directory");
  cmd->add_option("--exit-after", o->train.exit_after,
                  "stop after N steps of this invocation (checkpointing to --save), as if interrupted");
  cmd->add_option("--tp", o->tp, "tensor-parallel size")->capture_default_str();
  cmd->add_option("--pp", o->pp, "pipeline-parallel size")->capture_default_str();
  cmd->add_option("--dp", o->dp, "data-parallel size (default: ranks / (tp * pp))");
  cmd->add_option("--zero", o->zero, "ZeRO stage 0, 1, 2 or 3")->capture_default_str();
  cmd->add_flag("--sequence-parallel", o->sequence_parallel, "with --tp: split LayerNorm regions along the sequence");
  cmd->add_option("--bucket-mb", o->bucket_mb, "gradient bucket size in MiB")->capture_default_str();
  cmd->add_option("--grid-order", o->grid_order, "rank order of the grid axes, fastest first")->capture_default_str();
  cmd->add_option("--schedule", o->schedule, "pipeline schedule: afab (GPipe), 1f1b or interleaved")
      ->capture_default_str();
  cmd->add_option("--microbatches", o->microbatches, "micro-batches per step (default: train.micro_batches)");
  cmd->add_option("--virtual-stages", o->virtual_stages, "model chunks per pipeline rank (interleaved schedule)")
      ->capture_default_str();
  cmd->add_option("--pipeline-split", o->pipeline_split,
                  "layers per chunk, e.g. 2,1,1 (sets train.pipeline_split; default: even), or auto: balanced by "
                  "FLOPs with the LM head counted");
  cmd->add_option("--pipeline-trace", o->pipeline_trace,
                  "write the last step's pipeline timeline (every action's start and end per rank) as JSON here");
  add_backend_option(*cmd, o->backend);
  cmd->callback([o]() {
    std::vector<std::string> overrides = o->overrides;
    if (o->microbatches != 0) overrides.push_back("train.micro_batches=" + std::to_string(o->microbatches));
    if (!o->pipeline_split.empty() && o->pipeline_split != "auto") {  // "3,1" -> train.pipeline_split=[3,1]
      std::string list;
      for (int64_t n : parse_pipeline_split(o->pipeline_split)) list += (list.empty() ? "" : ",") + std::to_string(n);
      overrides.push_back("train.pipeline_split=[" + list + "]");
    }
    RunConfig config = parse_run_config(load_config_json(o->config, overrides));
    if (o->pipeline_split == "auto") {  // balanced by FLOPs, once the vocabulary is known
      if (config.model.vocab_size == 0) resolve_vocab(config, data::TokenDataset::open(config.data.dir, "train").vocab_size(),
                                                      config.data.dir);
      config.train.pipeline_split = balanced_pipeline_split(config.model, config.train.seq_len, o->pp * o->virtual_stages);
      config.json["train"]["pipeline_split"] = config.train.pipeline_split;
    }
    const LaunchInfo launch = detect_launch();
    pin_threads(launch);
    auto backend = make_backend(o->backend);
    const bool parallel = launch.world_size > 1 || o->dp > 1 || o->zero != 0 || o->tp != 1 || o->pp != 1;
    if (parallel) {
      run_parallel(*o, config, launch, *backend);
    } else {
      print_summary(run_training(config, o->train, *backend));
    }
  });
}

}  // namespace tripod::cli
