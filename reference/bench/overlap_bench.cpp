#include "bench/overlap_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <mpi.h>

#include "backend/backend_factory.h"
#include "bench/timed_regions.h"
#include "comm/core_sharing.h"
#include "comm/mpi_communicator.h"
#include "comm/mpi_progress.h"
#include "comm/world.h"
#include "comm/host_collectives.h"
#include "comm/mpi_algorithms.h"
#include "core/output_file.h"
#include "data/random_batch.h"
#include "model/gpt.h"
#include "parallel/parallel_layout.h"
#include "parallel/zero_engine.h"
#include "train/distributed_trainer.h"
#include "train/run_config.h"

namespace tripod::bench {
namespace {

struct Mechanism {
  const char* name;
  const char* label;
  std::vector<double> seconds, in_calls, gathers;  // per repetition: the pass, the engine's communication
                                                   // calls, and of those ZeRO-3's parameter gathers
};

struct Pass {
  double seconds = 0;              // the slowest rank's
  double in_calls = 0, gathers = 0;  // each the rank with least
};

}  // namespace

void run_overlap(const OverlapOptions& o) {
  check(o.repeats >= 1, "bench overlap: --repeats must be >= 1 (got ", o.repeats, ")");  // medians of nothing
  check(o.batch >= 1 && o.seq_len >= 1 && o.vocab >= 2, "bench overlap: --batch and --seq-len must be >= 1 and --vocab "
        ">= 2 (got ", o.batch, ", ", o.seq_len, ", ", o.vocab, ")");
  auto backend = make_backend(o.backend);
  MpiRuntime mpi;
  auto world = make_world(*backend, o.comm);
  // On one rank nothing is communicated, and "hidden" shares of nothing read 100 % (exit 0).
  check(world->size() >= 2, "bench overlap measures data-parallel communication: run it on 2 or more ranks "
        "(mpirun -np 2 tripod bench overlap ...)");
  check(o.comm.progress_us == 0 || o.progress_us == 0,
        "bench overlap measures the progress thread itself (--progress-us); leave --mpi-progress-us at 0");
  std::vector<std::string> overrides = o.overrides;
  overrides.push_back("model.vocab_size=" + std::to_string(o.vocab));
  const RunConfig config = parse_run_config(load_config_json(o.config, overrides));
  apply_precision_policy(config.train, *backend);  // bf16-mixed's GEMMs, as training runs them
  Gpt model(config.model, *backend, config.train.dtype);
  const data::Batch batch = data::random_token_batch(o.batch, o.seq_len, o.vocab, world->rank(), "bench.overlap");
  const double scale = 1.0 / static_cast<double>(o.batch * o.seq_len * world->size());

  // One forward + backward, reductions included when `reduce`.
  auto time_pass = [&](ZeroEngine& engine, bool reduce) {
    engine.zero_grads();
    world->barrier();
    const double calls_before = engine.communication_seconds(), gathers_before = engine.gather_seconds();
    const auto start = std::chrono::steady_clock::now();
    engine.begin_forward();
    model.forward(engine, batch.tokens.data(), batch.targets.data(), o.batch, o.seq_len, scale);
    engine.finish_backward();
    engine.begin_backward(reduce);
    model.backward(engine, scale);
    engine.finish_backward();
    backend->synchronize();
    const double local = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // The step is as slow as its slowest rank. A rank that finished its computation early also waits
    // in its calls for the others: the rank that spent least time in calls shows the communication
    // itself, without that skew.
    const double in_calls = engine.communication_seconds() - calls_before;
    const double gathers = engine.gather_seconds() - gathers_before;
    return Pass{all_reduce_value(*world, local, ReduceOp::Max), all_reduce_value(*world, in_calls, ReduceOp::Min),
                all_reduce_value(*world, gathers, ReduceOp::Min)};
  };
  const int64_t bucket_bytes = ParallelLayout::bucket_bytes_from_mib(o.bucket_mb);
  const bool tied = config.model.tie_embeddings;
  auto data_parallel = [&](int stage) {  // the engines' layout: every rank data-parallel
    ParallelLayout layout;
    layout.dp = world->size();
    layout.zero = stage;
    return layout;
  };
  auto engine = [&](int stage, int64_t bytes, int prefetch, bool split = false) {
    ZeroSettings s{stage, bytes, config.train.dtype, config.adamw, {}, 0, prefetch, {}, {}};
    s.bf16_operand_gathers = gathers_gemm_weights_as_bf16(data_parallel(stage), config.train);
    if (split) s.split_groups = {embedding_group()};
    if (split && !tied) s.sparse_groups = {embedding_group()};  // untied: the lookup's rows alone
    auto e = std::make_unique<ZeroEngine>(model.specs(), s, *world, *backend);
    e->initialise(config.train.seed);
    return e;
  };
  auto bucketed = engine(0, bucket_bytes, 0), at_end = engine(0, int64_t{1} << 40, 0);
  auto bucketed_split = engine(0, bucket_bytes, 0, true);
  auto z3_on_use = engine(3, bucket_bytes, 0), z3_prefetch = engine(3, bucket_bytes, o.prefetch);
  const bool progress = o.progress_us > 0;
  std::vector<Mechanism> rows = {{"compute", "forward + backward, no communication", {}, {}, {}},
                                 {"at_end", "ZeRO-0, one all-reduce after backward", {}, {}, {}},
                                 {"bucketed", "ZeRO-0, bucketed all-reduce in backward", {}, {}, {}},
                                 {"bucketed_split", tied ? "  + tied wte's gradient in two parts"
                                                         : "  + untied wte's gradient as its rows", {}, {}, {}},
                                 {"bucketed_progress", "  + MPI progress thread", {}, {}, {}},
                                 {"zero3_on_use", "ZeRO-3, gathered on use", {}, {}, {}},
                                 {"zero3_prefetch", "ZeRO-3, prefetched", {}, {}, {}},
                                 {"zero3_prefetch_progress", "  + MPI progress thread", {}, {}, {}}};
  // Without a progress thread a prefetched gather advances only inside the engine's next MPI call,
  // so it cannot run behind the computation between calls: the last row shows what it hides when
  // something advances it (on a GPU node's idle cores it hid nothing alone: -42 % and -4 %).
  const auto is_zero3 = [](std::size_t row) { return row >= 5; };
  const auto with_progress_thread = [](std::size_t row) { return row == 4 || row == 7; };
  const auto measured = [&](std::size_t row) { return !with_progress_thread(row) || progress; };
  auto measure = [&](std::size_t row) {
    switch (row) {
      case 0: return time_pass(*bucketed, false);
      case 1: return time_pass(*at_end, true);
      case 2: return time_pass(*bucketed, true);
      case 3: return time_pass(*bucketed_split, true);
      case 4:
      case 7: {
        MpiProgress::start(std::chrono::microseconds(o.progress_us));
        const Pass p = time_pass(row == 4 ? *bucketed : *z3_prefetch, true);
        MpiProgress::stop();
        return p;
      }
      case 5: return time_pass(*z3_on_use, true);
      default: return time_pass(*z3_prefetch, true);
    }
  };
  for (std::size_t row = 0; row < rows.size(); ++row)
    if (measured(row)) measure(row);  // warm-up (and ZeRO-3's recorded passes)
  for (int64_t r = 0; r < o.repeats; ++r)  // interleaved, so machine noise hits every row alike
    for (std::size_t row = 0; row < rows.size(); ++row)
      if (measured(row)) {
        const Pass p = measure(row);
        rows[row].seconds.push_back(p.seconds);
        rows[row].in_calls.push_back(p.in_calls);
        rows[row].gathers.push_back(p.gathers);
      }

  std::vector<double> med(rows.size(), 0.0), calls(rows.size(), 0.0), gathers(rows.size(), 0.0);
  for (std::size_t i = 0; i < rows.size(); ++i)
    if (!rows[i].seconds.empty()) {
      med[i] = median(rows[i].seconds);
      calls[i] = median(rows[i].in_calls);
      gathers[i] = median(rows[i].gathers);
    }
  auto exposed = [&](std::size_t i) { return std::max(0.0, med[i] - med[0]); };
  // The share of the reference's communication time a mechanism no longer shows; NaN (printed n/a,
  // null in the JSON) where the reference shows none, which a share of 0 % had misstated.
  auto hidden_share = [](double with, double reference) { return reference > 0 ? 1.0 - with / reference : NAN; };
  auto hidden = [&](std::size_t i, std::size_t reference) { return hidden_share(exposed(i), exposed(reference)); };
  auto hidden_in_calls = [&](std::size_t i, std::size_t reference) { return hidden_share(calls[i], calls[reference]); };
  const double hidden_bucketed = hidden(2, 1), hidden_progress = progress ? hidden(4, 1) : 0.0;
  const double hidden_split = hidden(3, 1);
  const double hidden_prefetch = hidden(6, 5);
  // The bucket finished last (the embeddings) is reduced after backward's last computation: no
  // mechanism can hide it behind backward, so its share of the bytes bounds what bucketing can hide.
  const ShardLayout& layout = bucketed->layout();
  const double last_bucket_share =
      static_cast<double>(layout.buckets().back().size) / static_cast<double>(layout.total());
  // With the split, what is left after backward is the second part: the union of the ranks' token
  // rows of wte, and wpe (untied: all that is sent of the embeddings).
  const double split_rest_share =
      static_cast<double>(bucketed_split->last_split_elements()) / static_cast<double>(layout.total());
  if (world->rank() != 0) return;
  const double grad_mib = layout.total() * dtype_size(config.train.dtype) / 1048576.0;
  // A bucket closes once it holds --bucket-mb: most hold more (the largest is printed).
  int64_t largest_bucket = 0;
  for (const auto& b : layout.buckets()) largest_bucket = std::max(largest_bucket, b.size);
  std::printf("tripod bench overlap: %d ranks, %s, %s (GEMMs: %s), %.1f MiB of gradients, %zu buckets (closed at >= "
              "%.2f MiB, the largest %.2f MiB), medians of %lld\n", world->size(), o.config.c_str(),
              precision_name(config.train).c_str(), fp32_matmul_name(backend->fp32_matmul()).c_str(), grad_mib,
              layout.buckets().size(), o.bucket_mb, largest_bucket * dtype_size(config.train.dtype) / 1048576.0,
              static_cast<long long>(o.repeats));
  if (gathers_gemm_weights_as_bf16(data_parallel(3), config.train))
    std::printf("  ZeRO-3 gathers the GEMM weights as bf16 (the same bits as fp32 gathers, half their bytes)\n");
  const int algorithm = iallreduce_algorithm();
  std::printf("  non-blocking all-reduce: %s (Open MPI coll_libnbc_iallreduce_algorithm %d)\n",
              iallreduce_algorithm_name(algorithm).c_str(), algorithm);
  const int reduce_algorithm = ireduce_algorithm();  // two ranks' reduce_scatter is two reduces
  std::printf("  non-blocking reduce: %s (Open MPI coll_libnbc_ireduce_algorithm %d)\n",
              ireduce_algorithm_name(reduce_algorithm).c_str(), reduce_algorithm);
  if (const auto share = process_core_share()) std::printf("  threads: %s\n", describe(*share).c_str());
  std::printf("  %-42s %11s %11s %11s %11s\n", "", "pass", "exposed", "in calls", "gathers");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].seconds.empty()) continue;
    std::printf("  %-42s %8.2f ms", rows[i].label, 1e3 * med[i]);
    if (i > 0) std::printf(" %8.2f ms %8.2f ms", 1e3 * exposed(i), 1e3 * calls[i]);
    if (is_zero3(i)) std::printf(" %8.2f ms", 1e3 * gathers[i]);
    std::printf("\n");
  }
  std::printf("  exposed = pass - compute, the slowest rank's; in calls = time inside the engine's communication\n"
              "  calls, the rank with least (no wait for a slower peer; a progress thread's own work is not in it);\n"
              "  gathers = of those calls, ZeRO-3's parameter gathers (the rest: gradient buckets, allocated and\n"
              "  zeroed when first written under ZeRO-2/3, and reduced)\n");
  const auto pct = [](double share) {
    return std::isnan(share) ? std::string("n/a") : str_cat(static_cast<long long>(std::llround(100 * share)), "%");
  };
  std::printf("  hidden by bucketing: %s (in calls: %s)", pct(hidden_bucketed).c_str(), pct(hidden_in_calls(2, 1)).c_str());
  std::printf("; with the %s gradient split: %s (in calls: %s)", tied ? "tied" : "untied", pct(hidden_split).c_str(),
              pct(hidden_in_calls(3, 1)).c_str());
  if (progress)
    std::printf("; with a progress thread every %d us: %s (in calls: %s)", o.progress_us, pct(hidden_progress).c_str(),
                pct(hidden_in_calls(4, 1)).c_str());
  std::printf("; ZeRO-3 gathers hidden by prefetching %d: %s (in calls: %s)", o.prefetch, pct(hidden_prefetch).c_str(),
              pct(hidden_in_calls(6, 5)).c_str());
  if (progress)
    std::printf(", with the progress thread: %s (in calls: %s)", pct(hidden(7, 5)).c_str(),
                pct(hidden_in_calls(7, 5)).c_str());
  std::printf("\n");
  if (std::isnan(hidden_bucketed) || std::isnan(hidden_prefetch))
    std::printf("  n/a: the reference row exposed no communication (all of it overlapped or too short to time)\n");
  std::printf("  the last bucket (%.2f MiB, %.0f%% of the gradient bytes) is reduced after backward's last "
              "computation: bucketing can hide at most about %.0f%%\n",
              layout.buckets().back().size * dtype_size(config.train.dtype) / 1048576.0, 100 * last_bucket_share,
              100 * (1 - last_bucket_share));
  std::printf("  with the %s gradient split, what is reduced after backward is %.2f MiB (%.1f%%: the batches' "
              "token rows of wte, and wpe)%s: at most about %.0f%%\n", tied ? "tied" : "untied",
              bucketed_split->last_split_elements() * dtype_size(config.train.dtype) / 1048576.0,
              100 * split_rest_share, tied ? "" : ", and nothing else of the embeddings is sent",
              100 * (1 - split_rest_share));
  if (o.json_out.empty()) return;
  nlohmann::json seconds, in_calls, in_gathers;
  for (std::size_t i = 0; i < rows.size(); ++i)
    if (!rows[i].seconds.empty()) {
      seconds[rows[i].name] = med[i];
      in_calls[rows[i].name] = calls[i];
      if (is_zero3(i)) in_gathers[rows[i].name] = gathers[i];
    }
  nlohmann::json mechanisms = {{"bucketing", hidden_bucketed}, {"zero3_prefetch", hidden_prefetch}};
  nlohmann::json mechanisms_in_calls = {{"bucketing", hidden_in_calls(2, 1)},
                                        {"zero3_prefetch", hidden_in_calls(6, 5)}};
  const char* split_key = tied ? "bucketing_with_tied_grad_split" : "bucketing_with_untied_grad_rows";
  mechanisms[split_key] = hidden_split;
  mechanisms_in_calls[split_key] = hidden_in_calls(3, 1);
  if (progress) {
    mechanisms["bucketing_with_progress_thread"] = hidden_progress;
    mechanisms_in_calls["bucketing_with_progress_thread"] = hidden_in_calls(4, 1);
    mechanisms["zero3_prefetch_with_progress_thread"] = hidden(7, 5);
    mechanisms_in_calls["zero3_prefetch_with_progress_thread"] = hidden_in_calls(7, 5);
  }
  if (o.json_out.empty()) return;
  write_output_file(o.json_out, nlohmann::json{{"benchmark", "dp_overlap"}, {"ranks", world->size()},
                                              {"precision", precision_name(config.train)},
                                              {"gemms", fp32_matmul_name(backend->fp32_matmul())},
                                              {"compute_seconds", med[0]}, {"bucketed_seconds", med[2]},
                                              {"single_allreduce_seconds", med[1]}, {"seconds", seconds},
                                              {"communication_call_seconds", in_calls},
                                              {"gather_call_seconds", in_gathers},
                                              {"hidden_fraction", hidden_bucketed}, {"hidden_by_mechanism", mechanisms},
                                              {"hidden_in_calls_by_mechanism", mechanisms_in_calls},
                                              {"last_bucket_share", last_bucket_share},
                                              {"split_rest_share", split_rest_share},
                                              {"iallreduce_algorithm", iallreduce_algorithm_name(algorithm)},
                                              {"ireduce_algorithm", ireduce_algorithm_name(reduce_algorithm)},
                                              {"progress_us", o.progress_us}, {"prefetch", o.prefetch},
                                              {"bucket_mb", o.bucket_mb}, {"gradient_mib", grad_mib}}
                                   .dump(2) + "\n",
                    "the results file (--json)");
}

}  // namespace tripod::bench
