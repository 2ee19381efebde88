#include "train/train_loop.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>

#include "backend/backend.h"
#include "core/host_memory.h"
#include "data/batch_loader.h"
#include "data/token_dataset.h"
#include "perf/device_peak.h"
#include "perf/flops.h"
#include "train/pipeline_report.h"
#include "train/trainer.h"

namespace tripod {
namespace fs = std::filesystem;
using nlohmann::json;

void resolve_vocab(RunConfig& config, int64_t data_vocab, const std::string& data_dir) {
  if (config.model.vocab_size == 0) config.model.vocab_size = data_vocab;
  check(config.model.vocab_size >= data_vocab, "vocabulary mismatch: model.vocab_size is ", config.model.vocab_size,
        " but the data in ", data_dir, " was tokenized with a vocabulary of ", data_vocab,
        " (set model.vocab_size to 0 to take it from the data)");
  config.model.validate();
  config.json["model"]["vocab_size"] = config.model.vocab_size;
}

namespace {

double mib(double bytes) { return bytes / (1024.0 * 1024.0); }

// Mean validation loss over the first `batches` global batches of the held-out split.
double evaluate(TrainingEngine& engine, const data::BatchLoader& val, int64_t batch_size, int64_t batches) {
  double sum = 0;
  for (int64_t i = 0; i < batches; ++i) sum += engine.eval_loss(val.samples(i * batch_size, batch_size));
  return batches > 0 ? sum / static_cast<double>(batches) : 0.0;
}

// Prints every rank's memory (gathered to all ranks; rank 0 prints). ZeRO's transient column is the
// peak so far, so at start-up it is 0: `tripod bench layouts` and the suites measure it in use.
void print_memory(const MemoryReport& m, Communicator* world, bool root) {
  const int n = world ? world->size() : 1;
  Tensor mine = host_alloc({5}, DType::F64), all = host_alloc({5 * n}, DType::F64);
  const double values[5] = {double(m.params), double(m.grads), double(m.optimizer), double(m.activations),
                            double(m.transient)};
  std::copy(values, values + 5, mine.data<double>());
  if (world) world->all_gather(mine, all); else std::copy(values, values + 5, all.data<double>());
  if (!root) return;
  std::printf("  memory per rank (MiB): %6s %10s %10s %10s %11s %10s\n", "rank", "params", "grads", "optimizer",
              "activations", "transient");
  for (int r = 0; r < n; ++r) {
    const double* v = all.data<double>() + 5 * r;
    std::printf("  %22d %10.2f %10.2f %10.2f %11.2f %10.2f\n", r, mib(v[0]), mib(v[1]), mib(v[2]), mib(v[3]), mib(v[4]));
  }
}

}  // namespace

TrainSummary run_training(RunConfig config, const TrainOptions& options, Backend& backend, const ParallelRun* parallel) {
  const bool root = !parallel || parallel->world->rank() == 0;
  const data::TokenDataset train_data = data::TokenDataset::open(config.data.dir, "train");
  resolve_vocab(config, train_data.vocab_size(), config.data.dir);
  std::optional<data::TokenDataset> val_data;
  const json meta = train_data.meta();
  if (meta.contains("splits") && meta["splits"].contains("val") && !meta["splits"]["val"].empty())
    val_data.emplace(data::TokenDataset::open(config.data.dir, "val"));

  std::unique_ptr<TrainingEngine> engine;
  if (parallel) {
    check(options.save_dir.empty() && options.resume_dir.empty(), "--save/--resume with ", parallel->layout,
          ": data-parallel checkpoints need the sharded checkpoint format, not implemented yet");
    engine = std::make_unique<DistributedTrainer>(config, backend, *parallel->dp, parallel->settings);
  } else {
    engine = std::make_unique<Trainer>(config, backend);
  }
  const TrainSettings& t = config.train;
  if (!options.resume_dir.empty()) engine->resume(options.resume_dir); else engine->initialise();

  const FlopCount flops = count_flops(config.model, t.seq_len);
  const PeakFlops peak = resolve_peak(t.peak_tflops, t.dtype);
  const int ranks = parallel ? parallel->world->size() : 1;
  if (root) {
    std::printf("tripod train: %lld parameters (%lld in matmuls), %s, backend %s, %s\n",
                static_cast<long long>(flops.n_params_total), static_cast<long long>(flops.n_params_matmul),
                dtype_name(t.dtype).c_str(), backend.name().c_str(),
                parallel ? parallel->layout.c_str() : "single process");
    std::printf("  data %s: %lld train tokens, vocab %lld%s\n", config.data.dir.c_str(),
                static_cast<long long>(train_data.size()), static_cast<long long>(train_data.vocab_size()),
                val_data ? "" : " (no held-out split: no eval loss)");
    std::printf("  %.3g model FLOPs/token; MFU against %d x %.3f TFLOP/s (%s)\n", flops.model_flops_per_token, ranks,
                peak.flops / 1e12, peak.source.c_str());
    if (engine->step() > 0)
      std::printf("  resuming from %s at step %lld\n", options.resume_dir.c_str(), static_cast<long long>(engine->step()));
  }

  engine->reserve_activations();
  print_memory(engine->memory(), parallel ? parallel->world : nullptr, root);

  std::ofstream metrics;
  if (root && !t.metrics.empty()) {
    if (fs::path(t.metrics).has_parent_path()) fs::create_directories(fs::path(t.metrics).parent_path());
    metrics.open(t.metrics, engine->step() > 0 ? std::ios::app : std::ios::trunc);
    check(metrics.good(), "cannot write metrics file ", t.metrics);
    metrics << json{{"event", "start"}, {"step", engine->step()}, {"config", config.json}, {"ranks", ranks},
                    {"layout", parallel ? parallel->layout : "single process"}, {"n_params", flops.n_params_total},
                    {"model_flops_per_token", flops.model_flops_per_token}, {"peak_flops", peak.flops * ranks},
                    {"peak_source", peak.source}}.dump() << "\n";
  }

  const data::BatchLoader loader(train_data, t.seq_len, t.seed);
  std::optional<data::BatchLoader> val_loader;
  if (val_data) val_loader.emplace(*val_data, t.seq_len, t.seed);
  auto save = [&]() {
    if (!options.save_dir.empty()) engine->save(options.save_dir);
  };

  TrainSummary summary;
  double total_seconds = 0;
  int64_t total_tokens = 0;
  const int64_t first_step = engine->step();
  const int64_t stop_step = options.exit_after > 0 ? std::min(t.steps, first_step + options.exit_after) : t.steps;
  while (engine->step() < stop_step) {
    const StepResult r = engine->train_step(loader.samples(engine->step() * t.batch_size, t.batch_size));
    total_seconds += r.seconds;
    total_tokens += r.tokens;
    const double tok_s = r.tokens / r.seconds;
    const double step_mfu =
        mfu(flops.model_flops_per_token * static_cast<double>(r.tokens), r.seconds, peak.flops * ranks);
    if (r.step == first_step) summary.first_loss = r.loss;
    summary.final_loss = r.loss;
    json record = {{"step", r.step}, {"loss", r.loss}, {"lr", r.lr}, {"grad_norm", r.grad_norm},
                   {"tokens", (r.step + 1) * r.tokens}, {"step_seconds", r.seconds}, {"tokens_per_second", tok_s},
                   {"mfu", step_mfu}};
    const bool last = engine->step() == t.steps;
    if (val_loader && ((t.eval_every > 0 && engine->step() % t.eval_every == 0) || last)) {
      summary.final_val_loss = evaluate(*engine, *val_loader, t.batch_size, t.eval_batches);
      record["val_loss"] = summary.final_val_loss;
    }
    if (root && (r.step % t.log_every == 0 || last)) {
      std::printf("step %5lld/%lld | loss %.4f | lr %.2e | grad norm %.4f | %8.0f tok/s | MFU %5.2f%%",
                  static_cast<long long>(r.step + 1), static_cast<long long>(t.steps), r.loss, r.lr, r.grad_norm,
                  tok_s, 100.0 * step_mfu);
      if (record.contains("val_loss")) std::printf(" | val loss %.4f", summary.final_val_loss);
      std::printf("\n");
      std::fflush(stdout);
    }
    if (metrics.is_open()) metrics << record.dump() << "\n" << std::flush;
    if (t.save_every > 0 && engine->step() % t.save_every == 0 && !last) save();
  }
  save();
  if (parallel && engine->step() > first_step) {
    auto& trainer = static_cast<DistributedTrainer&>(*engine);
    if (trainer.schedule().stages > 1) report_pipeline(trainer, root, parallel->pipeline_trace);
  }
  summary.steps = engine->step() - first_step;
  summary.seconds = total_seconds;
  summary.tokens_per_second = total_seconds > 0 ? total_tokens / total_seconds : 0;
  summary.mfu = mfu(flops.model_flops_per_token * static_cast<double>(total_tokens), total_seconds, peak.flops * ranks);
  return summary;
}

}  // namespace tripod
