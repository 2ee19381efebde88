#include "conform/suite.h"

#include <cstdio>
#include <fstream>

#include "backend/backend_factory.h"
#include "comm/host_collectives.h"
#include "comm/mpi_communicator.h"
#include "comm/staged_communicator.h"
#include "conform/report.h"

namespace tripod::conform {
namespace {

RunConfig suite_config(const SuiteOptions& o) {
  RunConfig config = default_conformance_config(o.dtype);
  if (o.config.empty() && o.overrides.empty()) return config;
  std::vector<std::string> overrides = o.overrides;
  overrides.push_back("train.dtype=" + o.dtype);
  config = parse_run_config(load_config_json(o.config, overrides));
  check(config.model.vocab_size > 0, "conform needs model.vocab_size set (it trains on random tokens)");
  return config;
}

// World sizes up to 16 on which this model has a layout of more than one rank.
std::string multi_rank_world_sizes(const RunConfig& config) {
  std::string sizes;
  for (int w = 2; w <= 16; ++w)
    for (const ParallelLayout& l : enumerate_layouts(w, config.model, conformance_step(config)))
      if (l.ranks() > 1) {
        sizes += (sizes.empty() ? "" : ", ") + std::to_string(w);
        break;
      }
  return sizes;
}

std::vector<ParallelLayout> suite_layouts(const SuiteOptions& o, const RunConfig& config, int world) {
  std::vector<ParallelLayout> layouts;
  for (const auto& name : o.layouts) layouts.push_back(ParallelLayout::parse(name));
  if (layouts.empty()) layouts = enumerate_layouts(world, config.model, conformance_step(config));
  for (const ParallelLayout& l : layouts) {
    check(world % l.ranks() == 0, "layout ", l.name(), " needs a multiple of ", l.ranks(), " ranks, launched with ",
          world);
    try {
      l.validate(config.model, conformance_step(config));
    } catch (const Error& e) {
      fail("layout ", l.name(), ": ", e.what());
    }
  }
  return layouts;
}

// All ranks agree on the outcome: a layout passes only if it passed on every rank.
void agree(Communicator& world, Outcome& o) {
  const std::vector<double> v = all_reduce_values(world, {o.errors.pass ? 0.0 : 1.0, o.seconds_per_step}, ReduceOp::Max);
  o.errors.pass = v[0] == 0.0;
  if (!o.errors.pass && o.errors.failure.empty()) o.errors.failure = "failed on another rank";
  o.seconds_per_step = v[1];
}

void print_header(const SuiteOptions& o, Communicator& world, Backend& backend, const RunConfig& config,
                  std::size_t n_layouts, int max_ranks, const Trajectory& reference) {
  std::string faults;
  for (const std::string& f : o.faults) faults += (faults.empty() ? "" : ", ") + f;
  std::printf("tripod conform: %d ranks, %s, %d steps, %zu layouts, backend %s, against the single-device "
              "reference (fingerprint %s)%s\n",
              world.size(), o.dtype.c_str(), o.steps, n_layouts, backend.name().c_str(),
              fingerprint(reference).c_str(), faults.empty() ? "" : (" (fault injected: " + faults + ")").c_str());
  if (world.size() > 1 && max_ranks == 1)
    std::printf("note: no layout of this model uses more than one rank of %d: every layout runs on one rank, as %d "
                "replicas. World sizes with multi-rank layouts: %s\n",
                world.size(), world.size(), multi_rank_world_sizes(config).c_str());
  std::fputs(table_header().c_str(), stdout);
}

void write_reports(const SuiteOptions& o, int ranks, const Trajectory& reference, const std::vector<Outcome>& outcomes) {
  if (!o.json_out.empty()) {
    nlohmann::json records = nlohmann::json::array();
    for (const auto& out : outcomes) records.push_back(outcome_json(out, o.dtype));
    std::ofstream(o.json_out) << nlohmann::json{{"ranks", ranks}, {"steps", o.steps}, {"dtype", o.dtype},
                                                {"backend", o.backend}, {"reference_fingerprint", fingerprint(reference)},
                                                {"layouts", records}}.dump(2) << "\n";
  }
  if (!o.junit_out.empty()) write_junit(o.junit_out, outcomes, o.dtype);
}

}  // namespace

void run_suite(const SuiteOptions& o) {
  MpiRuntime mpi;
  auto backend = make_backend(o.backend);
  auto world = communicator_for(mpi_world(), *backend);
  const bool root = world->rank() == 0;
  const RunConfig config = suite_config(o);
  std::vector<Fault> active;
  for (const std::string& name : o.faults) active.push_back(parse_fault(name));
  const FaultPlan faults(active);
  const std::vector<ParallelLayout> layouts = suite_layouts(o, config, world->size());
  int max_ranks = 1;
  for (const ParallelLayout& l : layouts) max_ranks = std::max(max_ranks, l.ranks());

  const Trajectory reference = run_single_device(config, o.steps, *backend);
  if (root) print_header(o, *world, *backend, config, layouts.size(), max_ranks, reference);
  std::vector<Outcome> outcomes;
  for (const ParallelLayout& layout : layouts) {
    // Independent replicas of the layout on consecutive blocks of ranks.
    auto group = world->split(world->rank() / layout.ranks(), world->rank(), layout.name());
    const Trajectory got = run_layout(config, layout, *group, o.steps, *backend, faults);
    Outcome out{layout, compare(got, reference, config), got.seconds_per_step, fingerprint(got)};
    agree(*world, out);
    if (root) {
      std::fputs(table_row(out).c_str(), stdout);
      std::fflush(stdout);
    }
    outcomes.push_back(out);
  }
  int failed = 0;
  for (const auto& out : outcomes) failed += !out.errors.pass;
  if (root) {
    std::printf("%zu layouts, %zu passed, %d failed (tolerance: %s)\n", outcomes.size(), outcomes.size() - failed,
                failed, o.dtype == "fp64" ? "1e-10 relative" : "1e-5 relative, parameters + lr*K*1e-3");
    write_reports(o, world->size(), reference, outcomes);
  }
  if (failed > 0) throw Error(root ? std::to_string(failed) + " layout(s) failed conformance" : "");
}

}  // namespace tripod::conform
