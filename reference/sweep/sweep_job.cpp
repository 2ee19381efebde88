#include "sweep/sweep_job.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "backend/backend_factory.h"
#include "core/error.h"
#include "core/folder_writer_lock.h"
#include "core/output_file.h"
#include "process/child_process.h"
#include "process/python_module.h"
#include "sweep/sweep_corpus.h"
#include "sweep/sweep_grid.h"
#include "sweep/sweep_runner.h"

namespace tripod::sweep {
namespace fs = std::filesystem;
using nlohmann::json;
using namespace tripod::process;

namespace {

std::string describe_conventions(const SweepSpec& spec) {
  const std::string n = spec.param_count == ParamCount::Total ? "N = all parameters (embeddings included)"
                                                              : "N = non-embedding parameters";
  const std::string c = spec.flops == FlopConvention::SixN
                            ? "C = 6 N D"
                            : "C = D x model FLOPs/token (perf/flops.h: 6 N_matmul incl. LM head + 12 L d T)";
  return n + "; " + c;
}

void print_grid(const SweepSpec& spec, const CorpusInfo& corpus, const std::vector<PlannedRun>& grid) {
  std::printf("sweep '%s' (%s): %zu runs\n", spec.name.c_str(), spec.file.c_str(), grid.size());
  std::printf("  corpus %s: vocab %lld, %lld train tokens", corpus.dir.c_str(), static_cast<long long>(corpus.vocab),
              static_cast<long long>(corpus.train_tokens));
  if (corpus.entropy_rate_nats >= 0) std::printf(", entropy rate H = %.6f nats/token", corpus.entropy_rate_nats);
  std::printf("\n  %s\n  batch %lld x context %lld = %lld tokens/step\n", describe_conventions(spec).c_str(),
              static_cast<long long>(spec.batch_size), static_cast<long long>(spec.context),
              static_cast<long long>(spec.batch_size * spec.context));
  std::printf("%-7s %-22s %-24s %10s %11s %10s %7s %9s %9s %6s %6s\n", "budget", "name", "shape (L d heads ff)", "N", "D",
              "C", "steps", "tok/param", "lr", "warmup", "epochs");
  double total_flops = 0, max_epochs = 0;
  int64_t total_tokens = 0;
  for (const PlannedRun& r : grid) {
    const double epochs = corpus.train_tokens > 0 ? static_cast<double>(r.tokens) / static_cast<double>(corpus.train_tokens) : 0;
    char shape[64];
    std::snprintf(shape, sizeof shape, "%lld %lld %lld %lld", static_cast<long long>(r.shape.n_layer),
                  static_cast<long long>(r.shape.d_model), static_cast<long long>(r.shape.n_head),
                  static_cast<long long>(r.shape.d_ff));
    std::printf("%-7s %-22s %-24s %10lld %11lld %10.3g %7lld %9.1f %9.3g %6lld %6.2f\n", budget_label(r.budget).c_str(),
                r.name.c_str(), shape, static_cast<long long>(r.n), static_cast<long long>(r.tokens), r.flops,
                static_cast<long long>(r.steps), static_cast<double>(r.tokens) / static_cast<double>(r.n), r.lr,
                static_cast<long long>(r.warmup_steps), epochs);
    total_flops += r.flops;
    total_tokens += r.tokens;
    max_epochs = std::max(max_epochs, epochs);
  }
  std::printf("total: %.3g FLOPs, %lld tokens\n", total_flops, static_cast<long long>(total_tokens));
  if (max_epochs > 1)
    std::printf("note: some runs read their corpus more than once (up to %.1f epochs); beyond ~4 epochs repeated "
                "data distorts the fitted laws (Muennighoff et al. 2023)\n", max_epochs);
  std::fflush(stdout);
}

// A spec with max_epochs refuses a grid in which any run would read its corpus more often.
void check_epochs(const SweepSpec& spec, const CorpusInfo& corpus, const std::vector<PlannedRun>& grid) {
  if (spec.max_epochs <= 0 || corpus.train_tokens <= 0) return;
  for (const PlannedRun& r : grid) {
    const double epochs = static_cast<double>(r.tokens) / static_cast<double>(corpus.train_tokens);
    TRIPOD_CHECK(epochs <= spec.max_epochs, spec.file.string(), ": run ", r.name, " would read ", r.tokens, " tokens, ",
                 epochs, " epochs of the corpus's ", corpus.train_tokens,
                 " train tokens, more than max_epochs = ", spec.max_epochs,
                 " (repeated data distorts the fitted laws): lower the budgets or the span, or use a larger "
                 "corpus");
  }
}

std::string estimate_text(const json& e) {
  if (!e.is_object() || !e.value("value", json()).is_number()) return "n/a";
  char text[96];
  const json& ci = e.value("ci", json());
  if (ci.is_array() && ci.size() == 2 && ci[0].is_number() && ci[1].is_number())
    std::snprintf(text, sizeof text, "%.4g [%.4g, %.4g]", e["value"].get<double>(), ci[0].get<double>(), ci[1].get<double>());
  else
    std::snprintf(text, sizeof text, "%.4g (no CI)", e["value"].get<double>());
  return text;
}

// The fitted E against the corpus's exact entropy rate (synthetic corpora), printed and appended
// to fit.md: the check that the sweep recovers the irreducible loss it should.
void summarise_fit(const fs::path& out) {
  std::ifstream fit_in(out / "fit.json"), sweep_in(out / "sweep.json");
  const json fit = json::parse(fit_in, nullptr, false), sweep = json::parse(sweep_in, nullptr, false);
  if (fit.is_discarded()) return;
  std::string text = "\n## Against the corpus\n\n";
  for (const char* key : {"E", "alpha", "beta", "a", "b"})
    text += std::string("- ") + key + " = " + estimate_text(fit.value(key, json())) + "\n";
  text += "- a (Approach 2) = " + estimate_text(fit.value("approach2", json::object()).value("a", json())) + "\n";
  const double H = sweep.is_discarded() ? -1 : sweep["corpus"].value("entropy_rate_nats", -1.0);
  if (H >= 0 && fit["E"]["value"].is_number()) {
    const double E = fit["E"]["value"].get<double>();
    const json& ci = fit["E"]["ci"];
    const bool has_ci = ci.is_array() && ci.size() == 2 && ci[0].is_number() && ci[1].is_number();
    const bool covered = has_ci && ci[0].get<double>() <= H && H <= ci[1].get<double>();
    char line[200];
    std::snprintf(line, sizeof line, "- corpus entropy rate H = %.4f nats/token; E - H = %+.4f; %s\n", H, E - H,
                  !has_ci ? "no CI for E (fit with --bootstrap N)" : covered ? "H is inside the 95% CI of E"
                                                                            : "H is outside the 95% CI of E");
    text += line;
  }
  for (const json& row : fit.value("tokens_per_parameter", json::array())) {
    if (row.value("source", "") != "data" || !row["approach3"].is_number()) continue;
    char line[160];
    std::snprintf(line, sizeof line, "- optimal tokens/param at C = %.3g: %.1f (Approach 3)\n", row["C"].get<double>(),
                  row["approach3"].get<double>());
    text += line;
  }
  std::printf("%s", text.c_str());
  std::ofstream fit_md(out / "fit.md", std::ios::app);
  fit_md << text;
  TRIPOD_CHECK(fit_md.flush().good(), "cannot append the fit to ", (out / "fit.md").string());
}

}  // namespace

void run_sweep_job(const SweepRunOptions& o) {
    const SweepSpec spec = load_sweep_spec(o.spec);
    const fs::path out = o.out.empty() ? fs::path("runs") / ("scale-" + spec.name) : fs::path(o.out);
    check(o.jobs >= 0, "--jobs must be >= 1, or 0 for one per core (got ", o.jobs, ")");
    if (o.dry_run) {  // plans without training: a CPU-only login node may plan a GPU sweep
      const CorpusInfo corpus = describe_corpus(spec, out);
      const std::vector<PlannedRun> grid = expand_grid(spec, corpus);
      print_grid(spec, corpus, grid);
      check_epochs(spec, corpus, grid);
      return;
    }
    // Each run is a child `tripod train --backend B`: a misspelt B failed every run, one after another.
    const std::vector<std::string> backends = backend_names();
    check(std::find(backends.begin(), backends.end(), o.backend) != backends.end(), "--backend: '", o.backend,
          "' is not a backend of this build (it has: ", backend_names_text(), ")");
    // The grid is checked before a corpus is generated: a bad spec fails in a second, not minutes in.
    const CorpusInfo described = describe_corpus(spec, out);
    check_epochs(spec, described, expand_grid(spec, described));
    // One `scale run` a folder at a time: a second one started while the first ran (the command run
    // again in another terminal, a job submitted twice) took the same pending runs, and each failed
    // on the other's locked checkpoint roots (before those locks, both trained them into one folder).
    const FolderWriterLock lock(out, ".lock",
                                str_cat("scale run ", o.spec, ": another `tripod scale run` is running in ", out.string(),
                                        "; wait for it to end (it trains every run the spec asks for), or give "
                                        "another --out"));
    const CorpusInfo corpus = prepare_corpus(spec, out);
    std::vector<PlannedRun> grid = expand_grid(spec, corpus);
    place_runs(grid, out);
    print_grid(spec, corpus, grid);
    const SweepOutcome done = run_sweep(spec, corpus, grid, {out, o.jobs, o.progress_every, o.backend});
    std::printf("tripod scale: sweep done in %.1f s: %d ok, %d diverged, %d already finished -> %s\n", done.seconds,
                done.ok, done.diverged, done.already_finished, (fs::absolute(out) / "runs.jsonl").c_str());
    std::printf("next: tripod scale fit %s\n", out.c_str());
}

void fit_sweep(const SweepFitOptions& o) {
    const fs::path out = o.out, runs = out / "runs.jsonl";
    TRIPOD_CHECK(fs::exists(runs), "no ", runs.string(), ": run `tripod scale run SPEC --out ", out.string(),
                 "` first");
    // The fitter is the Python package scaling/ of the source tree, run as a module.
    std::vector<std::string> args = {runs.string(), "--json", (out / "fit.json").string(),
                                     "--markdown", (out / "fit.md").string(), "--plots", (out / "plots").string(),
                                     "--bootstrap", std::to_string(o.bootstrap)};
    if (o.small_grid) args.push_back("--small-grid");
    const int code = process::run_python_module_writing(o.python, "scaling.fit", args, (out / "fit.json").string());
    TRIPOD_CHECK(code == 0, "scaling/fit.py on ", runs.string(), " failed (exit status ", code, ")");
    summarise_fit(out);
}

void advise_sweep(const SweepAdviseOptions& o) {
  check(o.threshold > 0 && std::isfinite(o.threshold),
        "scale advise: --threshold must be positive and finite (a loss gain per doubling), got ", o.threshold);
  // Every digit of the threshold (std::to_string keeps six decimals: 4e-7 became "0.000000"), and
  // the budgets as --budgets=LIST, which argparse reads even when LIST starts with '-'.
  char threshold[32];
  std::snprintf(threshold, sizeof threshold, "%.17g", o.threshold);
  std::vector<std::string> args = {o.fit, "--threshold", threshold, "--from", o.source, "--budgets=" + o.budgets};
  if (!o.json_out.empty()) {
    args.push_back("--json");
    args.push_back(o.json_out);
  }
  const int code = o.json_out.empty() ? process::run_python_module(o.python, "scaling.advise", args)
                                      : process::run_python_module_writing(o.python, "scaling.advise", args, o.json_out);
  check(code == 0, "scaling/advise.py on ", o.fit, " failed (exit status ", code, ")");
}

}  // namespace tripod::sweep
