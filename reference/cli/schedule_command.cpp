// tripod schedule: a pipeline schedule as data, without running anything - each rank's compute
// order (or every action with --actions), the simulator's verdict (dependencies, matched messages,
// no deadlock), micro-batches in flight per rank and the simulated bubble beside the theory.
// --json writes the simulated timeline in the format of `tripod train --pipeline-trace`, so
// reports/plot_pipeline.py draws it (time in units of one stage's forward; a backward takes two).
//   tripod schedule --pp 4 --microbatches 8 --schedule interleaved --virtual-stages 2 --json s.json
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "core/output_file.h"
#include "parallel/pipeline_executor.h"
#include "parallel/pipeline_schedule.h"

namespace tripod::cli {
namespace {

struct ScheduleOptions {
  int stages = 4, microbatches = 8, virtual_stages = 1;
  std::string schedule = "1f1b", json_out;
  bool actions = false;
};

void run_schedule(const ScheduleOptions& o) {
  const PipelineSchedule s = make_schedule(parse_schedule_kind(o.schedule), o.stages, o.microbatches, o.virtual_stages);
  const ScheduleStats stats = validate_schedule(s);  // throws naming the first violation
  // What `tripod train` refuses is refused here too: "valid" was printed for schedules it cannot run.
  check(o.virtual_stages == 1 || o.stages > 1, "virtual stages (--virtual-stages ", o.virtual_stages,
        ") need pipeline parallelism (--pp > 1); tripod train refuses them on one stage");
  check_executable(s);
  std::printf("%s", describe(s).c_str());
  if (o.actions)
    for (std::size_t r = 0; r < s.ranks.size(); ++r) {
      std::printf("rank %zu actions:", r);
      for (const PipelineAction& a : s.ranks[r]) std::printf(" [%s]", describe(a).c_str());
      std::printf("\n");
    }
  std::printf("valid: one forward and one backward per micro-batch and chunk, dependencies respected, every message "
              "matched, no deadlock, runnable by tripod train\n");
  // With v chunks a rank holds chunks' activations, each 1/v of its layers': counted as chunks.
  if (o.virtual_stages == 1) std::printf("micro-batches in flight per rank:");
  else std::printf("micro-batch chunks in flight per rank (each 1/%d of the rank's layers):", o.virtual_stages);
  for (int n : stats.max_in_flight) std::printf(" %d", n);
  std::printf("\nsimulated bubble %.4f (theory %.4f), makespan %d units of one chunk's forward\n",
              stats.bubble_fraction, theoretical_bubble_fraction(s), stats.makespan);
  if (o.json_out.empty()) return;
  write_output_file(o.json_out, simulated_timeline_json(s, stats).dump(1) + "\n", "the simulated timeline (--json)");
}

}  // namespace

void add_schedule_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("schedule", "print, check and simulate a pipeline schedule (no model, no MPI)");
  auto o = std::make_shared<ScheduleOptions>();
  cmd->add_option("--pp", o->stages, "pipeline stages")->capture_default_str();
  cmd->add_option("--microbatches", o->microbatches, "micro-batches per step")->capture_default_str();
  cmd->add_option("--schedule", o->schedule, "afab, 1f1b or interleaved")->capture_default_str();
  cmd->add_option("--virtual-stages", o->virtual_stages, "chunks per rank (interleaved)")->capture_default_str();
  cmd->add_flag("--actions", o->actions, "list every action, sends and receives included");
  add_output_option(*cmd, "--json", o->json_out, "write the simulated timeline here (reports/plot_pipeline.py draws it)");
  cmd->callback([o]() { run_schedule(*o); });
}

}  // namespace tripod::cli
