// Pipeline schedules as data: for every pipeline rank, the ordered list of actions it performs in
// one training step - forward or backward of a micro-batch on one of its model chunks, and the
// sends and receives of activations and their gradients that connect it to its neighbours. A
// schedule can be printed, checked (validate_schedule) and simulated without running a model.
//
// The model is cut into p*v chunks ("virtual stages"); chunk c lives on rank c % p (v = 1: rank c).
//   AFAB        (GPipe) all m forwards, then all m backwards: m micro-batches in flight.
//   1F1B        p-rank-1 warm-up forwards, then alternate one forward / one backward, then the
//               cool-down backwards: at most p-rank micro-batches in flight on a rank.
//   interleaved 1F1B over v chunks per rank (Narayanan et al. 2021), m a multiple of p: bubble
//               (p-1)/(v*m) of the ideal time instead of (p-1)/m.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace tripod {

enum class ScheduleKind { AllForwardAllBackward, OneFOneB, Interleaved };
ScheduleKind parse_schedule_kind(const std::string& name);  // "afab" | "1f1b" | "interleaved"
std::string schedule_kind_name(ScheduleKind kind);

enum class ActionKind { Forward, Backward, SendActivation, RecvActivation, SendGradient, RecvGradient };

struct PipelineAction {
  ActionKind kind;
  int microbatch;
  int chunk;  // virtual stage (0 .. p*v-1) the action belongs to
  int peer;   // for sends and receives: the other rank; -1 otherwise
};

struct PipelineSchedule {
  ScheduleKind kind;
  int stages = 1;          // p, pipeline ranks
  int microbatches = 1;    // m
  int virtual_stages = 1;  // v, chunks per rank
  std::vector<std::vector<PipelineAction>> ranks;  // [p] ordered actions
};

inline constexpr int kMaxPipelineStages = 4096;            // p and v each
inline constexpr int64_t kMaxChunkPasses = int64_t{1} << 20;  // p * m * v (about 5 s to simulate)

// Throws tripod::Error for impossible settings: p, m, v < 1; v > 1 without the interleaved kind;
// interleaving with m not a multiple of p; p or v above kMaxPipelineStages, p * m * v above
// kMaxChunkPasses.
PipelineSchedule make_schedule(ScheduleKind kind, int stages, int microbatches, int virtual_stages = 1);

std::string describe(const PipelineAction& action);  // "F3.c1", "recv-act 3.c1 <- 0"
std::string describe(const PipelineSchedule& schedule);  // one line per rank

// Simulates the schedule with blocking, matched sends and receives and unit-time compute:
// every micro-batch has exactly one forward and one backward per chunk, forwards follow the
// previous chunk's forward, backwards follow the next chunk's backward and their own forward,
// every send meets its receive, and no rank waits forever. Throws tripod::Error naming the first
// violation (or the ranks that deadlock).
struct ScheduleStats {
  std::vector<int> max_in_flight;  // per rank: most micro-batch chunks forwarded but not backwarded
  int makespan = 0;                // simulated time with unit-time forward and backward (2 for backward)
  double bubble_fraction = 0;      // 1 - busy / (ranks * makespan)
  // Per rank, per action in order: simulated (start, end) in units of one stage's forward (a
  // forward of one of its v chunks takes 1/v, a backward 2/v; messages take no time).
  std::vector<std::vector<std::pair<double, double>>> action_times;
};
ScheduleStats validate_schedule(const PipelineSchedule& schedule);

// Theory: (p-1)/(m+p-1) for AFAB and 1F1B, (p-1)/(v*m+p-1) interleaved (the fraction of the step).
double theoretical_bubble_fraction(const PipelineSchedule& schedule);

}  // namespace tripod
