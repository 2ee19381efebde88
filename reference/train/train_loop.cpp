#include "train/train_loop.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <thread>

#include "backend/backend.h"
#include "ckpt/checkpoint_root.h"
#include "comm/core_sharing.h"
#include "comm/host_collectives.h"
#include "comm/rank_errors.h"
#include "core/build_info.h"
#include "core/wall_clock.h"
#include "data/batch_loader.h"
#include "data/token_dataset.h"
#include "perf/backend_peak.h"
#include "perf/flops.h"
#include "process/child_process.h"
#include "train/checkpointing.h"
#include "train/diverged_state.h"
#include "train/fault_injection.h"
#include "train/gpu_health_log.h"
#include "train/metrics_log.h"
#include "train/pipeline_report.h"
#include "train/rank_timing.h"
#include "train/run_checkpoints.h"
#include "train/trainer.h"
#include "train/world_peak.h"

namespace tripod {
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

struct Datasets {
  data::TokenDataset train;
  std::optional<data::TokenDataset> val;  // absent: the data has no held-out split
};

Datasets open_datasets(RunConfig& config) {
  Datasets d{data::TokenDataset::open(config.data.dir, "train"), std::nullopt};
  resolve_vocab(config, d.train.vocab_size(), config.data.dir);
  const json meta = d.train.meta();
  if (meta.contains("splits") && meta["splits"].contains("val") && !meta["splits"]["val"].empty())
    d.val.emplace(data::TokenDataset::open(config.data.dir, "val"));
  return d;
}

// Every rank reads its batches from its own copy of data.dir (node-local disks are common): a rank
// whose copy held another corpus (a stale copy, another version) trained on other tokens than its
// peers without a word. Collective; every rank fails alike, naming the ranks that differ from rank 0.
void check_every_rank_reads_one_corpus(Communicator& world, const Datasets& data) {
  // The held-out split too: each data-parallel rank evaluates its rows of every batch, so a copy
  // with another held-out split (or none) gave a validation loss over two corpora without a word.
  const std::vector<std::string> train = all_gather_text(world, data.train.tokens_xxh64());
  const std::vector<std::string> val = all_gather_text(world, data.val ? data.val->tokens_xxh64() : "none");
  auto check_split = [&](const std::vector<std::string>& digests, const char* which) {
    std::string differing;
    for (std::size_t r = 1; r < digests.size(); ++r)
      if (digests[r] != digests[0]) differing += str_cat(differing.empty() ? "" : ", ", "rank ", r, " has ", digests[r]);
    TRIPOD_CHECK(differing.empty(), "the ranks read different ", which, " tokens from data.dir ", data.train.dir().string(),
                 ": rank 0's have XXH64 ", digests[0], "; ", differing,
                 " (each rank reads its own copy: make every node's copy the same corpus)");
  };
  check_split(train, "training");
  check_split(val, "held-out");
}

// Mean validation loss over the first `batches` global batches of the held-out split.
double evaluate(TrainingEngine& engine, const data::BatchLoader& val, int64_t batch_size, int64_t batches) {
  double sum = 0;
  for (int64_t i = 0; i < batches; ++i) sum += engine.eval_loss(val.samples(i * batch_size, batch_size));
  return batches > 0 ? sum / static_cast<double>(batches) : 0.0;
}

// The tokens of the steps before a checkpoint: its manifest's count. Checkpoints written before
// 2026-12-08 record none; their steps are counted at the checkpoint's own batch and context.
int64_t tokens_trained_at(const ckpt::Manifest& m) {
  return m.data.tokens_trained >= 0 ? m.data.tokens_trained : m.step * m.data.batch_size * m.data.seq_len;
}

// Prints every rank's memory (gathered to all ranks; rank 0 prints). ZeRO's and the pipeline's
// parts of the transient column (buckets, message buffers) are the peaks so far, so at start-up
// they are 0 (`tripod bench layouts` and the suites measure them in use).
void print_memory(const MemoryReport& m, Communicator* world, bool root) {
  const int n = world ? world->size() : 1;
  const std::vector<double> mine = {double(m.params), double(m.grads), double(m.optimizer), double(m.activations),
                                    double(m.transient)};
  const std::vector<double> all = world ? all_gather_values(*world, mine) : mine;
  if (!root) return;
  std::printf("  memory per rank (MiB): %6s %10s %10s %10s %11s %10s\n", "rank", "params", "grads", "optimizer",
              "activations", "transient");
  for (int r = 0; r < n; ++r) {
    const double* v = all.data() + 5 * r;
    std::printf("  %22d %10.2f %10.2f %10.2f %11.2f %10.2f\n", r, mib(v[0]), mib(v[1]), mib(v[2]), mib(v[3]), mib(v[4]));
  }
}

// The held-out windows are taken in one order whatever train.seed is. Keyed by train.seed, a sweep's
// seeds were compared by eval losses measured on different subsets of the split whenever
// train.eval_batches x train.batch_size windows were fewer than the split holds. 1234 is train.seed's
// default, so a run with the default seed evaluates on the windows it always did.
constexpr uint64_t kHeldOutOrderSeed = 1234;

// One training run as the loop sees it: the engine, the data, the FLOP accounting and the outputs.
class TrainingRun {
 public:
  TrainingRun(RunConfig config, const TrainOptions& options, Backend& backend, const ParallelRun* parallel)
      : config_(std::move(config)), options_(options), backend_(backend), parallel_(parallel),
        root_(!parallel || parallel->world->rank() == 0), ranks_(parallel ? parallel->world->size() : 1),
        data_(open_datasets(config_)), flops_(count_flops(config_.model, config_.train.seq_len)),
        peak_(backend_peak(backend_.name(), gemm_peak_precision(config_.train), config_.train.peak_tflops)) {
    // Every rank fails alike: each reports before any aborts the job (an abort raced the others'
    // reports, and a rank's line was lost now and then).
    if (parallel_)
      check_on_every_rank(*parallel_->world, [&] { check_every_rank_reads_one_corpus(*parallel_->world, data_); });
    // Before anything is written: a split too short for one sequence was found after the metrics'
    // start record and the rollback policy's first checkpoint, which then refused the rerun.
    const TrainSettings& t = config_.train;
    loader_.emplace(data_.train, t.seq_len, t.seed);
    // train.eval_batches = 0 turns evaluation off (a mean over no batches is not a loss of 0).
    if (data_.val && t.eval_batches > 0) val_loader_.emplace(*data_.val, t.seq_len, kHeldOutOrderSeed);
    // A straggler that never sleeps would let a test of the rank report pass for the wrong reason.
    TRIPOD_CHECK(options_.slow_rank < 0 || (parallel_ && options_.slow_rank < ranks_), "--slow-rank ",
                 options_.slow_rank, ": ",
                 parallel_ ? "the job's ranks are 0 to " + std::to_string(ranks_ - 1)
                           : std::string("a single-process run has no rank to slow down"));
    world_peak_ = world_peak(world(), backend_, peak_, t.peak_tflops > 0);
    make_engine();
    engine_->initialise();
    checkpoints_.emplace(config_, options_, backend_, world(), root_, *engine_, [this] { return checkpoint_meta(); });
    checkpoints_->prepare();
    resume();
  }

  TrainSummary run() {
    print_start();
    engine_->reserve_activations();
    print_memory(engine_->memory(), parallel_ ? parallel_->world : nullptr, root_);
    open_metrics();
    keep_a_checkpoint_to_roll_back_to();
    const TrainSettings& t = config_.train;
    const data::BatchLoader& loader = *loader_;
    const int64_t first_step = engine_->step();
    const int64_t stop = options_.exit_after > 0 ? std::min(t.steps, first_step + options_.exit_after) : t.steps;
    // With --save, SIGTERM/SIGINT/SIGHUP finish the step, save and stop (agreed by every rank).
    std::optional<process::InterruptScope> interrupts;
    if (checkpoints_->enabled()) interrupts.emplace();
    while (engine_->step() < stop) {
      maybe_inject_fault(FaultPoint::StepStart, world_rank(), engine_->step() + 1);
      if (root_) gpu_health_.step_begin();  // before the timer: NVML's reading is no part of the step
      rank_timer_.step_begin();
      if (parallel_ && world_rank() == options_.slow_rank)
        std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(options_.slow_rank_ms));
      std::optional<double> judged_loss;  // an injected loss fault's value, which the record must show too
      StepResult r = engine_->train_step(loader.samples(next_sample_, t.batch_size), [&](double loss, double norm) {
        checkpoints_->before_update();
        judged_loss = maybe_inject_loss_fault(engine_->step() + 1, loss);
        return guard_.judge(*judged_loss, norm);
      });
      // TRIPOD_FAULT=nan-loss recorded the true loss beside "the loss is nan": a script saw both.
      if (judged_loss) r.loss = *judged_loss;
      next_sample_ += t.batch_size;
      if (r.verdict == StepVerdict::Apply && maybe_inject_update_fault(world_rank(), engine_->step()))
        check(overflow_first_saved_parameter(backend_, engine_->state_regions()), "TRIPOD_FAULT=inf-update: rank ",
              world_rank(), " writes no parameter to a checkpoint (its parameters are replicas of other ranks'); "
              "name a rank that does, such as rank 0");
      rank_timer_.step_end();
      if (root_) gpu_health_.step_end();  // before any evaluation: the energy is the step's alone
      // Decided before the update is judged: a run that ends now saves now, and that save is checked.
      const bool interrupted = interrupts && any_rank(interrupts->interrupted());
      const bool time_is_up = !interrupted && out_of_time();
      judge_the_update_before_a_save(r, stop, /*ends_the_run=*/interrupted || time_is_up);
      record_step(r, first_step);
      if (r.verdict == StepVerdict::Rollback) {
        roll_back(r);  // the run's state is its last checkpoint's, which the save below keeps
        if (!interrupted && !time_is_up) continue;
      } else {
        record_rank_times(engine_->step() == stop);
      }
      if (interrupted) {
        const std::filesystem::path saved = checkpoints_->save_now();
        fail("interrupted by a signal after step ", engine_->step(), "/", t.steps, ": checkpoint saved to ",
             saved.string(), "; continue with --resume ", options_.save_dir);
      }
      if (time_is_up) {  // to the final save, as at train.steps
        if (root_) {
          std::printf("stopping after step %lld: --exit-after-minutes %g reached (%.2f minutes since start-up)\n",
                      static_cast<long long>(engine_->step()), options_.exit_after_minutes, seconds_since(started_) / 60);
          std::fflush(stdout);
        }
        break;
      }
      checkpoints_->after_step(engine_->step() == stop);
    }
    checkpoints_->save_now();
    if (root_ && rank_times_) std::printf("  %s\n", describe_rank_times(*rank_times_).c_str());
    if (distributed_ && engine_->step() > first_step && distributed_->schedule().stages > 1)
      report_pipeline(*distributed_, root_, parallel_->pipeline_trace);
    summary_.steps = engine_->step() - first_step;
    summary_.seconds = seconds_;
    summary_.tokens_per_second = seconds_ > 0 ? static_cast<double>(tokens_) / seconds_ : 0;
    summary_.mfu = mfu(flops_.model_flops_per_token * static_cast<double>(tokens_), seconds_, world_peak_.flops);
    return summary_;
  }

 private:
  void make_engine() {
    if (!parallel_) {
      engine_ = std::make_unique<Trainer>(config_, backend_);
      return;
    }
    auto trainer = std::make_unique<DistributedTrainer>(config_, backend_, *parallel_->grid, parallel_->layout);
    distributed_ = trainer.get();
    engine_ = std::move(trainer);
  }

  std::string layout_text() const { return parallel_ ? parallel_->layout.describe() : "single process"; }

  void print_start() const {
    if (!root_) return;
    const TrainSettings& t = config_.train;
    std::printf("tripod train: %lld parameters (%lld in matmuls), %s, backend %s, %s\n",
                static_cast<long long>(flops_.n_params_total), static_cast<long long>(flops_.n_params_matmul),
                precision_name(t).c_str(), backend_.name().c_str(), layout_text().c_str());
    std::printf("  data %s: %lld train tokens, vocab %lld%s\n", config_.data.dir.c_str(),
                static_cast<long long>(data_.train.size()), static_cast<long long>(data_.train.vocab_size()),
                !data_.val ? " (no held-out split: no eval loss)"
                : t.eval_batches == 0 ? " (train.eval_batches = 0: no eval loss)" : "");
    std::printf("  %.3g model FLOPs/token; MFU against %s (%s)\n", flops_.model_flops_per_token,
                world_peak_.text.c_str(), peak_.source.c_str());
    const std::string declined =
        backend_.attention_declined(t.dtype, t.seq_len, config_.model.d_model, config_.model.n_head);
    if (!declined.empty()) std::printf("  note: %s\n", declined.c_str());
    // The evaluation reads eval_batches x batch_size windows: past the split's, windows come round
    // again from the next epoch's order, some counted twice, and the val loss moves with batch_size.
    if (val_loader_ && t.eval_batches * t.batch_size > val_loader_->num_windows())
      std::printf("  note: the held-out split has %lld windows of %lld tokens, fewer than train.eval_batches x "
                  "train.batch_size = %lld: the evaluation counts some of them twice (fewer eval batches, or a "
                  "larger split, measure each once)\n",
                  static_cast<long long>(val_loader_->num_windows()), static_cast<long long>(t.seq_len),
                  static_cast<long long>(t.eval_batches * t.batch_size));
    if (config_.schedule.warmup_steps > t.steps)
      std::printf("  note: optim.warmup_steps %lld > train.steps %lld: the run ends in its warm-up (LR %.3g at the "
                  "last step, never optim.lr %.3g; no decay)\n", static_cast<long long>(config_.schedule.warmup_steps),
                  static_cast<long long>(t.steps), config_.schedule.at(t.steps - 1), config_.schedule.max_lr);
    else if (config_.schedule.warmup_steps == t.steps)
      std::printf("  note: optim.warmup_steps %lld = train.steps: the warm-up reaches optim.lr at the last step, and "
                  "the run has no decay\n", static_cast<long long>(t.steps));
    if (t.recompute == Recompute::Selective)
      std::printf("  selective activation recomputation: attention probabilities and GELU outputs recomputed in "
                  "backward (MFU counts model FLOPs, not the recomputed ones)\n");
    if (t.recompute == Recompute::Full)
      std::printf("  full activation recomputation: each block's forward rerun in backward from its input (MFU counts "
                  "model FLOPs, not the recomputed ones)\n");
    if (parallel_ && parallel_->layout.dp > 1 && parallel_->layout.pp == 1 && config_.model.tie_embeddings &&
        t.split_tied_grad)
      std::printf("  tied wte's gradient reduced over DP in two parts: the LM head's during backward, the lookup's "
                  "token rows after it (train.split_tied_grad)\n");
    if (parallel_ && parallel_->layout.dp > 1 && !config_.model.tie_embeddings && t.split_tied_grad)
      std::printf("  untied wte's gradient reduced over DP as the batches' token rows only%s (train.split_tied_grad)\n",
                  parallel_->layout.zero <= 1 && t.micro_batches > 1 ? " (not with ZeRO 0-1 and micro-batches: "
                                                                       "they accumulate in the whole table)"
                                                                     : "");
    if (parallel_ && gathers_gemm_weights_as_bf16(parallel_->layout, t)) {
      int64_t weights = 0;
      for (const ParamSpec& spec : gpt_param_specs(config_.model))
        if (is_gemm_operand_only(spec.role)) weights += shape_numel(spec.shape);
      std::printf("  ZeRO-%d gathers the GEMM weights as bf16%s: %lld of %lld parameters, the same bits for half "
                  "their bytes (--gather-fp32 for fp32)\n",
                  parallel_->layout.zero, parallel_->layout.zero == 3 ? "" : " after each step",
                  static_cast<long long>(weights), static_cast<long long>(flops_.n_params_total));
    }
    if (const std::string health = gpu_health_.startup_line(); !health.empty()) std::printf("  %s\n", health.c_str());
    if (const auto share = process_core_share(); share && parallel_)
      std::printf("  threads: %s\n", describe(*share).c_str());  // the words conform prints too
    if (!resumed_from_.empty())
      std::printf("  resuming from %s at step %lld (next sample %lld)\n", resumed_from_.c_str(),
                  static_cast<long long>(engine_->step()), static_cast<long long>(next_sample_));
  }

  void open_metrics() {
    if (!root_ || config_.train.metrics.empty()) return;
    metrics_.open(config_.train.metrics, /*append=*/engine_->step() > 0);
    write_metrics(json{{"event", "start"}, {"step", engine_->step()}, {"build", build_info_json()},
                       {"config", config_.json}, {"ranks", ranks_},
                       {"layout", layout_text()}, {"n_params", flops_.n_params_total},
                       {"model_flops_per_token", flops_.model_flops_per_token}, {"peak_flops", world_peak_.flops},
                       {"peak_source", peak_.source}});
  }

  void write_metrics(const json& record) { metrics_.write(record, engine_->step()); }

  void record_step(const StepResult& r, int64_t first_step) {
    const TrainSettings& t = config_.train;
    seconds_ += r.seconds;
    tokens_ += r.tokens;
    ++summary_.steps_taken;
    const double tok_s = static_cast<double>(r.tokens) / r.seconds;
    const double step_mfu = mfu(flops_.model_flops_per_token * static_cast<double>(r.tokens), r.seconds, world_peak_.flops);
    if (r.verdict == StepVerdict::Apply) {  // an anomalous loss is not the run's
      // The first applied step's, not the first step's: a skipped first step printed "loss 0.0000 -> ...".
      if (summary_.steps_applied++ == 0) summary_.first_loss = r.loss;
      summary_.final_loss = r.loss;
    }
    json record = {{"step", r.step}, {"loss", r.loss}, {"lr", r.lr}, {"grad_norm", r.grad_norm},
                   {"tokens", tokens_trained_ += r.tokens}, {"step_seconds", r.seconds}, {"tokens_per_second", tok_s},
                   {"mfu", step_mfu}};
    const bool last = engine_->step() == t.steps;
    // A rolled-back step left the state of the checkpoint it went back to, whose step is not advanced:
    // evaluating it again (at a step eval_every divides) measured an unchanged model at a step that
    // is no evaluation step.
    if (val_loader_ && r.verdict != StepVerdict::Rollback &&
        ((t.eval_every > 0 && engine_->step() % t.eval_every == 0) || last)) {
      summary_.final_val_loss = evaluate(*engine_, *val_loader_, t.batch_size, t.eval_batches);
      record["val_loss"] = summary_.final_val_loss;
    }
    // Every log_every-th step as the log counts them (from 1), as eval_every and save_every count:
    // the line of an evaluation is printed (counted from 0, the two never met, and no val loss
    // before the last reached the console); also the run's first step and its last.
    if (root_ && ((r.step + 1) % t.log_every == 0 || r.step == first_step || last || record.contains("val_loss"))) {
      std::printf("step %5lld/%lld | loss %.4f | lr %.2e | grad norm %.4f | %8.0f tok/s | MFU %5.2f%%",
                  static_cast<long long>(r.step + 1), static_cast<long long>(t.steps), r.loss, r.lr, r.grad_norm,
                  tok_s, 100.0 * step_mfu);
      if (record.contains("val_loss")) std::printf(" | val loss %.4f", summary_.final_val_loss);
      std::printf("\n");
      std::fflush(stdout);
    }
    if (r.verdict != StepVerdict::Apply) {
      record["anomaly"] = r.anomaly;
      record["update"] = r.verdict == StepVerdict::Skip ? "skipped" : "rolled back";
      if (root_ && r.verdict == StepVerdict::Skip)
        std::printf("  step %lld: %s: update skipped (anomaly %lld of at most %lld)\n", static_cast<long long>(r.step + 1),
                    r.anomaly.c_str(), static_cast<long long>(guard_.anomalies()),
                    static_cast<long long>(config_.anomaly.max));
    }
    if (root_) gpu_health_.add_to(record, r.tokens, ranks_);
    write_metrics(record);
    // The guard judged the step's loss and gradients, not its update, which can overflow with both
    // finite (fp32 at a learning rate of 1e39): the validation loss is the first to see that, and
    // after the last step nothing else did - the run printed "val loss -nan", then "done", exit 0.
    // Under rollback the next step's loss, or the state's check before a save, rolls back.
    if (record.contains("val_loss") && config_.anomaly.policy != AnomalyPolicy::Rollback &&
        any_rank(!std::isfinite(summary_.final_val_loss)))
      fail("step ", r.step + 1, ": the validation loss is ", summary_.final_val_loss,
           " after this step's update (training diverged)");
  }

  // --exit-after-minutes: whether the time is up after this step. The ranks' clocks read a little
  // apart, so they agree on it (one all-reduce of a flag a step, only with the option).
  bool out_of_time() const {
    if (options_.exit_after_minutes <= 0) return false;
    return any_rank(seconds_since(started_) / 60 >= options_.exit_after_minutes);
  }

  int world_rank() const { return parallel_ ? parallel_->world->rank() : 0; }
  Communicator* world() const { return parallel_ ? parallel_->world : nullptr; }
  bool any_rank(bool mine) const {
    return world() ? all_reduce_value(*world(), mine ? 1.0 : 0.0, ReduceOp::Max) > 0 : mine;
  }

  // --resume: every rank loads what it holds from the checkpoint, whatever layout wrote it.
  void resume() {
    const auto loaded = checkpoints_->resume();
    arm_fault_injection(/*resumed=*/loaded.has_value(),
                        {world() ? world()->size() : 1, config_.train.steps,
                         [this](int64_t step) { return checkpoints_->saves_after(step); },
                         checkpoints_->saves_in_background()});
    if (!loaded) return;
    next_sample_ = loaded->manifest.data.next_sample;
    tokens_trained_ = tokens_trained_at(loaded->manifest);
    guard_.restore(loaded->manifest.recent_losses);
    resumed_from_ = loaded->dir.string();
  }

  // anomaly.policy=rollback: a save refuses a state that an update left infinite or NaN with the
  // step's loss and gradients finite (train/diverged_state.h), which stopped the run whatever the
  // policy. Before each save after a step (scheduled, the run's last, or one on a signal or at
  // --exit-after-minutes: `ends_the_run`) the state is checked, and such a step rolls back as an
  // anomalous loss does; an ending run then saves the state it rolled back to.
  void judge_the_update_before_a_save(StepResult& r, int64_t stop, bool ends_the_run) {
    if (config_.anomaly.policy != AnomalyPolicy::Rollback || r.verdict != StepVerdict::Apply) return;
    const int64_t step = engine_->step();
    if (step != stop && !ends_the_run && !checkpoints_->saves_after(step)) return;
    const std::string found = describe_nonfinite_state(backend_, engine_->state_regions(), world());
    if (found.empty()) return;
    const StepJudgement judgement = guard_.judge_applied_update("its update left " + found);
    r.verdict = judgement.verdict;
    r.anomaly = judgement.reason;
    if (judgement.verdict == StepVerdict::Stop) fail("step ", r.step + 1, ": ", judgement.reason, " (training diverged)");
  }

  // anomaly.policy=rollback rolls back to the run's last checkpoint of either tier: one exists from
  // the start (this step's, saved now unless the run resumed from it).
  void keep_a_checkpoint_to_roll_back_to() {
    if (config_.anomaly.policy != AnomalyPolicy::Rollback) return;
    check(checkpoints_->enabled(), "anomaly.policy=rollback rolls back to the run's last checkpoint under --save: "
          "give --save ROOT");
    checkpoints_->save_now();
  }

  // Collective (every rank has the same verdict): reloads the run's last checkpoint and continues the
  // data after the bad batch (plus anomaly.skip_batches), not from the checkpoint's position:
  // replaying those batches would, on this deterministic trainer, reproduce the anomaly.
  void roll_back(const StepResult& r) {
    const RunCheckpoints::Loaded loaded = checkpoints_->load_last_checkpoint();
    const ckpt::Manifest& m = loaded.manifest;
    next_sample_ += config_.anomaly.skip_batches * config_.train.batch_size;
    checkpoints_->record_rollback_position(loaded.dir, next_sample_);
    tokens_trained_ = tokens_trained_at(m);
    guard_.restore(m.recent_losses);  // the accepted losses of the state gone back to
    if (root_) {
      std::printf("  step %lld: %s: rolled back to step %lld (%s); the data continues at sample %lld, skipping "
                  "samples %lld to %lld (anomaly %lld of at most %lld)\n",
                  static_cast<long long>(r.step + 1), r.anomaly.c_str(), static_cast<long long>(m.step),
                  loaded.dir.c_str(), static_cast<long long>(next_sample_),
                  static_cast<long long>(m.data.next_sample), static_cast<long long>(next_sample_ - 1),
                  static_cast<long long>(guard_.anomalies()), static_cast<long long>(config_.anomaly.max));
      std::fflush(stdout);
    }
    write_metrics(json{{"event", "rollback"}, {"step", r.step}, {"to_step", m.step}, {"next_sample", next_sample_}});
  }

  CheckpointMeta checkpoint_meta() const {
    return {engine_->step(), &config_, layout_text(), next_sample_, data_.train.tokens_xxh64(), tokens_trained_,
            engine_->updates(), guard_.recent_losses()};
  }

  // Every train.rank_stats_every steps and at the last one: who worked longest (train/rank_timing.h).
  void record_rank_times(bool last) {
    auto times = rank_timer_.gather_if_due(engine_->step(), last);
    if (!times) return;
    rank_times_ = times;
    write_metrics(rank_times_json(*times));
  }

  // First, so that --exit-after-minutes counts the start-up (data, model, resume) too.
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  RunConfig config_;
  const TrainOptions& options_;
  Backend& backend_;
  const ParallelRun* parallel_;
  bool root_;
  int ranks_;
  Datasets data_;
  FlopCount flops_;
  PeakFlops peak_;        // this rank's
  WorldPeak world_peak_;  // every rank's together, shared hardware counted once
  std::unique_ptr<TrainingEngine> engine_;
  DistributedTrainer* distributed_ = nullptr;  // engine_, when the run is parallel
  std::optional<data::BatchLoader> loader_, val_loader_;  // the training split's; the held-out split's
  MetricsLog metrics_;  // train.metrics, on rank 0
  RankTimer rank_timer_{parallel_ ? parallel_->world : nullptr, config_.train.rank_stats_every};
  std::optional<RankTimes> rank_times_;  // the latest gather
  GpuHealthLog gpu_health_{backend_};
  TrainSummary summary_;
  int64_t next_sample_ = 0;        // global index of the next training sample (layout-independent)
  std::optional<RunCheckpoints> checkpoints_;  // --save, --save-local, --resume
  StepGuard guard_{config_.anomaly};         // the anomaly policy's verdict on each step
  std::string resumed_from_;
  double seconds_ = 0;
  int64_t tokens_ = 0;          // this run's steps' tokens (its throughput)
  int64_t tokens_trained_ = 0;  // the steps' tokens since step 0, across resumes (the metrics' "tokens")
};

}  // namespace

TrainSummary run_training(RunConfig config, const TrainOptions& options, Backend& backend, const ParallelRun* parallel) {
  return TrainingRun(std::move(config), options, backend, parallel).run();
}

}  // namespace tripod
