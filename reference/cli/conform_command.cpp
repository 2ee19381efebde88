// tripod conform: run every parallel layout the launched ranks allow (or those named with
// --layouts) for K steps against the single-device reference in the same precision, and report
// per layout the largest errors of losses, gradient norms and final parameters, pass/fail and time
// per step: a table on stdout, JSON (--json) and JUnit XML (--junit). Exit 1 if any layout fails.
//   mpirun -np 8 tripod conform --dtype fp64 --json conform.json --junit conform.xml
#include <mpi.h>

#include <cstdio>
#include <fstream>

#include "cli/commands.h"
#include "backend/backend_factory.h"
#include "comm/mpi_communicator.h"
#include "comm/staged_communicator.h"
#include "core/host_memory.h"
#include "conform/conformance.h"

namespace tripod::cli {
namespace {

struct ConformOptions {
  std::string dtype = "fp64", config, json_out, junit_out, inject_fault, backend = "cpu";
  std::vector<std::string> layouts, overrides;
  int steps = 5;
};

struct Outcome {
  conform::Layout layout;
  conform::Errors errors;
  double seconds_per_step = 0;
  std::string fingerprint;  // of this rank's trajectory (every rank of a layout gathers the same one)
};

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '&' ? "&amp;" : c == '"' ? "&quot;" : std::string(1, c);
  return out;
}

void write_junit(const std::string& path, const std::vector<Outcome>& outcomes, const std::string& dtype) {
  int failures = 0;
  double total = 0;
  for (const auto& o : outcomes) {
    failures += !o.errors.pass;
    total += o.seconds_per_step;
  }
  std::ofstream out(path);
  check(out.good(), "cannot write JUnit file ", path);
  out << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites>\n  <testsuite name=\"tripod.conform\" tests=\""
      << outcomes.size() << "\" failures=\"" << failures << "\" time=\"" << total << "\">\n";
  for (const auto& o : outcomes) {
    out << "    <testcase classname=\"tripod.conform." << dtype << "\" name=\"" << o.layout.name() << "\" time=\""
        << o.seconds_per_step << "\"";
    if (o.errors.pass) {
      out << "/>\n";
    } else {
      out << ">\n      <failure message=\"" << xml_escape(o.errors.failure) << " outside tolerance\">loss rel "
          << o.errors.loss_rel << ", grad norm rel " << o.errors.norm_rel << ", parameter rel " << o.errors.param_rel
          << " (" << xml_escape(o.errors.worst_param) << ")</failure>\n    </testcase>\n";
    }
  }
  out << "  </testsuite>\n</testsuites>\n";
}

nlohmann::json to_json(const Outcome& o, const std::string& dtype) {
  const auto& l = o.layout;
  const auto& e = o.errors;
  return {{"layout", l.name()}, {"tp", l.tp}, {"pp", l.pp}, {"dp", l.dp}, {"zero", l.zero},
          {"micro_batches", l.micro_batches}, {"schedule", l.schedule}, {"sequence_parallel", l.sequence_parallel},
          {"dtype", dtype}, {"loss_abs_error", e.loss_abs}, {"loss_rel_error", e.loss_rel},
          {"grad_norm_abs_error", e.norm_abs}, {"grad_norm_rel_error", e.norm_rel}, {"param_abs_error", e.param_abs},
          {"param_rel_error", e.param_rel}, {"worst_param", e.worst_param}, {"pass", e.pass},
          {"failure", e.failure}, {"seconds_per_step", o.seconds_per_step}, {"fingerprint", o.fingerprint}};
}

// All ranks agree on the outcome: a layout passes only if it passed on every rank.
void agree(Communicator& world, Outcome& o) {
  Tensor t = host_alloc({2}, DType::F64);
  t.data<double>()[0] = o.errors.pass ? 0.0 : 1.0;
  t.data<double>()[1] = o.seconds_per_step;
  world.all_reduce(t, t, ReduceOp::Max);
  o.errors.pass = t.data<double>()[0] == 0.0;
  if (!o.errors.pass && o.errors.failure.empty()) o.errors.failure = "failed on another rank";
  o.seconds_per_step = t.data<double>()[1];
}

void run_conform(const ConformOptions& o) {
  MpiRuntime mpi;
  auto backend = make_backend(o.backend);
  auto world = communicator_for(mpi_world(), *backend);
  const bool root = world->rank() == 0;
  RunConfig config = conform::default_conformance_config(o.dtype);
  if (!o.config.empty() || !o.overrides.empty()) {
    std::vector<std::string> overrides = o.overrides;
    overrides.push_back("train.dtype=" + o.dtype);
    config = parse_run_config(load_config_json(o.config, overrides));
    check(config.model.vocab_size > 0, "conform needs model.vocab_size set (it trains on random tokens)");
  }
  const conform::Fault fault = conform::parse_fault(o.inject_fault);
  std::vector<conform::Layout> layouts;
  for (const auto& name : o.layouts) layouts.push_back(conform::parse_layout(name));
  if (layouts.empty()) layouts = conform::enumerate_layouts(world->size(), config);

  const conform::Trajectory reference = conform::run_single_device(config, o.steps, *backend);
  std::vector<Outcome> outcomes;
  if (root) {
    std::printf("tripod conform: %d ranks, %s, %d steps, %zu layouts, backend %s, against the single-device "
                "reference (fingerprint %s)%s\n",
                world->size(), o.dtype.c_str(), o.steps, layouts.size(), backend->name().c_str(),
                conform::fingerprint(reference).c_str(),
                o.inject_fault.empty() ? "" : (" (fault injected: " + o.inject_fault + ")").c_str());
    std::printf("%-38s %10s %10s %10s  %-28s %10s  %s\n", "layout", "loss rel", "norm rel", "param rel",
                "worst parameter", "ms/step", "result");
  }
  for (const auto& layout : layouts) {
    check(world->size() % layout.ranks() == 0, "layout ", layout.name(), " needs a multiple of ", layout.ranks(),
          " ranks, launched with ", world->size());
    // Independent replicas of the layout on consecutive blocks of ranks.
    auto group = world->split(world->rank() / layout.ranks(), world->rank(), layout.name());
    Outcome out{layout, {}, 0, ""};
    const conform::Trajectory got = conform::run_layout(config, layout, *group, o.steps, *backend, fault);
    out.errors = conform::compare(got, reference, config);
    out.seconds_per_step = got.seconds_per_step;
    out.fingerprint = conform::fingerprint(got);
    agree(*world, out);
    if (root) {
      std::printf("%-38s %10.2e %10.2e %10.2e  %-28s %10.2f  %s\n", layout.name().c_str(), out.errors.loss_rel,
                  out.errors.norm_rel, out.errors.param_rel, out.errors.worst_param.c_str(),
                  1e3 * out.seconds_per_step, out.errors.pass ? "PASS" : ("FAIL: " + out.errors.failure).c_str());
      std::fflush(stdout);
    }
    outcomes.push_back(out);
  }
  int failed = 0;
  for (const auto& out : outcomes) failed += !out.errors.pass;
  if (root) {
    std::printf("%zu layouts, %zu passed, %d failed (tolerance: %s)\n", outcomes.size(), outcomes.size() - failed,
                failed, o.dtype == "fp64" ? "1e-10 relative" : "1e-5 relative, parameters + lr*K*1e-3");
    if (!o.json_out.empty()) {
      nlohmann::json records = nlohmann::json::array();
      for (const auto& out : outcomes) records.push_back(to_json(out, o.dtype));
      std::ofstream(o.json_out) << nlohmann::json{{"ranks", world->size()}, {"steps", o.steps},
                                                  {"dtype", o.dtype}, {"backend", o.backend},
                                                  {"reference_fingerprint", conform::fingerprint(reference)},
                                                  {"layouts", records}}.dump(2) << "\n";
    }
    if (!o.junit_out.empty()) write_junit(o.junit_out, outcomes, o.dtype);
  }
  if (failed > 0) throw Error(root ? std::to_string(failed) + " layout(s) failed conformance" : "");
}

}  // namespace

void add_conform_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("conform", "check every parallel layout against the single-device reference");
  auto o = std::make_shared<ConformOptions>();
  cmd->add_option("--dtype", o->dtype, "fp64 (bugs vs rounding) or fp32")->capture_default_str();
  cmd->add_option("--steps", o->steps, "training steps per layout")->capture_default_str();
  cmd->add_option("--layouts", o->layouts, "layouts to run, e.g. tp1-pp1-dp2-z1-mb2 (default: all valid)");
  cmd->add_option("-c,--config", o->config, "model config (default: the built-in conformance model)");
  cmd->add_option("--set", o->overrides, "override a config key (repeatable)");
  cmd->add_option("--json", o->json_out, "write one JSON record per layout here");
  cmd->add_option("--junit", o->junit_out, "write JUnit XML here");
  add_backend_option(*cmd, o->backend);
  cmd->add_option("--inject-fault", o->inject_fault, "skip-grad-reduction or skip-tied-embedding-reduction: prove the suite can fail");
  cmd->callback([o]() { run_conform(*o); });
}

}  // namespace tripod::cli
