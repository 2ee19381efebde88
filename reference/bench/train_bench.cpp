#include "bench/train_bench.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <omp.h>

#include "backend/backend_factory.h"
#include "comm/self_communicator.h"
#include "core/build_info.h"
#include "core/output_file.h"
#include "data/random_batch.h"
#include "parallel/tp_vocab.h"
#include "perf/backend_peak.h"
#include "perf/flops.h"
#include "perf/gemm_rate.h"
#include "perf/process_memory.h"
#include "train/distributed_trainer.h"
#include "train/trainer.h"

namespace tripod::bench {

void run_bench_train(const BenchTrainOptions& o) {
  check(o.steps >= 1 && o.gemm_size >= 1, "bench train: --steps and --gemm-size must be >= 1 (got ", o.steps, ", ",
        o.gemm_size, ")");  // a median of no steps was a segmentation fault
  std::vector<std::string> overrides = o.overrides;
  overrides.push_back("train.batch_size=" + std::to_string(o.batch));
  overrides.push_back("train.seq_len=" + std::to_string(o.seq_len));
  overrides.push_back("train.micro_batches=1");
  RunConfig config = parse_run_config(load_config_json(o.config, overrides));
  check(config.model.vocab_size > 0, "bench train needs model.vocab_size set (the preset has 0: use --set)");
  auto backend = make_backend(o.backend);
  const FlopCount flops = count_flops(config.model, o.seq_len);
  std::printf("tripod bench train: %s, %lld parameters, batch %lld x context %lld, %s, %d threads, backend %s\n",
              o.config.c_str(), static_cast<long long>(flops.n_params_total), static_cast<long long>(o.batch),
              static_cast<long long>(o.seq_len), precision_name(config.train).c_str(), omp_get_max_threads(),
              backend->name().c_str());
  std::fflush(stdout);

  // The sgemm baseline first, so its matrices are freed before the model exists and the peak RSS
  // below is the training's own; under the step's precision policy (bf16-mixed: bf16 operands on
  // a GPU's tensor cores), so that the ratio compares like with like: on an H200 a bf16-mixed
  // step was held against plain fp32 GEMMs and read "176.6 %".
  apply_precision_policy(config.train, *backend);
  const std::string attention_declined =
      backend->attention_declined(config.train.dtype, o.seq_len, config.model.d_model, config.model.n_head);
  if (!attention_declined.empty()) std::printf("  note: %s\n", attention_declined.c_str());
  const GemmRate gemm = measure_square_gemm(*backend, o.gemm_size, config.train.dtype, 5);
  const std::size_t baseline_rss = peak_resident_bytes();  // the program, its libraries and the sgemm
  backend->reset_peak_memory();  // the allocator's peak below is then the training's own
  // And the host's: the kernel's high-water mark kept the sgemm's matrices (3 x 16 MiB at 2048), more
  // than a small model's whole step, and the "training's" peak RSS moved with --gemm-size.
  const ResidentStart resident = start_resident_measurement();
  const std::size_t base_rss = resident.base_bytes;
  const bool rss_reset = resident.mark_reset;
  // A padded vocabulary lives in TP shards (of one rank here): the distributed trainer's storage.
  std::unique_ptr<SelfCommunicator> world;
  std::unique_ptr<ProcessGrid> grid;
  std::unique_ptr<TrainingEngine> engine;
  const int64_t padded_vocab = tp::padded_vocab(config.model.vocab_size, 1, o.vocab_multiple);
  if (o.vocab_multiple > 1) {
    ParallelLayout layout;
    layout.vocab_multiple = o.vocab_multiple;
    world = std::make_unique<SelfCommunicator>("world", backend.get());
    grid = std::make_unique<ProcessGrid>(*world, layout.grid());
    engine = std::make_unique<DistributedTrainer>(config, *backend, *grid, layout);
    std::printf("  vocabulary %lld padded to %lld rows (a multiple of %d); model FLOPs count the %lld real ones\n",
                static_cast<long long>(config.model.vocab_size),
                static_cast<long long>(padded_vocab),
                o.vocab_multiple, static_cast<long long>(config.model.vocab_size));
  } else {
    engine = std::make_unique<Trainer>(config, *backend);
  }
  TrainingEngine& trainer = *engine;
  trainer.initialise();
  trainer.train_step(data::random_token_batch(o.batch, o.seq_len, config.model.vocab_size, 0, "bench.train"));  // warm-up step
  std::vector<double> step_seconds;
  for (int64_t s = 1; s <= o.steps; ++s) {
    const StepResult r = trainer.train_step(data::random_token_batch(o.batch, o.seq_len, config.model.vocab_size, s, "bench.train"));
    step_seconds.push_back(r.seconds);
    std::printf("  step %lld: %.3f s, loss %.4f\n", static_cast<long long>(s), r.seconds, r.loss);
    std::fflush(stdout);
  }
  // The same bits either way, not the same time: a fused form the device's library declined is said.
  const std::string library_declined = backend->library_declined();
  if (!library_declined.empty()) std::printf("  note: ran apart instead of fused: %s\n", library_declined.c_str());
  std::sort(step_seconds.begin(), step_seconds.end());
  const double median_step = step_seconds[step_seconds.size() / 2];
  const double flops_per_step = flops.model_flops_per_token * static_cast<double>(o.batch * o.seq_len);
  const double achieved = flops_per_step / median_step;

  const MemoryReport held = trainer.memory();
  const std::size_t state_bytes = held.params + held.grads + held.optimizer;  // weights + grads + Adam m, v
  const std::size_t act_bytes = held.activations;
  const std::size_t transient_bytes = held.transient;  // ZeRO's and the pipeline's buffers in flight: 0 here
  const std::size_t by_hand = state_bytes + act_bytes + transient_bytes;
  const std::size_t rss = std::max(base_rss, peak_resident_bytes());  // (the kernel's mark is kept lazily)
  // The backend's own high-water mark, where its tensors live: on a GPU the host's RSS holds none of
  // them (set against the accounting, it printed "that + -12037.9 MiB" on an H200).
  const std::size_t allocator_peak = backend->memory_stats().peak;
  const double ratio = achieved / gemm.median_flops;
  const PeakFlops peak = backend_peak(backend->name(), gemm_peak_precision(config.train), config.train.peak_tflops);
  std::printf("  median step %.3f s | %.0f tokens/s | %.1f GFLOP/s model FLOPs (%.3g FLOP/step)\n", median_step,
              o.batch * o.seq_len / median_step, achieved / 1e9, flops_per_step);
  std::printf("  sgemm %lld^3 on the same threads, %s GEMMs: %.1f GFLOP/s (median of 5)\n",
              static_cast<long long>(gemm.size), precision_name(config.train).c_str(), gemm.median_flops / 1e9);
  std::printf("  training step / sgemm = %.1f%%  (target >= 50%%)\n", 100 * ratio);
  std::printf("  MFU %s of %.1f TFLOP/s (%s)\n", percent_of_peak_text(achieved, peak).c_str(), peak.flops / 1e12,
              peak.source.c_str());
  // The state as the trainer holds it (a padded vocabulary's rows and bf16-mixed's copies included),
  // so the sum adds up; "16 B/param x the model's count" did not with either.
  std::printf("  memory: %.1f MiB state (weights, grads, Adam m and v) + %.1f MiB activations + %.1f MiB the\n"
              "          transient buffers (none on one device) = %.1f MiB by hand;\n"
              "          the %s backend's allocator peak %.1f MiB = that %c %.1f MiB (the backend's scratch: GEMM\n"
              "          operand copies, attention buffers; the trainer's gradient and step buffers);\n"
              "          host peak RSS %.1f MiB%s (%.1f MiB before the model; the sgemm baseline's peak %.1f MiB)\n",
              state_bytes / 1048576.0, act_bytes / 1048576.0, transient_bytes / 1048576.0, by_hand / 1048576.0,
              o.backend.c_str(), allocator_peak / 1048576.0, allocator_peak >= by_hand ? '+' : '-',
              std::abs(static_cast<double>(allocator_peak) - static_cast<double>(by_hand)) / 1048576.0,
              rss / 1048576.0, rss_reset ? "" : " (the kernel kept the sgemm's: its mark cannot be reset here)",
              base_rss / 1048576.0, baseline_rss / 1048576.0);
  if (!o.json_out.empty()) {
    nlohmann::json j = {{"benchmark", "train_step"}, {"build", build_info_json()}, {"config", o.config}, {"batch", o.batch},
                        {"seq_len", o.seq_len}, {"threads", omp_get_max_threads()}, {"blas", cpu_blas_version()},
                        {"n_params", flops.n_params_total}, {"median_step_seconds", median_step},
                        {"tokens_per_second", o.batch * o.seq_len / median_step},
                        {"model_flops_per_second", achieved}, {"sgemm_flops_per_second", gemm.median_flops},
                        {"ratio_to_sgemm", ratio}, {"state_bytes", state_bytes}, {"activation_bytes", act_bytes},
                        {"transient_bytes", transient_bytes},
                        {"peak_rss_bytes", rss}, {"base_rss_bytes", base_rss}, {"baseline_rss_bytes", baseline_rss},
                        {"allocator_peak_bytes", allocator_peak}, {"backend", o.backend},
                        {"vocab_multiple", o.vocab_multiple},
                        {"padded_vocab", padded_vocab},
                        {"backend_name", backend->name()}, {"dtype", precision_name(config.train)},
                        {"attention_declined", attention_declined.empty() ? nlohmann::json(nullptr)
                                                                          : nlohmann::json(attention_declined)},
                        {"library_declined", library_declined.empty() ? nlohmann::json(nullptr)
                                                                      : nlohmann::json(library_declined)},
                        {"peak_flops", peak.flops > 0 ? nlohmann::json(peak.flops) : nlohmann::json(nullptr)},
                        {"peak_source", peak.source},
                        {"mfu", peak.flops > 0 ? nlohmann::json(achieved / peak.flops) : nlohmann::json(nullptr)}};
    write_output_file(o.json_out, j.dump(2) + "\n", "the results file (--json)");
  }
}

}  // namespace tripod::bench
