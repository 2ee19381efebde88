// What `tripod data inspect` reports on a prepared directory: its metadata, every shard verified
// (size, checksum, token range) and counted per split, and the first train tokens decoded.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tripod::data {

struct SplitReport {
  std::string name;
  std::size_t shards = 0;
  uint64_t tokens = 0;
};

struct InspectReport {
  nlohmann::json meta;
  std::vector<SplitReport> splits;  // every shard of each verified
  std::size_t preview_tokens = 0;   // how many train tokens `preview` decodes (0: no tokenizer)
  std::string preview;
};

// Throws naming the shard that fails verification.
InspectReport inspect_dataset(const std::filesystem::path& dir, std::size_t preview_tokens = 200);

}  // namespace tripod::data
