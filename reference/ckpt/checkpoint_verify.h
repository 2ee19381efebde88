// `tripod ckpt verify` and `tripod ckpt info`: what a checkpoint holds, and whether all of it is
// there and intact, without loading it into a model.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

namespace tripod::ckpt {

struct VerifyReport {
  std::filesystem::path dir;  // the checkpoint checked (a root resolves to its latest)
  int files = 0, blocks = 0, tensors = 0;
  uint64_t bytes = 0;
  std::vector<std::string> problems;  // empty: intact
  bool ok() const { return problems.empty(); }
};

// Checks the manifest, every file's size, header and XXH64, every block's XXH64, and coverage:
// each element of each logical tensor's parameters and AdamW moments written exactly once. Collects
// every problem found (each naming the file or tensor) rather than stopping at the first.
// A manifest that cannot be parsed is a single problem.
VerifyReport verify_checkpoint(const std::filesystem::path& path);

// A human-readable description: step, layout, world size, dtype, data position, model, files.
std::string describe_checkpoint(const std::filesystem::path& path);

}  // namespace tripod::ckpt
