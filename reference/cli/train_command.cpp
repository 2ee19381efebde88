// tripod train --config PRESET_OR_FILE [--set key=value]... [--save ROOT] [--resume PATH|auto]
//              [--tp N --pp N --dp N --zero S --bucket-mb X --grid-order tp-dp-pp]
//              [--schedule afab|1f1b|interleaved --microbatches M --virtual-stages V
//               --pipeline-split 2,1,1|auto --pipeline-trace FILE] [--backend cpu|emulated]
// Options become a RunConfig and a ParallelLayout; train/train_job.h runs them.
#include "cli/commands.h"
#include "core/error.h"
#include "data/token_dataset.h"
#include "parallel/pipeline_split.h"
#include "train/train_job.h"

namespace tripod::cli {
namespace {

struct TrainCommandOptions {
  std::string config = "tiny";
  std::vector<std::string> overrides;
  TrainJob job;
  double bucket_mb = 4.0;
  std::string schedule = "1f1b", pipeline_split;
  int microbatches = 0;  // 0: train.micro_batches from the config
  std::string slow_rank;  // --slow-rank RANK:MS
};

// "1:50" -> rank 1, 50 ms.
void parse_slow_rank(const std::string& text, TrainOptions& options) {
  if (text.empty()) return;
  const auto colon = text.find(':');
  std::size_t used_rank = 0, used_ms = 0;
  try {
    check(colon != std::string::npos, "");
    options.slow_rank = std::stoi(text.substr(0, colon), &used_rank);
    options.slow_rank_ms = std::stod(text.substr(colon + 1), &used_ms);
  } catch (const std::exception&) {
    used_rank = 0;
  }
  check(colon != std::string::npos && used_rank == colon && used_ms == text.size() - colon - 1 &&
            options.slow_rank >= 0 && options.slow_rank_ms >= 0,
        "--slow-rank: '", text, "' is not RANK:MILLISECONDS (e.g. 1:50)");
}

RunConfig command_config(const TrainCommandOptions& o) {
  std::vector<std::string> overrides = o.overrides;
  if (o.microbatches != 0) overrides.push_back("train.micro_batches=" + std::to_string(o.microbatches));
  if (!o.pipeline_split.empty() && o.pipeline_split != "auto") {  // "3,1" -> train.pipeline_split=[3,1]
    std::string list;
    for (int64_t n : parse_pipeline_split(o.pipeline_split)) list += (list.empty() ? "" : ",") + std::to_string(n);
    overrides.push_back("train.pipeline_split=[" + list + "]");
  }
  RunConfig config = parse_run_config(load_config_json(o.config, overrides));
  if (o.pipeline_split == "auto") {  // balanced by FLOPs, once the vocabulary is known
    if (config.model.vocab_size == 0)
      resolve_vocab(config, data::TokenDataset::open(config.data.dir, "train").vocab_size(), config.data.dir);
    config.train.pipeline_split =
        balanced_pipeline_split(config.model, config.train.seq_len, o.job.layout.pp * o.job.layout.virtual_stages);
    config.json["train"]["pipeline_split"] = config.train.pipeline_split;
  }
  return config;
}

void run_train_command(TrainCommandOptions o) {
  TrainJob& job = o.job;
  job.config = command_config(o);
  parse_slow_rank(o.slow_rank, job.options);
  ParallelLayout& l = job.layout;
  l.micro_batches = static_cast<int>(job.config.train.micro_batches);
  l.recompute = job.config.train.recompute;
  l.schedule = parse_schedule_kind(o.schedule);
  l.bucket_bytes = ParallelLayout::bucket_bytes_from_mib(o.bucket_mb);
  // A padded vocabulary is stored as a (one-rank) TP shard: the distributed trainer's work.
  job.parallel = l.dp > 1 || l.zero != 0 || l.tp != 1 || l.pp != 1 || l.vocab_multiple != 1;
  run_train_job(job);
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "train a GPT on a prepared token directory");
  auto o = std::make_shared<TrainCommandOptions>();
  ParallelLayout& l = o->job.layout;
  l.dp = 0;  // from the world
  cmd->add_option("-c,--config", o->config, "preset name (tiny, small, gpt2-124m) or JSON config file")
      ->capture_default_str();
  cmd->add_option("--set", o->overrides, "override a config key, e.g. --set train.steps=50 (repeatable)");
  cmd->add_option("--save", o->job.options.save_dir,
                  "checkpoint root: a sharded checkpoint (ROOT/step-N, ROOT/latest) at the end, every "
                  "train.save_every steps and on SIGTERM/SIGINT/SIGHUP; the newest train.keep_checkpoints are kept");
  cmd->add_option("--save-local", o->job.options.save_local_dir,
                  "a fast second checkpoint root (node-local disk, burst buffer) saved to every "
                  "train.local_save_every steps between --save's saves; every rank must see it");
  cmd->add_option("--resume", o->job.options.resume_dir,
                  "continue from this checkpoint (a step directory, or a root's latest), saved under any layout; "
                  "'auto': from the newest of --save's and --save-local's if there is one, else from step 0");
  cmd->add_flag("--allow-resume-changes", o->job.options.allow_resume_changes,
                "resume even though the seed, batch size, sequence length, data or learning-rate schedule changed");
  cmd->add_option("--exit-after", o->job.options.exit_after,
                  "stop after N steps of this invocation (checkpointing to --save), as if interrupted");
  cmd->add_option("--exit-after-minutes", o->job.options.exit_after_minutes,
                  "stop after the first step that ends M minutes after start-up (checkpointing to --save; every "
                  "rank agrees), e.g. a few minutes before a batch job's time limit; exit 0");
  cmd->add_option("--slow-rank", o->slow_rank,
                  "testing aid: RANK:MS makes world rank RANK sleep MS milliseconds in every step (a straggler for"
                  " the per-rank timing report, or with a large MS a stalled rank for --comm-timeout)");
  cmd->add_option("--tp", l.tp, "tensor-parallel size")->capture_default_str();
  cmd->add_option("--pp", l.pp, "pipeline-parallel size")->capture_default_str();
  // 0 is "not given" inside; given, it must be positive (--dp 0 trained with the derived size).
  require_positive(cmd->add_option("--dp", l.dp, "data-parallel size (default: ranks / (tp * pp))"));
  cmd->add_option("--zero", l.zero, "ZeRO stage 0, 1, 2 or 3")->capture_default_str();
  cmd->add_flag("--sequence-parallel", l.sequence_parallel, "with --tp: split LayerNorm regions along the sequence");
  cmd->add_option("--bucket-mb", o->bucket_mb, "gradient bucket size in MiB")->capture_default_str();
  cmd->add_option("--zero3-prefetch", l.zero3_prefetch, "ZeRO-3: parameter buckets gathered ahead of use (0: on use)")
      ->capture_default_str();
  // (--zero3-gather-fp32: its name while only ZeRO-3 gathered the weights as bf16)
  cmd->add_flag("--gather-fp32,--zero3-gather-fp32", l.fp32_param_gathers,
                "ZeRO 1-3 under bf16-mixed: gather the GEMM weights in fp32 too (the same bits, twice the bytes)");
  cmd->add_flag("--overlap-param-gather", l.overlap_param_gather,
                "ZeRO-1/2: leave the step's parameter all-gathers in flight until the next forward reaches each "
                "bucket (as Megatron's flag; all of a step's bf16 gather buffers live at once)");
  cmd->add_option("--grid-order", l.grid_order, "rank order of the grid axes, fastest first")->capture_default_str();
  cmd->add_option("--schedule", o->schedule, "pipeline schedule: afab (GPipe), 1f1b or interleaved")
      ->capture_default_str();
  require_positive(
      cmd->add_option("--microbatches", o->microbatches, "micro-batches per step (default: train.micro_batches)"));
  cmd->add_option("--virtual-stages", l.virtual_stages, "model chunks per pipeline rank (interleaved schedule)")
      ->capture_default_str();
  cmd->add_option("--pipeline-split", o->pipeline_split,
                  "layers per chunk, e.g. 2,1,1 (sets train.pipeline_split; default: even), or auto: balanced by "
                  "FLOPs with the LM head counted");
  cmd->add_option("--receives-ahead", l.receives_ahead,
                  "pipeline: receives posted ahead of the action that needs them (0: each blocks when it comes)")
      ->capture_default_str();
  cmd->add_option("--make-vocab-size-divisible-by", l.vocab_multiple,
                  "pad each tensor-parallel rank's vocabulary rows (embedding, LM head, logits) to a multiple of N, "
                  "as Megatron-LM's option of this name (e.g. 128: GPT-2's 50257 -> 50304 at tp=1); the padding "
                  "is never a token nor in the softmax, and checkpoints keep the real vocabulary")
      ->capture_default_str();
  // Checked now: a path that cannot be written failed after the whole run, on rank 0 alone.
  add_output_option(*cmd, "--pipeline-trace", o->job.pipeline_trace,
                    "write the last step's pipeline timeline (every action's start and end per rank) as JSON here");
  add_backend_option(*cmd, o->job.backend);
  add_comm_options(*cmd, o->job.comm);
  cmd->callback([o]() { run_train_command(*o); });
}

}  // namespace tripod::cli
