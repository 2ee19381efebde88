#include "sweep/sweep_grid.h"

#include <fnmatch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "core/error.h"
#include "train/run_config.h"

namespace tripod::sweep {
using nlohmann::json;

namespace {

// Keys the grid derives for every run: a spec's "settings" may not set them (the LR and warm-up
// have their own rules in the spec; the rest is the grid arithmetic itself).
const std::set<std::string> kDerivedKeys = {
    "model.n_layer", "model.n_head", "model.d_model", "model.d_ff", "model.vocab_size", "model.context",
    "model.tie_embeddings", "train.batch_size", "train.seq_len", "train.steps", "train.seed", "train.metrics",
    "train.save_every", "train.eval_every", "train.eval_batches", "optim.lr", "optim.min_lr",
    "optim.warmup_steps", "optim.decay", "data.dir"};
// Keys a per-run override may not change: they define N, D, C and the seed, which the records
// report (an override of train.seed trained seeds 1 and 2 alike, recorded as 1 and 2).
bool defines_grid(const std::string& key) {
  return key.starts_with("model.") || key == "train.batch_size" || key == "train.seq_len" ||
         key == "train.steps" || key == "train.seed" || key == "train.metrics" || key == "train.save_every" ||
         key == "data.dir";
}

std::string assignment(const std::string& key, const json& value) { return key + "=" + value.dump(); }

// Chooses the shapes of one budget: k targets log-spaced over [N_c / sqrt(span), N_c * sqrt(span)].
std::vector<std::pair<ModelShape, double>> shapes_for_budget(const SweepSpec& spec, const CorpusInfo& corpus,
                                                             double budget) {
  const ModelsSpec& m = spec.models;
  const double centre = std::sqrt(budget / (6.0 * m.tokens_per_param));
  std::vector<std::pair<ModelShape, double>> chosen;  // (shape, target N)
  auto counted_n = [&](const ModelShape& s) {
    return static_cast<double>(counted_params(shape_cost(s, corpus.vocab, spec.context), spec.param_count));
  };
  if (m.rule) {
    for (int64_t i = 0; i < m.sizes_per_budget; ++i) {
      const double position = m.sizes_per_budget == 1 ? 0.0 : static_cast<double>(i) / (m.sizes_per_budget - 1) - 0.5;
      const double target = centre * std::pow(m.span, position);
      const ModelShape shape = shape_for_target(target, *m.rule, corpus.vocab, spec.context, spec.param_count);
      const bool duplicate = std::any_of(chosen.begin(), chosen.end(), [&](const auto& c) { return c.first == shape; });
      if (duplicate) {
        std::fprintf(stderr, "tripod scale: note: %s: budget %s: target N %.3g gives %s again; the budget has one "
                     "size fewer (widen models.span or reduce models.sizes_per_budget)\n",
                     spec.file.c_str(), budget_label(budget).c_str(), target, shape_label(shape).c_str());
        continue;
      }
      chosen.emplace_back(shape, target);
    }
  } else {
    for (const ExplicitShape& e : m.shapes) chosen.emplace_back(ModelShape{e.n_layer, e.d_model, e.n_head, e.d_ff}, 0.0);
    if (m.sizes_per_budget > 0 && static_cast<int64_t>(chosen.size()) > m.sizes_per_budget) {
      // The k listed shapes nearest the IsoFLOP centre (in log N).
      std::sort(chosen.begin(), chosen.end(), [&](const auto& a, const auto& b) {
        return std::abs(std::log(counted_n(a.first) / centre)) < std::abs(std::log(counted_n(b.first) / centre));
      });
      chosen.resize(static_cast<std::size_t>(m.sizes_per_budget));
    }
  }
  std::sort(chosen.begin(), chosen.end(), [&](const auto& a, const auto& b) { return counted_n(a.first) < counted_n(b.first); });
  return chosen;
}

// A run's name is its folder, checkpoint root and record: two runs of one name trained into one
// folder. A repeated seed had the second "run" resume the first's checkpoint and the fit count one
// training twice; two explicit shapes that differ only in n_head or d_ff (the name holds n_layer
// and d_model) had the second refused by the first's checkpoint and the sweep stuck for good;
// budgets alike to three digits (3e9, 3.001e9) share a label.
void check_names_differ(const SweepSpec& spec, const std::vector<PlannedRun>& runs) {
  std::map<std::string, const PlannedRun*> seen;
  for (const PlannedRun& run : runs) {
    const auto [it, first] = seen.emplace(run.name, &run);
    if (first) continue;
    const PlannedRun& other = *it->second;
    auto describe = [](const PlannedRun& r) {
      return str_cat("budget ", r.budget, ", n_layer ", r.shape.n_layer, ", d_model ", r.shape.d_model, ", n_head ",
                     r.shape.n_head, ", d_ff ", r.shape.d_ff, ", seed ", r.seed);
    };
    fail(spec.file.string(), ": two runs would both be named ", run.name, " (", describe(other), "; and ",
         describe(run), "): a name is a run's folder and record; drop the repeated seed, shape or budget, or make "
         "budgets differ in their first 3 digits and shapes in n_layer or d_model");
  }
}

}  // namespace

std::string budget_label(double flops) {
  const int exponent = static_cast<int>(std::floor(std::log10(flops) + 1e-9));
  const double mantissa = flops / std::pow(10.0, exponent);
  char text[48];
  std::snprintf(text, sizeof text, "%.3ge%d", mantissa, exponent);
  return text;
}

json run_config(const SweepSpec& spec, const CorpusInfo& corpus, const PlannedRun& run) {
  std::vector<std::string> sets = {
      assignment("model.n_layer", run.shape.n_layer), assignment("model.n_head", run.shape.n_head),
      assignment("model.d_model", run.shape.d_model), assignment("model.d_ff", run.shape.d_ff),
      assignment("model.vocab_size", corpus.vocab), assignment("model.context", spec.context),
      assignment("model.tie_embeddings", true), assignment("train.batch_size", spec.batch_size),
      assignment("train.seq_len", spec.context), assignment("train.steps", run.steps),
      assignment("train.seed", run.seed), assignment("train.log_every", std::max<int64_t>(1, run.steps / 20)),
      assignment("train.eval_every", 0), assignment("train.eval_batches", spec.eval_batches),
      assignment("train.save_every", std::min(spec.checkpoint_every, run.steps)), assignment("optim.lr", run.lr),
      assignment("optim.min_lr", run.min_lr), assignment("optim.warmup_steps", run.warmup_steps),
      assignment("optim.decay", "cosine"), assignment("data.dir", corpus.dir.string())};
  for (auto it = spec.settings.begin(); it != spec.settings.end(); ++it) {
    TRIPOD_CHECK(!kDerivedKeys.contains(it.key()), spec.file.string(), ": 'settings' may not set '", it.key(),
                 "': the sweep derives it for each run (see scaling/README.md)");
    sets.push_back(assignment(it.key(), it.value()));
  }
  for (const RunOverride& o : spec.overrides) {
    if (fnmatch(o.runs.c_str(), run.name.c_str(), 0) != 0) continue;
    for (auto it = o.set.begin(); it != o.set.end(); ++it) {
      TRIPOD_CHECK(!defines_grid(it.key()), spec.file.string(), ": override for '", o.runs, "' may not set '", it.key(),
                   "': it defines the run's N, D, C or seed");
      sets.push_back(assignment(it.key(), it.value()));
    }
  }
  try {
    json config = load_config_json("", sets);
    parse_run_config(config);  // validates values (e.g. n_head dividing d_model) before anything runs
    return config;
  } catch (const Error& e) {
    fail(spec.file.string(), ": run ", run.name, ": ", e.what());
  }
}

std::vector<PlannedRun> expand_grid(const SweepSpec& spec, const CorpusInfo& corpus) {
  std::vector<PlannedRun> runs;
  const int64_t tokens_per_step = spec.batch_size * spec.context;
  for (const double budget : spec.budgets) {
    for (const auto& [shape, target] : shapes_for_budget(spec, corpus, budget)) {
      for (const uint64_t seed : spec.seeds) {
        PlannedRun run;
        run.budget = budget;
        run.seed = seed;
        run.shape = shape;
        run.target_n = target;
        run.name = str_cat("C", budget_label(budget), "-", shape_label(shape));
        if (spec.seeds.size() > 1) run.name += str_cat("-s", seed);
        run.cost = shape_cost(shape, corpus.vocab, spec.context);
        run.n = counted_params(run.cost, spec.param_count);
        run.flops_per_token = counted_flops_per_token(run.cost, spec.param_count, spec.flops);
        const double wanted_tokens = budget / run.flops_per_token;
        const double wanted_steps = wanted_tokens / static_cast<double>(tokens_per_step);
        // Bounded before the rounding to an integer, which is undefined past 2^63 (a budget of 1e40
        // came out as -9223372036854775808 steps).
        TRIPOD_CHECK(wanted_steps <= 0x1p40, spec.file.string(), ": budget ", budget_label(budget), " gives model ",
                     run.name, " (N=", run.n, ") ", wanted_steps, " steps of ", tokens_per_step,
                     " tokens, more than 2^40");
        run.steps = std::llround(wanted_steps);
        TRIPOD_CHECK(wanted_tokens >= static_cast<double>(tokens_per_step), spec.file.string(), ": budget ",
                     budget_label(budget), " gives model ", run.name, " (", shape_label(shape), ", N=", run.n,
                     ") only ", std::llround(wanted_tokens), " tokens = less than one batch of ", tokens_per_step,
                     " tokens (batch_size ", spec.batch_size, " x context ", spec.context,
                     "): raise the budget or drop the model");
        TRIPOD_CHECK(run.steps >= spec.min_steps, spec.file.string(), ": budget ", budget_label(budget),
                     " gives model ", run.name, " (N=", run.n, ") only ", run.steps, " steps of ", tokens_per_step,
                     " tokens, fewer than min_steps = ", spec.min_steps,
                     ": raise the budget, shrink the batch or drop the model");
        run.tokens = run.steps * tokens_per_step;
        run.flops = static_cast<double>(run.tokens) * run.flops_per_token;
        run.lr = spec.lr.base * std::pow(spec.lr.reference_d_model / static_cast<double>(shape.d_model), spec.lr.width_exponent);
        run.min_lr = spec.lr.min_lr_ratio * run.lr;
        run.warmup_steps = std::min<int64_t>(spec.warmup.max_steps, std::llround(spec.warmup.fraction * static_cast<double>(run.steps)));
        run.config = run_config(spec, corpus, run);
        runs.push_back(std::move(run));
      }
    }
  }
  check_names_differ(spec, runs);
  for (const RunOverride& o : spec.overrides) {
    const bool matches = std::any_of(runs.begin(), runs.end(), [&](const PlannedRun& r) {
      return fnmatch(o.runs.c_str(), r.name.c_str(), 0) == 0;
    });
    TRIPOD_CHECK(matches, spec.file.string(), ": override pattern '", o.runs,
                 "' matches no run of the sweep (names look like ",
                 runs.empty() ? std::string("C1e12-L2-d64") : runs.front().name, ")");
  }
  return runs;
}

}  // namespace tripod::sweep
