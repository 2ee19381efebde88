// tripod ckpt verify PATH | info PATH | upgrade OLD NEW_ROOT
#include <cstdio>

#include "backend/backend_factory.h"
#include "ckpt/checkpoint_verify.h"
#include "cli/commands.h"
#include "train/checkpointing.h"

namespace tripod::cli {

void add_ckpt_commands(CLI::App& app) {
  auto* ckpt = app.add_subcommand("ckpt", "inspect, verify and upgrade checkpoints (tripod train --save ROOT)");
  ckpt->require_subcommand(1);
  auto path = std::make_shared<std::string>();

  auto* verify = ckpt->add_subcommand(
      "verify", "check a checkpoint: manifest, every file's size, header and checksum, every block's checksum, and "
                "that every element of every tensor (parameters, AdamW moments) is written exactly once; exit 1 on any "
                "problem");
  verify->add_option("path", *path, "a checkpoint (step directory) or a checkpoint root (its latest)")->required();
  verify->callback([path] {
    const ckpt::VerifyReport r = ckpt::verify_checkpoint(*path);
    for (const std::string& problem : r.problems) std::printf("PROBLEM: %s\n", problem.c_str());
    std::printf("%s: %s (%d files, %d blocks, %d tensors, %llu bytes)\n", r.dir.string().c_str(),
                r.ok() ? "OK" : "DAMAGED", r.files, r.blocks, r.tensors, static_cast<unsigned long long>(r.bytes));
    if (!r.ok()) fail("checkpoint ", r.dir.string(), " failed verification: ", r.problems.size(), " problem(s)");
  });

  auto* info = ckpt->add_subcommand("info", "what a checkpoint holds: step, layout, data position, model, files");
  info->add_option("path", *path, "a checkpoint (step directory) or a checkpoint root (its latest)")->required();
  info->callback([path] { std::printf("%s", ckpt::describe_checkpoint(*path).c_str()); });

  auto target = std::make_shared<std::string>();
  auto* upgrade = ckpt->add_subcommand("upgrade", "rewrite a version-1 checkpoint (state.json, single process) as a "
                                                  "sharded checkpoint under a new root");
  upgrade->add_option("old", *path, "the version-1 checkpoint directory")->required();
  upgrade->add_option("new_root", *target, "the checkpoint root to write (absent or empty)")->required();
  upgrade->callback([path, target] {
    auto backend = make_backend("cpu");
    const auto dir = upgrade_legacy_checkpoint(*path, *target, *backend);
    std::printf("wrote %s; resume with --resume %s\n", dir.string().c_str(), target->c_str());
  });
}

}  // namespace tripod::cli
