// tripod data prepare | synthetic | inspect: build and check prepared token directories.
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "data/inspect.h"
#include "data/prepare.h"
#include "data/synthetic_corpus.h"

namespace tripod::cli {
namespace fs = std::filesystem;
namespace {

void add_prepare(CLI::App& data) {
  auto options = std::make_shared<data::PrepareOptions>();
  auto* cmd = data.add_subcommand("prepare", "train a BPE tokenizer on a text file and write token shards");
  cmd->add_option("--input", options->input, "plain-text corpus (UTF-8)")->required();
  cmd->add_option("--out", options->out_dir, "output directory")->required();
  cmd->add_option("--vocab-size", options->vocab_size, "tokenizer vocabulary size")->required();
  auto* fraction = cmd->add_option("--val-fraction", options->val_fraction,
                                   "fraction of tokens held out for validation (the end of the input)")
                       ->capture_default_str();
  cmd->add_option("--val-input", options->val_input,
                  "a held-out text of its own (e.g. documents drawn at random): --input is then all train")
      ->excludes(fraction);
  cmd->add_option("--shard-tokens", options->shard_tokens, "tokens per shard file")->capture_default_str();
  cmd->callback([options] {
    const data::PrepareReport report = data::prepare_text_corpus(*options);
    std::printf("prepared %s -> %s\n", options->input.c_str(), options->out_dir.c_str());
    std::printf("  vocab_size       %d\n", report.vocab_size);
    std::printf("  train tokens     %lld\n", static_cast<long long>(report.train_tokens));
    std::printf("  val tokens       %lld\n", static_cast<long long>(report.val_tokens));
    std::printf("  bytes per token  %.3f\n", report.bytes_per_token);
  });
}

void add_synthetic(CLI::App& data) {
  auto options = std::make_shared<data::SyntheticOptions>();
  auto* cmd = data.add_subcommand("synthetic", "write a Markov-chain corpus whose entropy rate is known exactly");
  cmd->add_option("--out", options->out_dir, "output directory")->required();
  cmd->add_option("--vocab-size", options->vocab_size, "vocabulary size V")->required();
  cmd->add_option("--order", options->order, "Markov order k: 1 (V <= 512) or 2 (V <= 64)")->required();
  cmd->add_option("--tokens", options->tokens, "total tokens (train + val)")->required();
  cmd->add_option("--sharpness", options->sharpness, "standard deviation of the transition logits")
      ->capture_default_str();
  require_non_negative(  // an unsigned option: -1 would wrap to 2^64 - 1
      cmd->add_option("--seed", options->seed, "seed of the chain and of the sampled stream")->capture_default_str());
  cmd->add_option("--val-fraction", options->val_fraction, "fraction of tokens held out for validation")
      ->capture_default_str();
  cmd->add_option("--shard-tokens", options->shard_tokens, "tokens per shard file")->capture_default_str();
  cmd->callback([options] {
    const data::SyntheticReport report = data::write_synthetic_corpus(*options);
    std::printf("synthetic Markov corpus -> %s\n", options->out_dir.c_str());
    std::printf("  vocab_size       %d (order %d, sharpness %g, seed %llu)\n", options->vocab_size,
                options->order, options->sharpness, static_cast<unsigned long long>(options->seed));
    std::printf("  train tokens     %lld\n", static_cast<long long>(report.train_tokens));
    std::printf("  val tokens       %lld\n", static_cast<long long>(report.val_tokens));
    std::printf("  entropy rate     %.6f nats/token (log V = %.6f)\n", report.entropy_rate_nats,
                std::log(static_cast<double>(options->vocab_size)));
  });
}

void add_inspect(CLI::App& data) {
  auto dir = std::make_shared<fs::path>();
  auto* cmd = data.add_subcommand("inspect", "print a prepared directory's metadata and verify every shard");
  cmd->add_option("dir", *dir, "prepared data directory")->required();
  cmd->callback([dir] {
    const data::InspectReport r = data::inspect_dataset(*dir);
    std::printf("%s/meta.json:\n%s\n", dir->c_str(), r.meta.dump(2).c_str());
    for (const data::SplitReport& split : r.splits)
      std::printf("split %-6s %zu shards, %llu tokens, checksums OK\n", split.name.c_str(), split.shards,
                  static_cast<unsigned long long>(split.tokens));
    if (r.preview_tokens > 0)
      std::printf("first %zu train tokens decoded:\n%s\n", r.preview_tokens, r.preview.c_str());
  });
}

}  // namespace

void add_data_commands(CLI::App& app) {
  auto* data = app.add_subcommand("data", "prepare, generate and inspect token shards");
  data->require_subcommand(1);
  add_prepare(*data);
  add_synthetic(*data);
  add_inspect(*data);
}

}  // namespace tripod::cli
