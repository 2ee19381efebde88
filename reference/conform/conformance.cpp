#include "conform/conformance.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <cstdio>
#include <sstream>

#include "core/digest.h"
#include "data/random_batch.h"
#include "model/param_spec.h"
#include "parallel/process_grid.h"
#include "train/distributed_trainer.h"
#include "train/trainer.h"

namespace tripod::conform {

double distance(double a, double b) {
  const double d = std::fabs(a - b);
  return std::isnan(d) ? INFINITY : d;
}

RunConfig default_conformance_config(const std::string& dtype) {
  nlohmann::json j = default_config_json();
  j["model"] = {{"n_layer", 4}, {"n_head", 4}, {"d_model", 32}, {"d_ff", 64}, {"vocab_size", 97},
                {"context", 16}, {"tie_embeddings", true}, {"layernorm_eps", 1e-5}};
  j["train"]["dtype"] = dtype;
  j["train"]["batch_size"] = 8;
  j["train"]["seq_len"] = 16;
  j["train"]["steps"] = 5;
  j["optim"]["lr"] = 1e-2;
  j["optim"]["warmup_steps"] = 2;
  j["optim"]["grad_clip"] = 0.5;  // active, so the sharded norm computation matters
  return parse_run_config(j);
}

data::Batch conformance_batch(const RunConfig& c, int step) {
  return data::random_token_batch(c.train.batch_size, c.train.seq_len, c.model.vocab_size, static_cast<uint64_t>(step),
                                  "conform.batch", 0.125);
}

double run_conformance_steps(TrainingEngine& engine, const RunConfig& config, int first, int last, Trajectory& t) {
  double seconds = 0;
  for (int s = first; s < last; ++s) {
    const StepResult r = engine.train_step(conformance_batch(config, s));
    t.losses.push_back(r.loss);
    t.norms.push_back(r.grad_norm);
    seconds += r.seconds;
  }
  return seconds;
}

Trajectory run_single_device(const RunConfig& config, int steps, Backend& backend) {
  Trainer trainer(config, backend);
  trainer.initialise();
  Trajectory t;
  t.seconds_per_step = run_conformance_steps(trainer, config, 0, steps, t) / std::max(steps, 1);
  t.params = host_values(backend, trainer.params());
  return t;
}

StepShape conformance_step(const RunConfig& config) {
  return {config.train.batch_size, config.train.seq_len, config.train.pipeline_split};
}

Trajectory run_layout(const RunConfig& base, const ParallelLayout& given, Communicator& group, int steps,
                      Backend& backend, const FaultPlan& faults) {
  check(group.size() == given.ranks(), "layout ", given.name(), " needs ", given.ranks(), " ranks, the group has ",
        group.size());
  const RunConfig config = layout_run_config(base, given);
  ParallelLayout layout = given;
  layout.bucket_bytes = 4096;  // several buckets even for the small model
  ProcessGrid grid(group, layout.grid(), layout.grid_order);
  backend.reset_peak_memory();
  const std::size_t before = backend.memory_stats().live;
  Trajectory t;
  {
    DistributedTrainer trainer(config, backend, grid, layout, faults);
    trainer.initialise();
    t.seconds_per_step = run_conformance_steps(trainer, config, 0, steps, t) / std::max(steps, 1);
    const MemoryReport m = trainer.memory();
    t.accounted_bytes = m.params + m.grads + m.optimizer + m.activations + m.transient;
    t.transient_bytes = m.transient;
    t.peak_bytes = backend.memory_stats().peak - before;  // before gathering: that is a report's, not training's
    t.params = trainer.gather_params();
  }
  return t;
}

RoundingFloor rounding_floor(const Trajectory& low, const Trajectory& fp64) {
  check(low.params.size() == fp64.params.size() && low.losses.size() == fp64.losses.size(),
        "conformance: references with different tensors or steps");
  RoundingFloor floor;
  floor.params.assign(low.params.size(), 0.0);
  for (std::size_t i = 0; i < low.params.size(); ++i)
    for (std::size_t k = 0; k < low.params[i].size(); ++k)
      floor.params[i] = std::max(floor.params[i], distance(low.params[i][k], fp64.params[i][k]));
  double loss = 0, norm = 0;  // the largest so far (conformance.h says why)
  for (std::size_t s = 0; s < low.losses.size(); ++s) {
    loss = std::max(loss, distance(low.losses[s], fp64.losses[s]));
    norm = std::max(norm, distance(low.norms[s], fp64.norms[s]));
    floor.losses.push_back(loss);
    floor.norms.push_back(norm);
  }
  return floor;
}

Errors compare(const Trajectory& got, const Trajectory& ref, const RunConfig& config, const RoundingFloor& floor) {
  Errors e;
  const bool fp64 = config.train.dtype == DType::F64;
  const double rtol = fp64 ? 1e-10 : 1e-5;
  const double steps = static_cast<double>(ref.losses.size());
  const double adam_slack = fp64 ? 0.0 : config.schedule.max_lr * steps * 1e-3;
  // Every check: error <= bound; the largest ratio is the row's use of its tolerance.
  auto within = [&](double error, double bound, const std::string& what) {
    e.error_over_bound = std::max(e.error_over_bound, bound > 0 ? error / bound : (error > 0 ? INFINITY : 0.0));
    if (error <= bound) return;  // NaN fails too
    if (e.pass) e.failure = what;
    e.pass = false;
  };
  check(got.losses.size() == ref.losses.size() && got.params.size() == ref.params.size(),
        "conformance: trajectories of different length");
  for (std::size_t s = 0; s < ref.losses.size(); ++s) {
    const double dl = distance(got.losses[s], ref.losses[s]), dn = distance(got.norms[s], ref.norms[s]);
    e.loss_abs = std::max(e.loss_abs, dl);
    e.loss_rel = std::max(e.loss_rel, dl / std::fabs(ref.losses[s]));
    e.norm_abs = std::max(e.norm_abs, dn);
    e.norm_rel = std::max(e.norm_rel, dn / std::fabs(ref.norms[s]));
    // bf16-mixed: a layout's fp32-level difference can flip the rounding of a GEMM operand (a 2^-8
    // relative step), so its trajectory separates from the reference at that scale, which the
    // reference's own distance from fp64 measures; fp32 and fp64 losses need no floor.
    const bool step_floor = rounds_gemm_operands(config.train) && !floor.empty();
    within(dl, rtol * std::fabs(ref.losses[s]) + (step_floor ? 2 * floor.losses[s] : 0.0),
           "loss at step " + std::to_string(s));
    within(dn, rtol * std::fabs(ref.norms[s]) + (step_floor ? 2 * floor.norms[s] : 0.0),
           "gradient norm at step " + std::to_string(s));
  }
  std::vector<std::string> names;
  for (const ParamSpec& spec : gpt_param_specs(config.model)) names.push_back(spec.name);
  check(names.size() == ref.params.size(), "conformance: ", ref.params.size(), " parameter tensors for a model of ",
        names.size());
  check(floor.empty() || floor.params.size() == names.size(), "conformance: a rounding floor of ", floor.params.size(),
        " tensors for a model of ", names.size());
  for (std::size_t i = 0; i < ref.params.size(); ++i) {
    // A layout that hands back another shape (a padded or partial shard) is wrong, not close.
    check(got.params[i].size() == ref.params[i].size(), "conformance: parameter ", names[i], " came back with ",
          got.params[i].size(), " elements, the reference has ", ref.params[i].size());
    double scale = 1e-300, worst = 0;
    for (std::size_t k = 0; k < ref.params[i].size(); ++k) {
      scale = std::max(scale, std::fabs(ref.params[i][k]));
      worst = std::max(worst, distance(got.params[i][k], ref.params[i][k]));
    }
    e.param_abs = std::max(e.param_abs, worst);
    if (worst / scale > e.param_rel) {
      e.param_rel = worst / scale;
      e.worst_param = names[i];
    }
    const double rounding = fp64 || floor.empty() ? 0.0 : 2 * floor.params[i];
    within(worst, rtol * scale + adam_slack + rounding, "parameter " + names[i]);
  }
  return e;
}

bool bit_identical(const Trajectory& a, const Trajectory& b) {
  return a.losses == b.losses && a.norms == b.norms && a.params == b.params;
}

std::string fingerprint(const Trajectory& t) {
  Xxh64 hash;
  auto add = [&](const std::vector<double>& v) { hash.update(v.data(), v.size() * sizeof(double)); };
  add(t.losses);
  add(t.norms);
  for (const auto& p : t.params) add(p);
  return hash.hex();
}

std::string first_difference(const Trajectory& a, const Trajectory& b) {
  for (std::size_t s = 0; s < a.losses.size(); ++s) {
    if (a.losses[s] != b.losses[s]) return "loss at step " + std::to_string(s);
    if (a.norms[s] != b.norms[s]) return "grad norm at step " + std::to_string(s);
  }
  for (std::size_t i = 0; i < a.params.size(); ++i)
    for (std::size_t k = 0; k < a.params[i].size(); ++k)
      if (a.params[i][k] != b.params[i][k]) return "parameter tensor " + std::to_string(i) + " element " + std::to_string(k);
  return "none";
}

}  // namespace tripod::conform
