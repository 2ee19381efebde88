#include "train/train_loop.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>

#include "backend/backend.h"
#include "ckpt/checkpoint.h"
#include "data/batch_loader.h"
#include "data/token_dataset.h"
#include "perf/device_peak.h"
#include "perf/flops.h"
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

double mib(std::size_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

// Mean validation loss over the first `batches` global batches of the held-out split.
double evaluate(Trainer& trainer, const data::BatchLoader& val, int64_t batches) {
  const int64_t B = trainer.config().train.batch_size;
  double sum = 0;
  for (int64_t i = 0; i < batches; ++i) sum += trainer.eval_loss(val.samples(i * B, B));
  return batches > 0 ? sum / static_cast<double>(batches) : 0.0;
}

void check_resumable(const RunConfig& config, const ckpt::CheckpointState& state, const std::string& dir) {
  const json& saved_model = state.config.at("model");
  const json& model = config.json.at("model");
  for (auto it = model.begin(); it != model.end(); ++it)
    check(saved_model.contains(it.key()) && saved_model.at(it.key()) == it.value(), "cannot resume from ", dir,
          ": model.", it.key(), " is ", it.value().dump(), " here but ",
          saved_model.contains(it.key()) ? saved_model.at(it.key()).dump() : "absent", " in the checkpoint");
  check(state.dtype == config.train.dtype, "cannot resume from ", dir, ": it holds ", dtype_name(state.dtype),
        " tensors but train.dtype is ", dtype_name(config.train.dtype));
  check(state.step <= config.train.steps, "cannot resume from ", dir, ": it is at step ", state.step,
        ", beyond train.steps = ", config.train.steps);
}

}  // namespace

TrainSummary run_training(RunConfig config, const TrainOptions& options) {
  const data::TokenDataset train_data = data::TokenDataset::open(config.data.dir, "train");
  resolve_vocab(config, train_data.vocab_size(), config.data.dir);
  std::optional<data::TokenDataset> val_data;
  const json meta = train_data.meta();
  if (meta.contains("splits") && meta["splits"].contains("val") && !meta["splits"]["val"].empty())
    val_data.emplace(data::TokenDataset::open(config.data.dir, "val"));

  auto backend = make_cpu_backend();
  Trainer trainer(config, *backend);
  const TrainSettings& t = config.train;
  if (!options.resume_dir.empty()) {
    ckpt::CheckpointState state = ckpt::read_checkpoint_state(options.resume_dir);
    check_resumable(config, state, options.resume_dir);
    ckpt::load_checkpoint(options.resume_dir, *backend, trainer.params(), &trainer.optimizer());
    trainer.set_step(state.step);
  } else {
    trainer.initialise();
  }
  trainer.model().reserve(t.batch_size / t.micro_batches, t.seq_len);

  const FlopCount flops = count_flops(config.model, t.seq_len);
  const PeakFlops peak = resolve_peak(t.peak_tflops, t.dtype);
  const std::size_t param_bytes = trainer.params().flat().bytes();
  std::printf("tripod train: %lld parameters (%lld in matmuls), %s, backend %s\n",
              static_cast<long long>(flops.n_params_total), static_cast<long long>(flops.n_params_matmul),
              dtype_name(t.dtype).c_str(), backend->name().c_str());
  std::printf("  data %s: %lld train tokens, vocab %lld%s\n", config.data.dir.c_str(),
              static_cast<long long>(train_data.size()), static_cast<long long>(train_data.vocab_size()),
              val_data ? "" : " (no held-out split: no eval loss)");
  std::printf("  memory: parameters %.1f MiB, gradients %.1f MiB, optimizer state %.1f MiB, activations %.1f MiB\n",
              mib(param_bytes), mib(trainer.grads().flat().bytes()), mib(2 * param_bytes),
              mib(trainer.model().activation_bytes()));
  std::printf("  %.3g model FLOPs/token; MFU against %.3f TFLOP/s (%s)\n", flops.model_flops_per_token,
              peak.flops / 1e12, peak.source.c_str());
  if (trainer.step() > 0) std::printf("  resuming from %s at step %lld\n", options.resume_dir.c_str(), static_cast<long long>(trainer.step()));
  std::fflush(stdout);

  std::ofstream metrics;
  if (!t.metrics.empty()) {
    if (fs::path(t.metrics).has_parent_path()) fs::create_directories(fs::path(t.metrics).parent_path());
    metrics.open(t.metrics, trainer.step() > 0 ? std::ios::app : std::ios::trunc);
    check(metrics.good(), "cannot write metrics file ", t.metrics);
    metrics << json{{"event", "start"}, {"step", trainer.step()}, {"config", config.json},
                    {"n_params", flops.n_params_total}, {"model_flops_per_token", flops.model_flops_per_token},
                    {"peak_flops", peak.flops}, {"peak_source", peak.source}}.dump() << "\n";
  }

  const data::BatchLoader loader(train_data, t.seq_len, t.seed);
  std::optional<data::BatchLoader> val_loader;
  if (val_data) val_loader.emplace(*val_data, t.seq_len, t.seed);
  auto save = [&]() {
    if (options.save_dir.empty()) return;
    ckpt::save_checkpoint(options.save_dir, *backend, trainer.params(), &trainer.optimizer(),
                          {trainer.step(), t.dtype, config.json});
  };

  TrainSummary summary;
  double total_seconds = 0;
  int64_t total_tokens = 0;
  const int64_t first_step = trainer.step();
  const int64_t stop_step = options.exit_after > 0 ? std::min(t.steps, first_step + options.exit_after) : t.steps;
  while (trainer.step() < stop_step) {
    const StepResult r = trainer.train_step(loader.samples(trainer.step() * t.batch_size, t.batch_size));
    total_seconds += r.seconds;
    total_tokens += r.tokens;
    const double tok_s = r.tokens / r.seconds;
    const double step_mfu = mfu(flops.model_flops_per_token * static_cast<double>(r.tokens), r.seconds, peak.flops);
    if (r.step == first_step) summary.first_loss = r.loss;
    summary.final_loss = r.loss;
    json record = {{"step", r.step}, {"loss", r.loss}, {"lr", r.lr}, {"grad_norm", r.grad_norm},
                   {"tokens", (r.step + 1) * r.tokens}, {"step_seconds", r.seconds}, {"tokens_per_second", tok_s},
                   {"mfu", step_mfu}};
    const bool last = trainer.step() == t.steps;
    if (val_loader && ((t.eval_every > 0 && trainer.step() % t.eval_every == 0) || last)) {
      summary.final_val_loss = evaluate(trainer, *val_loader, t.eval_batches);
      record["val_loss"] = summary.final_val_loss;
    }
    if (r.step % t.log_every == 0 || last) {
      std::printf("step %5lld/%lld | loss %.4f | lr %.2e | grad norm %.4f | %8.0f tok/s | MFU %5.2f%%",
                  static_cast<long long>(r.step + 1), static_cast<long long>(t.steps), r.loss, r.lr, r.grad_norm,
                  tok_s, 100.0 * step_mfu);
      if (record.contains("val_loss")) std::printf(" | val loss %.4f", summary.final_val_loss);
      std::printf("\n");
      std::fflush(stdout);
    }
    if (metrics.is_open()) metrics << record.dump() << "\n" << std::flush;
    if (t.save_every > 0 && trainer.step() % t.save_every == 0 && !last) save();
  }
  save();
  summary.steps = trainer.step() - first_step;
  summary.seconds = total_seconds;
  summary.tokens_per_second = total_seconds > 0 ? total_tokens / total_seconds : 0;
  summary.mfu = mfu(flops.model_flops_per_token * static_cast<double>(total_tokens), total_seconds, peak.flops);
  return summary;
}

}  // namespace tripod
