// tripod train --config PRESET_OR_FILE [--set key=value]... [--save DIR] [--resume DIR]
#include <cstdio>

#include "cli/commands.h"
#include "train/train_loop.h"

namespace tripod::cli {

void add_train_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "train a GPT on a prepared token directory");
  struct Options {
    std::string config = "tiny";
    std::vector<std::string> overrides;
    TrainOptions train;
  };
  auto opts = std::make_shared<Options>();
  cmd->add_option("-c,--config", opts->config, "preset name (tiny, small, gpt2-124m) or JSON config file")
      ->capture_default_str();
  cmd->add_option("--set", opts->overrides, "override a config key, e.g. --set train.steps=50 (repeatable)");
  cmd->add_option("--save", opts->train.save_dir, "write a checkpoint directory here at the end of the run");
  cmd->add_option("--resume", opts->train.resume_dir, "continue from this checkpoint directory");
  cmd->add_option("--exit-after", opts->train.exit_after,
                  "stop after N steps of this invocation (checkpointing to --save), as if interrupted");
  cmd->callback([opts]() {
    RunConfig config = parse_run_config(load_config_json(opts->config, opts->overrides));
    TrainSummary s = run_training(config, opts->train);
    std::printf("done: %lld steps, loss %.4f -> %.4f", static_cast<long long>(s.steps), s.first_loss, s.final_loss);
    if (s.final_val_loss >= 0) std::printf(", val loss %.4f", s.final_val_loss);
    std::printf(", %.0f tok/s, MFU %.2f%%, %.1f s\n", s.tokens_per_second, 100 * s.mfu, s.seconds);
  });
}

}  // namespace tripod::cli
