#include "conform/conformance.h"

#include <chrono>
#include <cmath>
#include <numeric>
#include <cstdio>
#include <sstream>

#include <xxhash.h>

#include "data/random_batch.h"
#include "model/param_spec.h"
#include "parallel/process_grid.h"
#include "train/distributed_trainer.h"
#include "train/trainer.h"

namespace tripod::conform {

std::string Layout::name() const {
  std::ostringstream out;
  out << "tp" << tp << "-pp" << pp << "-dp" << dp << "-z" << zero << "-mb" << micro_batches;
  if (sequence_parallel) out << "-sp";
  if (schedule != "none") out << "-" << schedule;
  if (virtual_stages > 1) out << "-v" << virtual_stages;
  return out.str();
}

Layout parse_layout(const std::string& name) {
  Layout l;
  std::istringstream in(name);
  std::string part;
  while (std::getline(in, part, '-')) {
    auto number = [&](std::size_t prefix) {
      try {
        return std::stoi(part.substr(prefix));
      } catch (const std::exception&) {
        fail("layout '", name, "': cannot read a number in '", part, "'");
      }
    };
    if (part.rfind("tp", 0) == 0) l.tp = number(2);
    else if (part.rfind("pp", 0) == 0) l.pp = number(2);
    else if (part.rfind("dp", 0) == 0) l.dp = number(2);
    else if (part.rfind("mb", 0) == 0) l.micro_batches = number(2);
    else if (part.rfind("z", 0) == 0) l.zero = number(1);
    else if (part.rfind("v", 0) == 0 && part.size() > 1) l.virtual_stages = number(1);
    else if (part == "sp") l.sequence_parallel = true;
    else if (part == "afab" || part == "1f1b" || part == "interleaved") l.schedule = part;
    else fail("layout '", name, "': unknown part '", part, "' (expected e.g. tp1-pp2-dp2-z1-mb4-1f1b)");
  }
  check(l.tp >= 1 && l.pp >= 1 && l.dp >= 1 && l.micro_batches >= 1, "layout '", name, "': sizes must be >= 1");
  check(l.zero >= 0 && l.zero <= 3, "layout '", name, "': ZeRO stage must be 0-3");
  if (l.pp > 1 && l.schedule == "none") l.schedule = "1f1b";
  check(l.pp > 1 || l.schedule == "none", "layout '", name, "': a pipeline schedule needs pp > 1");
  check(l.virtual_stages >= 1, "layout '", name, "': virtual stages must be >= 1");
  check(l.virtual_stages == 1 || l.schedule == "interleaved", "layout '", name,
        "': virtual stages need the interleaved schedule");
  check(!l.sequence_parallel || l.tp > 1, "layout '", name, "': sequence parallelism needs tp > 1");
  return l;
}

std::vector<Layout> enumerate_layouts(int world_size, const RunConfig& config) {
  const int64_t batch_size = config.train.batch_size, n_layer = config.model.n_layer;
  std::vector<Layout> layouts;
  for (int tp = 1; tp <= world_size; ++tp) {
    if (world_size % tp != 0 || config.model.n_head % tp != 0 || config.model.d_ff % tp != 0) continue;
    for (int pp = 1; tp * pp <= world_size && pp <= n_layer; ++pp) {
      if (world_size % (tp * pp) != 0) continue;
      for (int dp = 1; tp * pp * dp <= world_size; ++dp) {
        if (world_size % (tp * pp * dp) != 0 || batch_size % dp != 0) continue;
        // Pipelines get their own micro-batch counts (m = p and 2p fill them) and every schedule.
        std::vector<int> micros = pp == 1 ? std::vector<int>{1, 2} : std::vector<int>{pp, 2 * pp};
        std::vector<std::pair<std::string, int>> schedules{{"none", 1}};
        if (pp > 1) schedules = {{"afab", 1}, {"1f1b", 1}, {"interleaved", 2}};
        for (int zero = 0; zero <= 3; ++zero)
          for (int micro : micros)
            for (const auto& [schedule, v] : schedules)
              for (bool sp : {false, true}) {
                const int64_t tokens = batch_size / dp / micro * config.train.seq_len;  // of one micro-batch
                if ((batch_size / dp) % micro != 0 || (sp && (tp == 1 || tokens % tp != 0))) continue;
                if (pp * v > n_layer || (schedule == "interleaved" && micro % pp != 0)) continue;
                layouts.push_back({tp, pp, dp, zero, micro, schedule, v, sp});
              }
      }
    }
  }
  return layouts;
}

RunConfig default_conformance_config(const std::string& dtype) {
  nlohmann::json j = default_config_json();
  j["model"] = {{"n_layer", 4}, {"n_head", 4}, {"d_model", 32}, {"d_ff", 64}, {"vocab_size", 96},
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

namespace {
template <typename Engine>
void run_steps(Engine& engine, const RunConfig& config, int steps, Trajectory& t) {
  double seconds = 0;
  for (int s = 0; s < steps; ++s) {
    const StepResult r = engine.train_step(conformance_batch(config, s));
    t.losses.push_back(r.loss);
    t.norms.push_back(r.grad_norm);
    seconds += r.seconds;
  }
  t.seconds_per_step = steps > 0 ? seconds / steps : 0;
}
}  // namespace

Trajectory run_single_device(const RunConfig& config, int steps, Backend& backend) {
  Trainer trainer(config, backend);
  trainer.initialise();
  Trajectory t;
  run_steps(trainer, config, steps, t);
  for (std::size_t i = 0; i < trainer.params().size(); ++i) t.params.push_back(to_host_f64(backend, trainer.params().at(i)));
  return t;
}

Fault parse_fault(const std::string& name) {
  if (name.empty()) return Fault::None;
  if (name == "skip-grad-reduction") return Fault::SkipGradReduction;
  if (name == "skip-tied-embedding-reduction") return Fault::SkipTiedEmbeddingReduction;
  fail("unknown fault '", name, "' (known: skip-grad-reduction, skip-tied-embedding-reduction)");
}

DataParallelSettings layout_settings(const Layout& layout, const ProcessGrid& grid, int64_t bucket_bytes, Fault fault) {
  DataParallelSettings settings{layout.zero, bucket_bytes, fault == Fault::SkipGradReduction ? 0 : -1, &grid.tp(),
                                layout.sequence_parallel, {}};
  if (layout.pp > 1)
    settings.pipeline = {&grid.pp(), grid.embedding(), parse_schedule_kind(layout.schedule), layout.virtual_stages, {},
                         fault == Fault::SkipTiedEmbeddingReduction};
  return settings;
}

Trajectory run_layout(const RunConfig& base, const Layout& layout, Communicator& group, int steps, Backend& backend,
                      Fault fault) {
  check(group.size() == layout.ranks(), "layout ", layout.name(), " needs ", layout.ranks(), " ranks, the group has ",
        group.size());
  nlohmann::json j = base.json;
  j["train"]["micro_batches"] = layout.micro_batches;
  const RunConfig config = parse_run_config(j);
  ProcessGrid grid(group, {layout.tp, layout.pp, layout.dp});
  DistributedTrainer trainer(config, backend, grid.dp(), layout_settings(layout, grid, /*bucket_bytes=*/4096, fault));
  trainer.initialise();
  Trajectory t;
  run_steps(trainer, config, steps, t);
  t.params = trainer.gather_params();
  return t;
}

Errors compare(const Trajectory& got, const Trajectory& ref, const RunConfig& config) {
  Errors e;
  const bool fp64 = config.train.dtype == DType::F64;
  const double rtol = fp64 ? 1e-10 : 1e-5;
  const double steps = static_cast<double>(ref.losses.size());
  const double adam_slack = fp64 ? 0.0 : config.schedule.max_lr * steps * 1e-3;
  auto violate = [&](const std::string& what) {
    if (e.pass) e.failure = what;
    e.pass = false;
  };
  check(got.losses.size() == ref.losses.size() && got.params.size() == ref.params.size(),
        "conformance: trajectories of different length");
  for (std::size_t s = 0; s < ref.losses.size(); ++s) {
    const double dl = std::fabs(got.losses[s] - ref.losses[s]), dn = std::fabs(got.norms[s] - ref.norms[s]);
    e.loss_abs = std::max(e.loss_abs, dl);
    e.loss_rel = std::max(e.loss_rel, dl / std::fabs(ref.losses[s]));
    e.norm_abs = std::max(e.norm_abs, dn);
    e.norm_rel = std::max(e.norm_rel, dn / std::fabs(ref.norms[s]));
    if (!(dl <= rtol * std::fabs(ref.losses[s]))) violate("loss at step " + std::to_string(s));
    if (!(dn <= rtol * std::fabs(ref.norms[s]))) violate("gradient norm at step " + std::to_string(s));
  }
  std::vector<std::string> names;
  for (const ParamSpec& spec : gpt_param_specs(config.model)) names.push_back(spec.name);
  check(names.size() == ref.params.size(), "conformance: ", ref.params.size(), " parameter tensors for a model of ",
        names.size());
  for (std::size_t i = 0; i < ref.params.size(); ++i) {
    double scale = 1e-300, worst = 0;
    for (std::size_t k = 0; k < ref.params[i].size(); ++k) {
      scale = std::max(scale, std::fabs(ref.params[i][k]));
      worst = std::max(worst, std::fabs(got.params[i][k] - ref.params[i][k]));
    }
    e.param_abs = std::max(e.param_abs, worst);
    if (worst / scale > e.param_rel) {
      e.param_rel = worst / scale;
      e.worst_param = names[i];
    }
    if (!(worst <= rtol * scale + adam_slack)) violate("parameter " + names[i]);
  }
  return e;
}

bool bit_identical(const Trajectory& a, const Trajectory& b) {
  return a.losses == b.losses && a.norms == b.norms && a.params == b.params;
}

std::string fingerprint(const Trajectory& t) {
  XXH64_state_t* state = XXH64_createState();
  XXH64_reset(state, 0);
  auto add = [&](const std::vector<double>& v) { XXH64_update(state, v.data(), v.size() * sizeof(double)); };
  add(t.losses);
  add(t.norms);
  for (const auto& p : t.params) add(p);
  const unsigned long long hash = XXH64_digest(state);
  XXH64_freeState(state);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", hash);
  return hex;
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
