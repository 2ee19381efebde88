#include "train/pipeline_report.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "comm/host_collectives.h"
#include "core/output_file.h"

namespace tripod {

void report_pipeline(DistributedTrainer& trainer, bool print, const std::string& trace_path) {
  Communicator& pp = trainer.pipeline();
  const auto timings = gather_timings(pp, trainer.last_timings());
  // Per rank: micro-batches in flight at most (activation slots) and activation bytes.
  const std::vector<double> table = all_gather_values(
      pp, {static_cast<double>(trainer.max_microbatches_in_flight()), static_cast<double>(trainer.memory().activations)});
  if (!print) return;
  const PipelineSchedule& s = trainer.schedule();
  nlohmann::json j = timeline_json(s, timings);
  j["in_flight"] = nlohmann::json::array();
  j["activation_bytes"] = nlohmann::json::array();
  std::string in_flight, memory;
  for (int r = 0; r < pp.size(); ++r) {
    const double slots = table[static_cast<std::size_t>(r) * 2], bytes = table[static_cast<std::size_t>(r) * 2 + 1];
    j["in_flight"].push_back(static_cast<int>(slots));
    j["activation_bytes"].push_back(bytes);
    if (r) in_flight += ',';
    in_flight += std::to_string(static_cast<int>(slots));
    char mib[32];
    std::snprintf(mib, sizeof mib, "%s%.1f", r ? "," : "", bytes / (1 << 20));
    memory += mib;
  }
  std::printf("pipeline %s p=%d m=%d v=%d, split %s: last step's bubble %.3f measured, %.3f theory; "
              "micro-batches in flight per rank [%s], activation MiB per rank [%s]\n",
              schedule_kind_name(s.kind).c_str(), s.stages, s.microbatches, s.virtual_stages,
              trainer.split().describe().c_str(), j["measured_bubble"].get<double>(),
              j["theoretical_bubble"].get<double>(), in_flight.c_str(), memory.c_str());
  if (!trace_path.empty()) {
    write_output_file(trace_path, j.dump(1) + "\n", "the pipeline trace");
    std::printf("pipeline timeline written to %s\n", trace_path.c_str());
  }
}

}  // namespace tripod
