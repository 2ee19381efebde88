// The text of `tripod bench comm`, character for character as nccl-tests prints it (the classic
// layout of src/common.cu before the per-iteration and timestamp columns), so that the scripts
// that already parse nccl-tests output parse ours:
//
//   # Collective test starting: all_reduce_perf
//   # nThread 1 nGpus 1 minBytes 8 maxBytes 65536 step: 2(factor) warmup iters: 1 iters: 20 agg iters: 1 validation: 1 graph: 0
//   # ... (our own '#' lines: backend, groups)
//   #
//   # Using devices
//   #  Rank  0 Group  0 Pid   4242 on       host device  0 [cpu] <CPU model>
//   #
//   #                                                              out-of-place                       in-place
//   #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
//   #        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
//              8             2     float     sum      -1    12.34    0.00    0.00      0    11.90    0.00    0.00      0
//   # Out of bounds values : 0 OK
//   # Avg bus bandwidth    : 0.123
//   #
//   # Collective test concluded: all_reduce_perf
//
// Only the formatting lives here; the caller decides what to print and which rank prints it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "commbench/collective_spec.h"

namespace tripod::commbench {

struct CommBenchSettings {
  int64_t min_bytes = 0, max_bytes = 0;
  int64_t step_factor = 1, step_bytes = 0;  // a factor > 1 wins, as in nccl-tests
  int warmup_iters = 1, iters = 20, check_iters = 1;
};

// "all_reduce_perf": the name of the nccl-tests program for this collective (its description's).
std::string nccl_program_name(Collective c);

// The first lines, through the "#" that ends them; `notes` are extra "# ..." lines of our own.
std::string header_text(Collective c, const CommBenchSettings& s, const std::vector<std::string>& notes);

// One "#  Rank ..." line (with its newline) for this process, a CPU rank.
std::string device_line(int world_rank, int group_index, int device);

std::string column_header_text();

// A row is the prefix, then result() for out of place, then for in place, then "\n".
std::string row_prefix(int64_t bytes, int64_t count, const std::string& type, const std::string& op, int root);
// `wrong` < 0 means unchecked (-c 0): printed as N/A.
std::string row_result(double seconds, const Bandwidth& bw, int64_t wrong);

std::string footer_text(Collective c, int64_t out_of_bounds, double avg_busbw);

}  // namespace tripod::commbench
