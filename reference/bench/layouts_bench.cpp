#include "bench/layouts_bench.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <omp.h>

#include "backend/backend_factory.h"
#include "comm/core_sharing.h"
#include "comm/mpi_communicator.h"
#include "comm/world.h"
#include "comm/host_collectives.h"
#include "core/build_info.h"
#include "core/output_file.h"
#include "data/random_batch.h"
#include "perf/backend_peak.h"
#include "perf/device_peak.h"
#include "perf/flops.h"
#include "perf/gemm_rate.h"
#include "perf/process_memory.h"
#include "train/distributed_trainer.h"
#include "train/world_peak.h"

namespace tripod::bench {

namespace {

// The layouts to measure, with the names the report uses: the ones named on the command line, or
// else pure data parallelism over all ranks at each ZeRO stage; each in every --recompute mode, or
// else in its own (a name's -rsel / -rfull, or train.recompute). Every layout is checked against the
// model, batch and world here, before any timing (a bad one was found when reached, after the
// others' timings, and they were lost with it).
std::vector<std::pair<std::string, ParallelLayout>> layouts_to_run(const LayoutsOptions& o, int n,
                                                                    const RunConfig& config) {
  std::vector<std::pair<std::string, ParallelLayout>> layouts;  // (reported name, layout)
  for (int zero : o.zero) {
    ParallelLayout l;
    l.dp = n;
    l.zero = zero;
    layouts.push_back({"dp" + std::to_string(n) + "-z" + std::to_string(zero), l});
  }
  if (!o.layouts.empty()) layouts.clear();
  for (const std::string& name : o.layouts) {
    const ParallelLayout l = ParallelLayout::parse(name);
    check(l.ranks() == n, "layout ", name, " needs ", l.ranks(), " ranks, launched with ", n);
    layouts.push_back({l.name(), l});
  }
  const auto suffix = [](Recompute r) {
    return r == Recompute::Selective ? "-rsel" : r == Recompute::Full ? "-rfull" : "";
  };
  std::vector<std::pair<std::string, ParallelLayout>> modes;  // each layout in each recomputation mode
  for (const auto& [name, layout] : layouts) {
    // A name's own mode was replaced by --recompute's default (none) and the row kept the name.
    check(o.recompute.empty() || layout.recompute == Recompute::None, "bench layouts: layout ", name, " names its ",
          "recomputation (", recompute_name(layout.recompute), "): leave --recompute out, or name the layout without it");
    std::vector<Recompute> wanted;
    for (const std::string& mode : o.recompute) wanted.push_back(parse_recompute(mode));
    if (wanted.empty()) wanted.push_back(layout.recompute != Recompute::None ? layout.recompute : config.train.recompute);
    for (const Recompute mode : wanted) {
      ParallelLayout l = layout;
      l.recompute = mode;
      modes.push_back({name + (layout.recompute == Recompute::None ? suffix(mode) : ""), l});
    }
  }
  for (const auto& [name, layout] : modes) {
    const RunConfig run = layout_run_config(config, layout);
    layout.validate(config.model, {run.train.batch_size, run.train.seq_len, run.train.pipeline_split}, n);
  }
  return modes;
}

struct LayoutTiming {
  double step_seconds = 0;
  std::size_t peak_bytes = 0, activation_bytes = 0;  // this rank's allocator peak over the run; activations held
  std::size_t accounted_bytes = 0;  // what the memory report itemises (its transient column at its peak)
  std::size_t transient_bytes = 0;  // that transient column: buffers in flight, whose overlap depends on timing
  // The process's resident memory before the trainer existed (program, libraries, MPI, BLAS) and its
  // high-water mark while this layout ran (perf/process_memory.h).
  std::size_t base_resident_bytes = 0, peak_resident_bytes = 0;
  double gathered_bytes_per_step = 0;  // ZeRO 1-3's parameter gathers, over the timed steps
};

// The median over o.steps timed steps (after one warm-up) of the slowest rank's step time: a step
// is over only when every rank has finished it.
LayoutTiming time_layout(const RunConfig& config, const ParallelLayout& shape, Backend& backend, Communicator& world,
                         const LayoutsOptions& o) {
  const RunConfig run = layout_run_config(config, shape);
  backend.reset_peak_memory();
  const std::size_t before = backend.memory_stats().live;
  // (the previous layout's kept blocks would count as this one's base)
  const std::size_t base_resident = start_resident_measurement().base_bytes;
  ProcessGrid grid(world, shape.grid(), shape.grid_order);
  DistributedTrainer trainer(run, backend, grid, shape);
  trainer.initialise();
  auto batch = [&](uint64_t seed) {
    return data::random_token_batch(config.train.batch_size, o.seq_len, o.vocab, seed, "bench.layouts");
  };
  trainer.train_step(batch(0));  // warm-up
  std::vector<double> seconds;
  const int64_t gathered_before = trainer.param_gathered_bytes();
  for (int64_t s = 1; s <= o.steps; ++s) {
    const StepResult r = trainer.train_step(batch(s));
    seconds.push_back(all_reduce_value(world, r.seconds, ReduceOp::Max));  // as slow as the slowest rank
  }
  std::sort(seconds.begin(), seconds.end());
  const MemoryReport m = trainer.memory();
  return {seconds[seconds.size() / 2], backend.memory_stats().peak - before, m.activations,
          m.params + m.grads + m.optimizer + m.activations + m.transient, m.transient, base_resident,
          std::max(base_resident, peak_resident_bytes()),  // (the kernel's mark is kept lazily, to the page)
          static_cast<double>(trainer.param_gathered_bytes() - gathered_before) / static_cast<double>(o.steps)};
}

// One layout's figures: the step time of each round, and its memory and gathers (the largest
// over rounds; only the transient buffers' part, with what it adds to the peaks, can change
// between rounds: how many are in flight at once depends on timing).
struct LayoutRow {
  std::string name;
  ParallelLayout shape;
  std::vector<double> round_seconds;
  double peak_mib = 0, accounted_mib = 0, transient_mib = 0, activation_mib = 0, rss_mib = 0, base_mib = 0,
         gathered_mib = 0;
};

// Times `row`'s layout once more (collective over `world`) and adds the round to it.
void time_round(LayoutRow& row, const RunConfig& config, Backend& backend, Communicator& world,
                const LayoutsOptions& o) {
  const LayoutTiming timing = time_layout(config, row.shape, backend, world, o);
  auto max_mib = [&](double bytes) { return all_reduce_value(world, bytes, ReduceOp::Max) / 1048576.0; };
  row.round_seconds.push_back(timing.step_seconds);
  row.peak_mib = std::max(row.peak_mib, max_mib(static_cast<double>(timing.peak_bytes)));
  row.accounted_mib = std::max(row.accounted_mib, max_mib(static_cast<double>(timing.accounted_bytes)));
  row.transient_mib = std::max(row.transient_mib, max_mib(static_cast<double>(timing.transient_bytes)));
  row.activation_mib = std::max(row.activation_mib, max_mib(static_cast<double>(timing.activation_bytes)));
  // The rank whose resident peak is furthest above its own base, with that base.
  const std::vector<double> resident = all_gather_values(
      world, {static_cast<double>(timing.peak_resident_bytes), static_cast<double>(timing.base_resident_bytes)});
  std::size_t worst = 0;
  for (std::size_t r = 0; r < resident.size(); r += 2)
    if (resident[r] - resident[r + 1] > resident[worst] - resident[worst + 1]) worst = r;
  if (resident[worst] / 1048576.0 > row.rss_mib) {
    row.rss_mib = resident[worst] / 1048576.0;
    row.base_mib = resident[worst + 1] / 1048576.0;
  }
  row.gathered_mib = std::max(row.gathered_mib, max_mib(timing.gathered_bytes_per_step));
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

}  // namespace

void run_layouts(const LayoutsOptions& o) {
  check(o.steps >= 1, "bench layouts: --steps must be >= 1 (got ", o.steps, ")");  // 0 was a segmentation fault
  check(o.rounds >= 1, "bench layouts: --rounds must be >= 1 (got ", o.rounds, ")");
  check(o.batch_per_rank >= 1 && o.seq_len >= 1 && o.vocab >= 2,
        "bench layouts: --batch and --seq-len must be >= 1 and "
        "--vocab >= 2 (got ",
        o.batch_per_rank, ", ", o.seq_len, ", ", o.vocab, ")");
  auto backend = make_backend(o.backend);
  MpiRuntime mpi;
  auto world = make_world(*backend, o.comm);
  const int n = world->size();
  std::vector<std::string> overrides = o.overrides;
  for (const std::string& s :
       {"model.vocab_size=" + std::to_string(o.vocab), "train.seq_len=" + std::to_string(o.seq_len),
        "train.batch_size=" + std::to_string(o.batch_per_rank * n), std::string("train.micro_batches=1")})
    overrides.push_back(s);
  const RunConfig config = parse_run_config(load_config_json(o.config, overrides));
  const FlopCount flops = count_flops(config.model, o.seq_len);
  // The backend's peak at the step's precision, shared hardware counted once (train/world_peak.h):
  // the CPU's nominal peak was taken whatever the backend (a CUDA run's MFU about 5000x too high),
  // and the sgemm baseline measured before the precision policy (bf16-mixed's GEMMs against fp32's).
  const PeakFlops rank_peak = backend_peak(backend->name(), gemm_peak_precision(config.train), o.peak_tflops);
  const WorldPeak peak = world_peak(world.get(), *backend, rank_peak, o.peak_tflops > 0);
  apply_precision_policy(config.train, *backend);
  // Checked before the sgemm baseline and any timing.
  const std::vector<std::pair<std::string, ParallelLayout>> planned = layouts_to_run(o, n, config);
  const double measured_flops =  // the sum of every rank's sgemm rate
      all_reduce_value(*world, measure_square_gemm(*backend, 1024, config.train.dtype, 3).median_flops, ReduceOp::Sum);
  const double tokens = static_cast<double>(config.train.batch_size * o.seq_len);
  const bool root = world->rank() == 0;
  // A step's model FLOP/s against the nominal peak of every rank, and against their measured sgemm.
  auto mfu_at = [&](double step) { return mfu(flops.model_flops_per_token * tokens, step, peak.flops); };
  auto sgemm_fraction_at = [&](double step) { return mfu(flops.model_flops_per_token * tokens, step, measured_flops); };
  auto print_header = [&](const char* range) {
    std::printf("  %-40s %10s %12s %8s %14s %10s %10s %10s %10s %10s %12s%s\n", "layout", "step (s)", "tokens/s", "MFU",
                "vs sgemm rate", "peak MiB", "acct MiB", "act MiB", "rss MiB", "base MiB", "gathers MiB", range);
  };
  auto print_row = [&](const LayoutRow& row, double step, const std::string& range) {
    std::printf("  %-40s %10.3f %12.0f %7.2f%% %13.2f%% %10.1f %10.1f %10.1f %10.1f %10.1f %12.1f%s\n",
                row.name.c_str(), step, tokens / step, 100 * mfu_at(step), 100 * sgemm_fraction_at(step), row.peak_mib,
                row.accounted_mib,
                row.activation_mib, row.rss_mib, row.base_mib, row.gathered_mib, range.c_str());
    std::fflush(stdout);
  };
  if (root) {
    std::printf(
        "tripod bench layouts: %s, %lld parameters, %d ranks x %d threads, global batch %lld x %lld (--batch %lld "
        "per rank of the world; a tp or pp group shares its data-parallel rank's part)\n"
        "  peak: %s (per rank: %s); measured sgemm 1024^3, all ranks: %.3f TFLOP/s\n",
        o.config.c_str(), static_cast<long long>(flops.n_params_total), n, omp_get_max_threads(),
        static_cast<long long>(config.train.batch_size), static_cast<long long>(o.seq_len),
        static_cast<long long>(o.batch_per_rank), peak.text.c_str(),
        rank_peak.source.c_str(), measured_flops / 1e12);
    if (const auto share = process_core_share())
      std::printf("  threads: %s\n", describe(*share).c_str());  // the words train and conform print
  }
  std::vector<LayoutRow> rows;
  for (const auto& [name, shape] : planned) rows.push_back({name, shape, {}});
  // Rounds alternate the order (first to last, then last to first), so that on a machine whose
  // speed drifts every layout is timed early and late alike.
  for (int64_t round = 0; round < o.rounds; ++round) {
    if (root && o.rounds > 1)
      std::printf("  round %lld of %lld\n", static_cast<long long>(round + 1), static_cast<long long>(o.rounds));
    if (root) print_header("");
    for (std::size_t i = 0; i < rows.size(); ++i) {
      LayoutRow& row = rows[round % 2 ? rows.size() - 1 - i : i];
      time_round(row, config, *backend, *world, o);
      if (root) print_row(row, row.round_seconds.back(), "");
    }
  }
  if (root && o.rounds > 1) {
    std::printf("  medians over %lld rounds, in alternating order (range: the rounds' fastest - slowest step)\n",
                static_cast<long long>(o.rounds));
    print_header("      range (s)");
    for (const LayoutRow& row : rows) {
      const auto [fastest, slowest] = std::minmax_element(row.round_seconds.begin(), row.round_seconds.end());
      char range[64];
      std::snprintf(range, sizeof range, "  %.3f - %.3f", *fastest, *slowest);
      print_row(row, median(row.round_seconds), range);
    }
  }
  nlohmann::json records = nlohmann::json::array();
  for (const LayoutRow& row : rows) {
    const ParallelLayout& shape = row.shape;
    const double step = median(row.round_seconds);
    records.push_back(
        {{"layout", row.name},
         {"tp", shape.tp},
         {"pp", shape.pp},
         {"dp", shape.dp},
         {"zero", shape.zero},
         {"micro_batches", shape.micro_batches},
         {"recompute", recompute_name(shape.recompute)},
         {"peak_mib_max_rank", row.peak_mib},
         {"accounted_mib_max_rank", row.accounted_mib},
         {"transient_mib_max_rank", row.transient_mib},
         {"activation_mib_max_rank", row.activation_mib},
         {"resident_peak_mib", row.rss_mib},
         {"resident_base_mib", row.base_mib},
         {"gathered_mib_per_step", row.gathered_mib},
         {"schedule", shape.pipelined() ? schedule_kind_name(shape.schedule) : "none"},
         {"step_seconds", step},
         {"round_step_seconds", row.round_seconds},
         {"tokens_per_second", tokens / step},
         {"mfu", mfu_at(step)},
         {"fraction_of_measured_sgemm", sgemm_fraction_at(step)}});
  }
  if (root && !o.json_out.empty())
    write_output_file(o.json_out,
                      nlohmann::json{{"build", build_info_json()},
                                     {"model", o.config},
                                     {"n_params", flops.n_params_total},
                                     {"ranks", n},
                                     {"threads_per_rank", omp_get_max_threads()},
                                     {"peak_flops_per_rank", rank_peak.flops},
                                     {"peak_flops", peak.flops},
                                     {"peak_source", rank_peak.source},
                                     {"measured_sgemm_flops_all_ranks", measured_flops},
                                     {"model_flops_per_token", flops.model_flops_per_token},
                                     {"rounds", o.rounds},
                                     {"layouts", records}}
                              .dump(2) +
                          "\n",
                      "the results file (--json)");
}

}  // namespace tripod::bench
