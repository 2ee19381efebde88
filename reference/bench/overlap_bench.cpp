#include "bench/overlap_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mpi.h>

#include "backend/backend_factory.h"
#include "bench/timed_regions.h"
#include "comm/mpi_communicator.h"
#include "comm/world.h"
#include "comm/host_collectives.h"
#include "data/random_batch.h"
#include "model/gpt.h"
#include "parallel/zero_engine.h"
#include "train/run_config.h"

namespace tripod::bench {

void run_overlap(const OverlapOptions& o) {
  auto backend = make_backend(o.backend);
  MpiRuntime mpi;
  auto world = make_world(*backend, o.comm);
  std::vector<std::string> overrides = o.overrides;
  overrides.push_back("model.vocab_size=" + std::to_string(o.vocab));
  const RunConfig config = parse_run_config(load_config_json(o.config, overrides));
  Gpt model(config.model, *backend, config.train.dtype);
  const data::Batch batch = data::random_token_batch(o.batch, o.seq_len, o.vocab, world->rank(), "bench.overlap");
  const double scale = 1.0 / static_cast<double>(o.batch * o.seq_len * world->size());

  // Seconds of one backward (after an untimed forward), reductions included when `reduce`.
  auto time_backward = [&](ZeroEngine& engine, bool reduce) {
    model.forward(engine, batch.tokens.data(), batch.targets.data(), o.batch, o.seq_len);
    engine.zero_grads();
    world->barrier();
    const auto start = std::chrono::steady_clock::now();
    engine.begin_backward(reduce);
    model.backward(engine, scale);
    engine.finish_backward();
    backend->synchronize();
    const double local = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return all_reduce_value(*world, local, ReduceOp::Max);  // the step is as slow as its slowest rank
  };
  const int64_t bucket_bytes = static_cast<int64_t>(o.bucket_mb * 1024 * 1024);
  ZeroEngine bucketed(model.specs(), ZeroSettings{0, bucket_bytes, config.train.dtype, config.adamw, {}, 0}, *world,
                      *backend);
  ZeroEngine at_end(model.specs(), ZeroSettings{0, int64_t{1} << 40, config.train.dtype, config.adamw, {}, 0}, *world,
                    *backend);
  bucketed.initialise(config.train.seed);
  at_end.initialise(config.train.seed);
  std::vector<double> compute, with_buckets, single;
  time_backward(bucketed, true);  // warm-up
  for (int64_t r = 0; r < o.repeats; ++r) {  // interleaved, so machine noise hits all three alike
    compute.push_back(time_backward(bucketed, false));
    with_buckets.push_back(time_backward(bucketed, true));
    single.push_back(time_backward(at_end, true));
  }
  const double c = median(compute), b = median(with_buckets), s = median(single);
  const double exposed_b = std::max(0.0, b - c), exposed_s = std::max(0.0, s - c);
  const double hidden = exposed_s > 0 ? 1.0 - exposed_b / exposed_s : 0.0;
  if (world->rank() == 0) {
    const double grad_mib = bucketed.layout().total() * dtype_size(config.train.dtype) / 1048576.0;
    std::printf("tripod bench overlap: %d ranks, %s, %.1f MiB of gradients, %zu buckets of <= %.2f MiB, "
                "medians of %lld\n", world->size(), o.config.c_str(), grad_mib, bucketed.layout().buckets().size(),
                o.bucket_mb, static_cast<long long>(o.repeats));
    std::printf("  backward, no reduction          %8.2f ms\n", 1e3 * c);
    std::printf("  backward + bucketed all-reduce  %8.2f ms  (exposed communication %.2f ms)\n", 1e3 * b, 1e3 * exposed_b);
    std::printf("  backward, then one all-reduce   %8.2f ms  (exposed communication %.2f ms)\n", 1e3 * s, 1e3 * exposed_s);
    std::printf("  communication hidden by bucketing: %.0f%%\n", 100 * hidden);
    if (!o.json_out.empty())
      std::ofstream(o.json_out) << nlohmann::json{{"benchmark", "dp_overlap"}, {"ranks", world->size()},
                                                  {"compute_seconds", c}, {"bucketed_seconds", b},
                                                  {"single_allreduce_seconds", s}, {"hidden_fraction", hidden},
                                                  {"bucket_mb", o.bucket_mb}, {"gradient_mib", grad_mib}}
                                         .dump(2)
                                << "\n";
  }
}

}  // namespace tripod::bench
