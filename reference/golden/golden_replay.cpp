#include "golden/golden_replay.h"

#include <algorithm>
#include <cstdio>
#include <optional>

#include "backend/backend_factory.h"
#include "ckpt/durable_file.h"
#include "comm/mpi_communicator.h"
#include "comm/rank_errors.h"
#include "core/error.h"
#include "golden/bundle.h"
#include "parallel/launch.h"
#include "train/distributed_trainer.h"
#include "train/trainer.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace tripod::golden {
namespace {

using Tensors = std::vector<std::vector<double>>;

struct Replayed {
  std::vector<double> losses, norms;
  std::map<int64_t, Tensors> params;  // after step s (from 1)
};

// The bundle's K steps on `engine`; `gather` returns every parameter whole (collective under MPI).
Replayed replay(TrainingEngine& engine, const Bundle& bundle, const std::vector<ParamSpec>& specs,
                const std::function<Tensors()>& gather, Backend& backend) {
  engine.initialise();
  load_params(engine, specs, read_hf_params(bundle.dir / kModelFile, specs), backend);
  Replayed r;
  for (int64_t k = 0; k < bundle.steps; ++k) {
    const StepResult step = engine.train_step(bundle.batch(k));
    r.losses.push_back(step.loss);
    r.norms.push_back(step.grad_norm);
    if (k + 1 == 1 || k + 1 == bundle.steps) r.params[k + 1] = gather();
  }
  return r;
}

// RESULTS.json and RESULTS-step<s>.safetensors beside it.
void write_results(const ReplayOptions& o, const std::string& framework, const Replayed& r,
                   const std::vector<ParamSpec>& specs) {
  const fs::path dir = o.out.parent_path().empty() ? fs::path(".") : o.out.parent_path();
  fs::create_directories(dir);
  json params = json::object();
  for (const auto& [step, values] : r.params) {
    const std::string name = o.out.stem().string() + "-step" + std::to_string(step) + ".safetensors";
    write_hf_params(dir / name, specs, values, o.precision == "fp64" ? DType::F64 : DType::F32);
    params[std::to_string(step)] = name;
  }
  const json results = {{"framework", framework}, {"precision", o.precision}, {"steps", r.losses.size()},
                        {"losses", r.losses},     {"grad_norms", r.norms},      {"params", params}};
  ckpt::write_text_durably(o.out, results.dump(1) + "\n");
  std::printf("golden run: %zu steps, loss %.6f -> %.6f -> %s\n", r.losses.size(), r.losses.front(),
              r.losses.back(), o.out.string().c_str());
}

void replay_single(const ReplayOptions& o, const Bundle& bundle, const RunConfig& config, Backend& backend) {
  Trainer trainer(config, backend);
  const std::vector<ParamSpec> specs = trainer.params().specs();
  const Replayed r = replay(trainer, bundle, specs, [&] { return host_values(backend, trainer.params()); }, backend);
  write_results(o, "tripod single device (" + backend.name() + ")", r, specs);
}

void replay_parallel(const ReplayOptions& o, const Bundle& bundle, const RunConfig& config, Backend& backend) {
  MpiRuntime mpi;
  auto world = make_world(backend, o.comm);
  ParallelLayout layout;
  if (o.layout.empty()) {
    layout.dp = world->size();
    layout.micro_batches = static_cast<int>(config.train.micro_batches);
  } else {
    layout = ParallelLayout::parse(o.layout);
  }
  const RunConfig run_config = layout_run_config(config, layout);
  const StepShape step{run_config.train.batch_size, run_config.train.seq_len, run_config.train.pipeline_split};
  check_on_every_rank(*world, [&] {
    check_launch_matches(detect_launch(), *world);
    layout.validate(run_config.model, step, world->size());
  });
  run_or_abort_job(*world, [&] {
    ProcessGrid grid(*world, layout.grid(), layout.grid_order);
    DistributedTrainer trainer(run_config, backend, grid, layout);
    const std::vector<ParamSpec> specs = gpt_param_specs(run_config.model);
    const Replayed r = replay(trainer, bundle, specs, [&] { return trainer.gather_params(); }, backend);
    if (world->rank() == 0) write_results(o, "tripod " + layout.name() + " (" + backend.name() + ")", r, specs);
  });
}

}  // namespace

void replay_golden_bundle(const ReplayOptions& o) {
  check(!o.out.empty(), "golden run: --out RESULTS.json is required");
  const Bundle bundle = read_bundle(o.bundle);
  const RunConfig config = with_precision(bundle.config, o.precision);
  auto backend = make_backend(o.backend);
  resolve_comm_kind(o.comm.kind, *backend);  // checked on one process too, where no communicator is made
  check_comm_settings(o.comm);
  if (o.layout.empty() && detect_launch().world_size <= 1) {
    replay_single(o, bundle, config, *backend);
  } else {
    replay_parallel(o, bundle, config, *backend);
  }
}

}  // namespace tripod::golden
