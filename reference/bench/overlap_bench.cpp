#include "bench/overlap_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mpi.h>

#include "backend/backend_factory.h"
#include "bench/timed_regions.h"
#include "comm/mpi_communicator.h"
#include "comm/mpi_progress.h"
#include "comm/world.h"
#include "comm/host_collectives.h"
#include "data/random_batch.h"
#include "model/gpt.h"
#include "parallel/zero_engine.h"
#include "train/run_config.h"

namespace tripod::bench {
namespace {

struct Mechanism {
  const char* name;
  const char* label;
  std::vector<double> seconds;
};

}  // namespace

void run_overlap(const OverlapOptions& o) {
  auto backend = make_backend(o.backend);
  MpiRuntime mpi;
  auto world = make_world(*backend, o.comm);
  check(o.comm.progress_us == 0 || o.progress_us == 0,
        "bench overlap measures the progress thread itself (--progress-us); leave --mpi-progress-us at 0");
  std::vector<std::string> overrides = o.overrides;
  overrides.push_back("model.vocab_size=" + std::to_string(o.vocab));
  const RunConfig config = parse_run_config(load_config_json(o.config, overrides));
  Gpt model(config.model, *backend, config.train.dtype);
  const data::Batch batch = data::random_token_batch(o.batch, o.seq_len, o.vocab, world->rank(), "bench.overlap");
  const double scale = 1.0 / static_cast<double>(o.batch * o.seq_len * world->size());

  // Seconds of one forward + backward, reductions included when `reduce` (the slowest rank's).
  auto time_pass = [&](ZeroEngine& engine, bool reduce) {
    engine.zero_grads();
    world->barrier();
    const auto start = std::chrono::steady_clock::now();
    engine.begin_forward();
    model.forward(engine, batch.tokens.data(), batch.targets.data(), o.batch, o.seq_len);
    engine.finish_backward();
    engine.begin_backward(reduce);
    model.backward(engine, scale);
    engine.finish_backward();
    backend->synchronize();
    const double local = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return all_reduce_value(*world, local, ReduceOp::Max);  // the step is as slow as its slowest rank
  };
  const int64_t bucket_bytes = static_cast<int64_t>(o.bucket_mb * 1024 * 1024);
  auto engine = [&](int stage, int64_t bytes, int prefetch) {
    ZeroSettings s{stage, bytes, config.train.dtype, config.adamw, {}, 0, prefetch};
    auto e = std::make_unique<ZeroEngine>(model.specs(), s, *world, *backend);
    e->initialise(config.train.seed);
    return e;
  };
  auto bucketed = engine(0, bucket_bytes, 0), at_end = engine(0, int64_t{1} << 40, 0);
  auto z3_on_use = engine(3, bucket_bytes, 0), z3_prefetch = engine(3, bucket_bytes, o.prefetch);
  const bool progress = o.progress_us > 0;
  std::vector<Mechanism> rows = {{"compute", "forward + backward, no communication", {}},
                                 {"at_end", "ZeRO-0, one all-reduce after backward", {}},
                                 {"bucketed", "ZeRO-0, bucketed all-reduce in backward", {}},
                                 {"bucketed_progress", "  + MPI progress thread", {}},
                                 {"zero3_on_use", "ZeRO-3, gathered on use", {}},
                                 {"zero3_prefetch", "ZeRO-3, prefetched", {}}};
  auto measure = [&](std::size_t row) {
    switch (row) {
      case 0: return time_pass(*bucketed, false);
      case 1: return time_pass(*at_end, true);
      case 2: return time_pass(*bucketed, true);
      case 3: {
        MpiProgress::start(std::chrono::microseconds(o.progress_us));
        const double s = time_pass(*bucketed, true);
        MpiProgress::stop();
        return s;
      }
      case 4: return time_pass(*z3_on_use, true);
      default: return time_pass(*z3_prefetch, true);
    }
  };
  for (std::size_t row = 0; row < rows.size(); ++row)
    if (row != 3 || progress) measure(row);  // warm-up (and ZeRO-3's recorded passes)
  for (int64_t r = 0; r < o.repeats; ++r)  // interleaved, so machine noise hits every row alike
    for (std::size_t row = 0; row < rows.size(); ++row)
      if (row != 3 || progress) rows[row].seconds.push_back(measure(row));

  std::vector<double> med(rows.size(), 0.0);
  for (std::size_t i = 0; i < rows.size(); ++i) med[i] = rows[i].seconds.empty() ? 0.0 : median(rows[i].seconds);
  auto exposed = [&](std::size_t i) { return std::max(0.0, med[i] - med[0]); };
  auto hidden = [&](std::size_t i, std::size_t reference) {
    return exposed(reference) > 0 ? 1.0 - exposed(i) / exposed(reference) : 0.0;
  };
  const double hidden_bucketed = hidden(2, 1), hidden_progress = progress ? hidden(3, 1) : 0.0;
  const double hidden_prefetch = hidden(5, 4);
  if (world->rank() != 0) return;
  const double grad_mib = bucketed->layout().total() * dtype_size(config.train.dtype) / 1048576.0;
  std::printf("tripod bench overlap: %d ranks, %s, %.1f MiB of gradients, %zu buckets of <= %.2f MiB, "
              "medians of %lld\n", world->size(), o.config.c_str(), grad_mib, bucketed->layout().buckets().size(),
              o.bucket_mb, static_cast<long long>(o.repeats));
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].seconds.empty()) continue;
    std::printf("  %-42s %8.2f ms", rows[i].label, 1e3 * med[i]);
    if (i > 0) std::printf("  (exposed communication %.2f ms)", 1e3 * exposed(i));
    std::printf("\n");
  }
  std::printf("  hidden by bucketing: %.0f%%", 100 * hidden_bucketed);
  if (progress) std::printf("; with a progress thread every %d us: %.0f%%", o.progress_us, 100 * hidden_progress);
  std::printf("; ZeRO-3 gathers hidden by prefetching %d: %.0f%%\n", o.prefetch, 100 * hidden_prefetch);
  if (o.json_out.empty()) return;
  nlohmann::json seconds;
  for (std::size_t i = 0; i < rows.size(); ++i)
    if (!rows[i].seconds.empty()) seconds[rows[i].name] = med[i];
  nlohmann::json mechanisms = {{"bucketing", hidden_bucketed}, {"zero3_prefetch", hidden_prefetch}};
  if (progress) mechanisms["bucketing_with_progress_thread"] = hidden_progress;
  std::ofstream(o.json_out) << nlohmann::json{{"benchmark", "dp_overlap"}, {"ranks", world->size()},
                                              {"compute_seconds", med[0]}, {"bucketed_seconds", med[2]},
                                              {"single_allreduce_seconds", med[1]}, {"seconds", seconds},
                                              {"hidden_fraction", hidden_bucketed}, {"hidden_by_mechanism", mechanisms},
                                              {"progress_us", o.progress_us}, {"prefetch", o.prefetch},
                                              {"bucket_mb", o.bucket_mb}, {"gradient_mib", grad_mib}}
                                   .dump(2)
                            << "\n";
}

}  // namespace tripod::bench
