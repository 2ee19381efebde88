// libFuzzer target: the reader of a prepared data directory's meta.json (data/token_dataset.h) on
// arbitrary text. Seeds: meta.json files as `tripod data prepare` and `tripod data synthetic`
// write them (through write_dataset_meta), and one with no splits.
#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>

#include "data/token_dataset.h"
#include "fuzz_support.h"

namespace {

using namespace tripod;
using namespace tripod::data;
using nlohmann::json;

void write_seed(const std::filesystem::path& folder, const std::string& name, const json& meta) {
  const std::filesystem::path staging = folder / (name + ".dir");
  std::filesystem::create_directories(staging);
  write_dataset_meta(staging, meta);
  std::filesystem::rename(staging / "meta.json", folder / (name + ".json"));
  std::filesystem::remove(staging);
}

void write_seeds(const std::filesystem::path& folder) {
  write_seed(folder, "prepared", {{"format", kDatasetFormat}, {"version", kDatasetVersion}, {"vocab_size", 2048},
                                  {"tokenizer", "tokenizer.model"},
                                  {"splits", {{"train", {"train_000000.bin", "train_000001.bin"}},
                                              {"val", {"val_000000.bin"}}}},
                                  {"source", "/data/kjv.txt"}, {"input_bytes", 4332554},
                                  {"bytes_per_token", 3.41}, {"train_tokens", 1200000},
                                  {"val_tokens", 60000}, {"val_fraction", 0.05}});
  write_seed(folder, "synthetic", {{"format", kDatasetFormat}, {"version", kDatasetVersion}, {"vocab_size", 64},
                                   {"tokenizer", nullptr},
                                   {"splits", {{"train", {"train_000000.bin"}}, {"val", {"val_000000.bin"}}}},
                                   {"source", "synthetic-markov"}, {"entropy_rate_nats", 2.71},
                                   {"synthetic", {{"vocab_size", 64}, {"order", 2}, {"sharpness", 2.0}}}});
  write_seed(folder, "no_splits", {{"format", kDatasetFormat}, {"version", kDatasetVersion}, {"vocab_size", 1},
                                   {"splits", json::object()}});
}

}  // namespace

TRIPOD_FUZZ_SEEDS(write_seeds)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  fuzz::expect_refusal_or_success([&] {
    const json meta = TokenDataset::parse_meta(text, "fuzz-input/meta.json");
    fuzz::require(meta["vocab_size"].get<int64_t>() >= 1, "vocab_size is positive");
    for (const auto& [split, shards] : meta["splits"].items())
      for (const auto& shard : shards) fuzz::require(shard.is_string(), "every shard is named by a string");
  });
  return 0;
}
