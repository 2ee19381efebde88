#include "sweep/run_record.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>

#include "core/digest.h"
#include "core/error.h"

namespace tripod::sweep {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Trailing means (causal: a point sees only its past) over 5% of the steps so far, sampled at up to
// kCurvePoints log-spaced steps. Steps without a finite loss or a token count are skipped.
void add_curve(const std::map<int64_t, json>& by_step, MetricsSummary& s) {
  std::vector<double> tokens, losses;
  for (const auto& [step, record] : by_step)
    if (record.at("loss").is_number() && record.contains("tokens") && record.at("tokens").is_number()) {
      tokens.push_back(record.at("tokens").get<double>());
      losses.push_back(record.at("loss").get<double>());
    }
  const std::size_t n = losses.size();
  if (n == 0) return;
  std::vector<double> prefix(n + 1, 0.0);
  for (std::size_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + losses[i];
  std::size_t last = n;  // one past the last index taken
  for (int k = 0; k < kCurvePoints; ++k) {
    const double at = std::exp(std::log(static_cast<double>(n)) * (k + 1) / kCurvePoints);  // 1 .. n
    const std::size_t i = std::min(n, static_cast<std::size_t>(std::llround(at))) - 1;
    if (i == last) continue;
    last = i;
    const std::size_t window = std::max<std::size_t>(1, (i + 1) / 20);
    s.curve_tokens.push_back(tokens[i]);
    s.curve_loss.push_back((prefix[i + 1] - prefix[i + 1 - window]) / static_cast<double>(window));
  }
}

}  // namespace

MetricsSummary summarize_metrics(const fs::path& metrics_jsonl) {
  MetricsSummary s;
  std::ifstream in(metrics_jsonl);
  if (!in.good()) return s;
  std::map<int64_t, json> by_step;
  std::string line;
  while (std::getline(in, line)) {
    const json record = json::parse(line, nullptr, false);
    // A child killed mid-write leaves a torn last line: skip it (the step is redone on resume).
    if (record.is_discarded() || !record.is_object() || !record.contains("step") || !record.contains("loss")) continue;
    by_step[record.at("step").get<int64_t>()] = record;
  }
  if (by_step.empty()) return s;
  s.steps_recorded = static_cast<int64_t>(by_step.size());
  s.last_step = by_step.rbegin()->first;
  const json& last = by_step.rbegin()->second;
  s.final_loss = last.at("loss").is_number() ? last.at("loss").get<double>() : NAN;
  if (last.contains("val_loss") && last.at("val_loss").is_number()) s.eval_loss = last.at("val_loss").get<double>();
  // Last 10% of the run's steps (at least one): the model still improves over this window, so the
  // mean sits a little above the final loss, but it averages out batch-to-batch noise.
  const int64_t window = std::max<int64_t>(1, (s.last_step + 1) / 10);
  double sum = 0;
  int64_t count = 0;
  for (const auto& [step, record] : by_step) {
    s.train_seconds += record.value("step_seconds", 0.0);
    if (step > s.last_step - window && record.at("loss").is_number()) {
      sum += record.at("loss").get<double>();
      ++count;
    }
  }
  if (count > 0) s.smoothed_loss = sum / static_cast<double>(count);
  add_curve(by_step, s);
  return s;
}

std::string run_status_name(RunStatus s) {
  switch (s) {
    case RunStatus::Ok: return "ok";
    case RunStatus::Diverged: return "diverged";
    case RunStatus::Failed: return "failed";
  }
  return "failed";
}

std::string config_hash(const json& config) {
  const std::string text = config.dump();
  return xxh64_hex(text.data(), text.size());
}

std::string last_error_line(const fs::path& log) {
  std::ifstream in(log);
  std::string line, found;
  while (std::getline(in, line))
    if (line.starts_with("tripod: error:") || line.starts_with("tripod: internal error:")) found = line;
  return found;
}

namespace {
json number_or_null(double x) { return std::isfinite(x) ? json(x) : json(nullptr); }
}  // namespace

json counting_fields(const SweepSpec& spec, const PlannedRun& run) {
  return {
      {"N", run.n},
      {"D", run.tokens},
      {"C", run.flops},
      {"budget", budget_label(run.budget)},  // the fitter groups IsoFLOP runs by this label
      {"budget_flops", run.budget},
      {"N_total", run.cost.n_total},
      {"N_non_embedding", run.cost.n_non_embedding},
      {"flops_per_token", run.flops_per_token},
      {"param_count", param_count_name(spec.param_count)},
      {"flops_convention", flop_convention_name(spec.flops)},
      {"tokens_per_param", static_cast<double>(run.tokens) / static_cast<double>(run.n)},
  };
}

json make_record(const SweepSpec& spec, const PlannedRun& run, const RunOutcome& outcome) {
  const MetricsSummary& m = outcome.metrics;
  const bool ok = outcome.status == RunStatus::Ok;
  const bool has_eval = std::isfinite(m.eval_loss);
  json r = {
      {"name", run.name},
      {"status", run_status_name(outcome.status)},
      {"loss", ok ? number_or_null(has_eval ? m.eval_loss : m.smoothed_loss) : json(nullptr)},
      {"loss_source", !ok ? json(nullptr) : has_eval ? json("eval") : json("smoothed_train")},
      {"eval_loss", number_or_null(m.eval_loss)},
      {"final_loss", number_or_null(m.final_loss)},
      {"smoothed_loss", number_or_null(m.smoothed_loss)},
      {"n_layer", run.shape.n_layer},
      {"d_model", run.shape.d_model},
      {"n_head", run.shape.n_head},
      {"d_ff", run.shape.d_ff},
      {"steps", run.steps},
      {"steps_done", m.last_step + 1},
      {"lr", run.config.at("optim").at("lr")},
      {"warmup_steps", run.config.at("optim").at("warmup_steps")},
      {"seed", run.seed},
      {"wall_seconds", outcome.wall_seconds},
      {"train_seconds", m.train_seconds},
      {"config_hash", config_hash(run.config)},
      // The held-out windows' order: fixed since 2026-12-07 (train/train_loop.cpp), before that the
      // run's train.seed. A sweep must not mix the two (sweep_runner.cpp refuses it).
      {"held_out_order", "fixed"},
  };
  r.update(counting_fields(spec, run));
  if (!outcome.error.empty()) r["error"] = outcome.error;
  if (ok && !m.curve_tokens.empty())
    r["curve"] = {{"tokens", m.curve_tokens}, {"loss", m.curve_loss},
                  {"smoothing", "training loss, mean over the trailing 5% of the steps so far"}};
  return r;
}

}  // namespace tripod::sweep
