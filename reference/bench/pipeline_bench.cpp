#include "bench/pipeline_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <mpi.h>
#include <nlohmann/json.hpp>
#include <thread>

#include "backend/backend_factory.h"
#include "comm/mpi_communicator.h"
#include "comm/world.h"
#include "core/output_file.h"
#include "parallel/pipeline_executor.h"

namespace tripod::bench {

namespace {

// One repeat: its measured bubble, its length (the last action's end) and every rank's timings.
struct TimedRun {
  double bubble, seconds;
  std::vector<std::vector<ActionTiming>> timings;
};

// Runs the schedule `repeats` times; the run with the median bubble is reported (and its timeline
// written), so one disturbed repeat does not skew the result.
TimedRun median_run(const PipelineSchedule& schedule, Communicator& world, Backend& backend, const PipelineWork& work,
                    int repeats) {
  std::vector<TimedRun> runs;
  for (int r = 0; r < repeats; ++r) {
    auto timings = gather_timings(world, run_pipeline(schedule, world, backend, work));
    double span = 0;
    for (const auto& rank : timings)
      for (const auto& t : rank) span = std::max(span, t.end);
    runs.push_back({measured_bubble_fraction(timings), span, std::move(timings)});
  }
  std::sort(runs.begin(), runs.end(), [](const TimedRun& a, const TimedRun& b) { return a.bubble < b.bubble; });
  return std::move(runs[runs.size() / 2]);
}

void write_outputs(const PipelineBenchOptions& o, int p, const nlohmann::json& records, const nlohmann::json& trace) {
  if (!o.json_out.empty()) {
    write_output_file(o.json_out,
                      nlohmann::json{{"benchmark", "pipeline"}, {"stages", p}, {"results", records}}.dump(2) + "\n",
                      "the results file (--json)");
  }
  if (!o.trace_out.empty()) {
    write_output_file(o.trace_out, trace.dump(1) + "\n", "the timeline (--trace)");
  }
}

}  // namespace

void run_pipeline_bench(const PipelineBenchOptions& o) {
  auto backend = make_backend(o.backend);
  MpiRuntime mpi;
  auto world = make_world(*backend, o.comm);  // the boundary buffers live on the backend
  const int p = world->size();
  const bool root = world->rank() == 0;
  check(o.forward_ms > 0 && o.forward_ms <= 10000 && o.repeats >= 1,
        "--forward-ms must be in (0, 10000] and --repeats at least 1");  // 1e9 ms slept for ever
  // One rank has no bubble to measure: every row read "theory 0.000 ... within 20%: NO".
  check(p >= 2, "bench pipeline measures a pipeline's bubble: run it on 2 or more ranks (mpirun -np P tripod bench "
        "pipeline)");
  PipelineWork work;
  double unit_ms = o.forward_ms;
  auto sleep_ms = [](double ms) { std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms)); };
  work.boundary_buffer = [&] { return backend->alloc({16, 64}, DType::F32); };
  work.forward = [&](int, int, const Tensor*) { sleep_ms(unit_ms); };
  work.backward = [&](int, int, const Tensor*) { sleep_ms(2 * unit_ms); };
  Tensor boundary = backend->alloc({16, 64}, DType::F32);
  work.output = [&](int, int) { return boundary; };
  work.input_grad = [&](int, int) { return boundary; };

  nlohmann::json records = nlohmann::json::array();
  if (root) {
    std::printf("tripod bench pipeline: %d stages, forward %.1f ms and backward %.1f ms per stage, median of %d\n", p,
                o.forward_ms, 2 * o.forward_ms, o.repeats);
    std::printf("%-12s %4s %4s %4s %10s %10s %8s %10s  %s\n", "schedule", "p", "m", "v", "theory", "measured", "ratio",
                "step ms", "within 20%");
  }
  nlohmann::json trace;
  for (int m : o.microbatches)
    for (ScheduleKind kind : {ScheduleKind::AllForwardAllBackward, ScheduleKind::OneFOneB, ScheduleKind::Interleaved}) {
      const int v = kind == ScheduleKind::Interleaved ? 2 : 1;
      if (kind == ScheduleKind::Interleaved && (p == 1 || m % p != 0)) continue;
      const PipelineSchedule schedule = make_schedule(kind, p, m, v);
      unit_ms = o.forward_ms / v;  // the same model cut into v times more chunks
      const TimedRun median = median_run(schedule, *world, *backend, work, o.repeats);
      const double theory = theoretical_bubble_fraction(schedule), measured = median.bubble, step = median.seconds;
      if (!root) continue;
      const double ratio = theory > 0 ? measured / theory : 0;
      // The target for AFAB and 1F1B on balanced stages: the measured bubble within 20% of the theory.
      const bool within = std::abs(measured - theory) <= 0.2 * theory;
      std::printf("%-12s %4d %4d %4d %10.3f %10.3f %8.2f %10.1f  %s\n", schedule_kind_name(kind).c_str(), p, m, v,
                  theory, measured, ratio, 1e3 * step, within ? "yes" : "NO");
      records.push_back({{"schedule", schedule_kind_name(kind)}, {"stages", p}, {"microbatches", m},
                         {"virtual_stages", v}, {"theoretical_bubble", theory}, {"measured_bubble", measured},
                         {"ratio", ratio}, {"within_20_percent", within}, {"step_seconds", step},
                         {"forward_ms", o.forward_ms}});
      // The largest m's, as --trace promises (the last m given was taken, whatever its size).
      if (kind == ScheduleKind::OneFOneB && m == *std::max_element(o.microbatches.begin(), o.microbatches.end()))
        trace = timeline_json(schedule, median.timings);
    }
  if (root) write_outputs(o, p, records, trace);
}

}  // namespace tripod::bench
