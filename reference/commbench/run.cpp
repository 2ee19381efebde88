#include "commbench/run.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "backend/backend_factory.h"
#include "commbench/collective_bench.h"
#include "commbench/group.h"
#include "commbench/report.h"
#include "comm/mpi_communicator.h"
#include "comm/world.h"
#include "comm/host_collectives.h"
#include "comm/rank_errors.h"
#include "core/build_info.h"
#include "core/host_cpus.h"
#include "core/host_memory.h"
#include "core/output_file.h"
#include "parallel/launch.h"

namespace tripod::commbench {
namespace {

// This rank's value combined over the world as -a asks: 0 rank 0's own, 1 mean, 2 min, 3 max.
double across_ranks(double value, int average, Communicator& world) {
  if (average == 0) return value;
  const double combined =
      all_reduce_value(world, value, average == 2 ? ReduceOp::Min : average == 3 ? ReduceOp::Max : ReduceOp::Sum);
  return average == 1 ? combined / world.size() : combined;
}

// Sum over the world of each entry (wrong element counts, exact in fp64 up to 2^53).
std::pair<int64_t, int64_t> sum_over_ranks(int64_t a, int64_t b, Communicator& world) {
  const std::vector<double> sums =
      all_reduce_values(world, {static_cast<double>(a), static_cast<double>(b)}, ReduceOp::Sum);
  return {static_cast<int64_t>(sums[0]), static_cast<int64_t>(sums[1])};
}

void print_on_rank0(const Communicator& world, const std::string& text) {
  if (world.rank() != 0) return;
  std::fputs(text.c_str(), stdout);
  std::fflush(stdout);
}

// Rank 0 prints every rank's device line, in world-rank order.
void print_device_lines(Communicator& world, const BenchGroup& group) {
  constexpr int64_t kLineInts = 128;  // 512 bytes per line, NUL-padded
  const LaunchInfo launch = detect_launch();
  std::string line = device_line(world.rank(), group.index, launch.local_rank);
  line.resize(kLineInts * 4 - 1);
  Tensor mine = host_alloc({kLineInts}, DType::I32), all = host_alloc({kLineInts * world.size()}, DType::I32);
  std::memcpy(mine.raw(), line.data(), line.size());
  world.all_gather(mine, all);
  std::string text;
  for (int r = 0; r < world.size(); ++r) text += static_cast<const char*>(all.raw()) + r * kLineInts * 4;
  print_on_rank0(world, text);
}

// --inject-error corrupts the result of the group's last rank that checks one: the last rank, or
// the root where only the root holds a result (reduce).
int result_holder(const CollectiveSpec& spec, const CollectiveCall& call, int group_size) {
  for (int r = group_size - 1; r > 0; --r)
    if (spec.roles(CallContext{call, r, group_size, 0}).checked != Buffer::None) return r;
  return 0;
}

// A timed block shorter than this says little about the ranks' share of a CPU (one context
// switch is most of it), so the warning about shared cores ignores it.
constexpr double kShortestJudgedSeconds = 1e-3;

// What one collective's block accumulates for its footer.
struct Outcome {
  int64_t out_of_bounds = 0;  // (rank, test) pairs with a wrong element, as nccl-tests counts them
  double busbw_sum = 0;
  int64_t rows = 0;
  int seed = 0;  // new inputs for every check, so a stale result of an earlier call is caught
  bool host_buffers = false;  // ranks wait on a CPU: their share of it is measured (on_cpu)
  double least_on_cpu = 1;    // the least share of any block long enough to judge, and its size
  int64_t least_on_cpu_bytes = 0;
};

// One (size, out of place or in place) result: -w warm-up calls, a world barrier, then -n calls
// timed as one block (the mean per call, as nccl-tests reports it), then -c checked calls.
// `corrupts`: this rank corrupts its result before checking (--inject-error).
void measure(CollectiveBench& bench, const CollectiveCall& call, const CommBenchPlan& plan, int group_size,
             bool corrupts, Communicator& world, Outcome& outcome, std::string& row, nlohmann::json& record) {
  bench.fill(call, outcome.seed);  // the timed calls move real numbers, not the -1 sentinels
  for (int i = 0; i < plan.settings.warmup_iters; ++i) bench.run(call);
  world.barrier();
  // The CPU clock read inside the wall clock's interval, so that the share is at most 1 (but for the
  // two clocks' rounding, clamped).
  const auto start = std::chrono::steady_clock::now();
  const double cpu_start = thread_cpu_seconds();
  for (int i = 0; i < plan.settings.iters; ++i) bench.run(call);
  const double cpu_seconds = thread_cpu_seconds() - cpu_start;
  const double local = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double local_on_cpu = local > 0 ? std::min(1.0, cpu_seconds / local) : 1;
  const double seconds = across_ranks(local / plan.settings.iters, plan.average, world);
  const Bandwidth bw = collective_bandwidth(plan.collective, bench.counts().bytes, seconds, group_size);

  int64_t wrong = plan.settings.check_iters > 0 ? 0 : -1;  // -1: unchecked, printed N/A
  for (int c = 0; c < plan.settings.check_iters && wrong == 0; ++c) {
    bench.fill(call, ++outcome.seed);
    bench.run(call);
    if (corrupts) bench.corrupt_result(call);
    const int64_t local_wrong = bench.count_wrong(call, outcome.seed);
    const auto [total, ranks_wrong] = sum_over_ranks(local_wrong, local_wrong > 0, world);
    wrong = total;
    outcome.out_of_bounds += ranks_wrong;
  }
  outcome.busbw_sum += bw.busbw;
  outcome.rows += 1;
  row += row_result(seconds, bw, wrong);
  record["in_place"] = call.in_place;
  record["time_us"] = seconds * 1e6;
  record["algbw"] = bw.algbw;
  record["busbw"] = bw.busbw;
  record["wrong"] = wrong < 0 ? nlohmann::json(nullptr) : nlohmann::json(wrong);  // null: unchecked
  // The least share of a CPU any rank had while timed: a rank busy-waits in a collective on host
  // buffers, so below 1 the scheduler gave its core to another process and the time is inflated.
  record["on_cpu"] = nullptr;  // null: device buffers, where the rank's CPU share says nothing
  if (!outcome.host_buffers) return;
  const std::vector<double> least = all_reduce_values(world, {local_on_cpu, -local}, ReduceOp::Min);
  const double on_cpu = least[0], longest = -least[1];
  record["on_cpu"] = on_cpu;
  if (longest >= kShortestJudgedSeconds && on_cpu < outcome.least_on_cpu) {
    outcome.least_on_cpu = on_cpu;
    outcome.least_on_cpu_bytes = bench.counts().bytes;
  }
}

// One row: a size of one type, op and root, out of place then in place.
void run_row(CollectiveBench& bench, const CommBenchPlan& plan, DType dtype, ReduceOp op, int root, int64_t size,
             Communicator& world, const BenchGroup& group, Outcome& outcome, nlohmann::json& results) {
  const CollectiveSpec& spec = collective_spec(plan.collective);
  Communicator& comm = *group.comm;
  bench.set_size(size);
  const CollectiveCounts& counts = bench.counts();
  const std::string op_name = spec.reduction ? reduce_op_name(op) : "none";
  std::string row = row_prefix(counts.bytes, counts.printed, nccl_type_name(dtype), op_name, root);
  const nlohmann::json key = {{"collective", spec.name}, {"size", counts.bytes}, {"count", counts.printed},
                              {"type", nccl_type_name(dtype)}, {"redop", op_name}, {"root", root},
                              {"group_size", comm.size()}};
  for (bool in_place : {false, true}) {
    const CollectiveCall call{op, std::max(root, 0), in_place};
    // --inject-error: one rank of group 0 that holds a result corrupts it.
    const bool corrupts = plan.inject_error && group.index == 0 && comm.rank() == result_holder(spec, call, comm.size());
    nlohmann::json record = key;
    measure(bench, call, plan, comm.size(), corrupts, world, outcome, row, record);
    results.push_back(std::move(record));
  }
  print_on_rank0(world, row + "\n");
}

// Every size, type, op and root of one collective: one nccl-tests output block.
Outcome run_collective(const CommBenchPlan& plan, Communicator& world, const BenchGroup& group, Backend& backend,
                       nlohmann::json& results) {
  Communicator& comm = *group.comm;
  std::vector<std::string> notes = plan.notes;
  notes.push_back("Groups: " + group.description + "; bandwidth is per group");
  print_on_rank0(world, header_text(plan.collective, plan.settings, notes));
  print_device_lines(world, group);
  print_on_rank0(world, column_header_text());
  Outcome outcome;
  outcome.host_buffers = backend.device() != Device::Cuda;  // the emulated device's are host memory too
  for (DType dtype : plan.types) {
    CollectiveBench bench(comm, backend, plan.collective, dtype, plan.settings.max_bytes, !plan.async);
    for (ReduceOp op : plan.ops_for(dtype))
      for (int root : plan.roots_for(comm.size()))
        for (int64_t size : plan.sizes) run_row(bench, plan, dtype, op, root, size, world, group, outcome, results);
  }
  const double avg_busbw = outcome.rows ? outcome.busbw_sum / outcome.rows : 0.0;
  print_on_rank0(world, footer_text(plan.collective, outcome.out_of_bounds, avg_busbw));
  // On stderr: stdout stays exactly nccl-tests' format for the parsers that read it.
  if (world.rank() == 0 && outcome.least_on_cpu < kSharedCpuShare)
    std::fprintf(stderr,
                 "tripod: warning: bench comm %s: a rank was on a CPU for only %.0f%% of the timed time at %lld "
                 "bytes; other processes share these cores, so the times are inflated and the bandwidths low "
                 "(on_cpu in the --json results); rerun on an idle machine\n",
                 collective_name(plan.collective).c_str(), 100 * outcome.least_on_cpu,
                 static_cast<long long>(outcome.least_on_cpu_bytes));
  return outcome;
}

// Host buffers larger than the machine's free memory: the kernel's OOM killer ended the job with
// no message (`-b 20G -e 20G` on 2 ranks). Counted: every rank's send, receive and scratch
// buffers for the largest size of any collective and type, times the ranks on this machine.
void check_host_memory(const std::vector<CommBenchPlan>& plans, int group_size, const Backend& backend) {
  if (backend.device() == Device::Cuda) return;  // device memory: the allocation itself says so
  int64_t per_rank = 0;
  for (const CommBenchPlan& plan : plans)
    for (DType dtype : plan.types)
      per_rank = std::max(per_rank, CollectiveBench::buffer_bytes(plan.collective, dtype, plan.settings.max_bytes,
                                                                  group_size));
  const int local_ranks = detect_launch().local_size;
  const int64_t available = host_memory_available_bytes();
  const double gib = 1 << 30;
  check(available < 0 || static_cast<double>(per_rank) * local_ranks <= static_cast<double>(available),
        "bench comm -e ", plans.front().settings.max_bytes, ": each rank's buffers take ", per_rank / gib, " GiB (send, ",
        "receive, scratch), ", local_ranks, " rank(s) on this machine ", per_rank * static_cast<double>(local_ranks) / gib,
        " GiB, and ", available / gib, " GiB are available (MemAvailable): give a smaller -e");
}

}  // namespace

void run_bench_comm(const CommBenchOptions& options) {
  std::vector<CommBenchPlan> plans = make_plans(options);  // checked before MPI: same error on every rank
  auto backend = make_backend(options.backend);
  MpiRuntime mpi;
  auto world = make_world(*backend, options.comm);  // --comm: a device's buffers staged or moved by NCCL
  BenchGroup group;
  // The layout and the root depend only on the flags: every rank fails alike, and reports.
  check_on_every_rank(*world, [&] {
    group = make_group(plans.front(), *world);
    for (const CommBenchPlan& plan : plans) check_plan_for_group(plan, group.comm->size());
    check_host_memory(plans, group.comm->size(), *backend);
  });
  nlohmann::json results = nlohmann::json::array(), summaries = nlohmann::json::array();
  int64_t failures = 0;
  // A failure on one rank (memory, say) leaves the others waiting in a collective: end them all.
  run_or_abort_job(*world, [&] {
    for (const CommBenchPlan& plan : plans) {
      const Outcome outcome = run_collective(plan, *world, group, *backend, results);
      failures += outcome.out_of_bounds;
      summaries.push_back({{"collective", collective_name(plan.collective)}, {"out_of_bounds", outcome.out_of_bounds},
                           {"avg_busbw", outcome.rows ? outcome.busbw_sum / outcome.rows : 0.0},
                           {"least_on_cpu", outcome.host_buffers ? nlohmann::json(outcome.least_on_cpu) : nullptr}});
    }
  });
  if (world->rank() == 0 && !options.json_out.empty())
    write_output_file(options.json_out,
                      nlohmann::json{{"benchmark", "comm"}, {"build", build_info_json()}, {"world_size", world->size()},
                                     {"group", group.description}, {"group_size", group.comm->size()},
                                     {"groups", group.count}, {"settings", settings_json(options)},
                                     {"summaries", summaries}, {"results", results}}
                              .dump(2) + "\n",
                      "the results file (-J)");
  if (failures > 0) {  // every rank exits non-zero; rank 0 says why, before any rank exits
    if (world->rank() == 0)
      std::fprintf(stderr, "tripod: error: bench comm: %lld results had wrong values (see #wrong)\n",
                   static_cast<long long>(failures));
    std::fflush(stderr);
    world->barrier();
    throw Error("");
  }
}

}  // namespace tripod::commbench
