// A prepared data directory: meta.json plus the token shards of each split.
//
// meta.json:
//   {"format": "tripod-tokens", "version": 1, "vocab_size": V,
//    "tokenizer": "tokenizer.model" | null,
//    "splits": {"train": ["train_000000.bin", ...], "val": ["val_000000.bin"]},
//    "source": "...", "entropy_rate_nats": H (synthetic corpora only), ...}
// meta.json is written last and atomically, so a directory with a meta.json is complete.
#pragma once
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tripod::data {

inline constexpr const char* kDatasetFormat = "tripod-tokens";
inline constexpr int kDatasetVersion = 1;

// One split of a prepared directory, loaded into a single contiguous token array.
class TokenDataset {
 public:
  // Reads every shard of `split` (checking each shard's vocab_size against meta.json).
  static TokenDataset open(const std::filesystem::path& dir, const std::string& split);

  // Reads and validates dir/meta.json without loading any shard.
  static nlohmann::json read_meta(const std::filesystem::path& dir);
  // The same validation of meta.json's text already in memory, named `origin` in errors (the fuzz
  // suite's entry point).
  static nlohmann::json parse_meta(const std::string& text, const std::filesystem::path& origin);

  int64_t vocab_size() const { return vocab_size_; }
  int64_t size() const { return static_cast<int64_t>(tokens_.size()); }
  const int32_t* tokens() const { return tokens_.data(); }
  const nlohmann::json& meta() const { return meta_; }
  const std::filesystem::path& dir() const { return dir_; }
  const std::string& split() const { return split_; }
  // The split's identity: XXH64 (seed 0) of its token ids as int32, in order, in 16 hex digits.
  // A checkpoint records the training split's, so that a resume on another corpus under the same
  // data.dir is caught, and a corpus moved to another folder is known to be the same one.
  const std::string& tokens_xxh64() const { return tokens_xxh64_; }

 private:
  std::filesystem::path dir_;
  std::string split_;
  nlohmann::json meta_;
  int64_t vocab_size_ = 0;
  std::vector<int32_t> tokens_;
  std::string tokens_xxh64_;
};

// TokenDataset::tokens_xxh64 of dir's `split`, read a shard at a time (memory: one shard), each
// shard checked as open checks it.
std::string split_tokens_xxh64(const std::filesystem::path& dir, const std::string& split);

// The tokenizer file meta.json names is the one its preparation wrote, when meta.json records its
// XXH64 ("tokenizer_xxh64", since 2026-12-08): another preparation's of the same vocabulary
// decodes the ids into other text. Throws naming both digests.
void check_tokenizer_identity(const std::filesystem::path& tokenizer_file, const nlohmann::json& meta);

// A shard's header against meta.json's vocab_size: an Error naming both files when they differ.
void check_shard_vocab(const std::filesystem::path& dir, const std::filesystem::path& shard, uint64_t shard_vocab,
                       int64_t meta_vocab);

// "train_000003.bin" for split "train", index 3.
std::string shard_file_name(const std::string& split, int64_t index);

// Writes `tokens` as shards of at most `shard_tokens` tokens (an empty split has no shards) and
// returns their file names, in order, for meta.json.
std::vector<std::string> write_split_shards(const std::filesystem::path& dir, const std::string& split,
                                            std::span<const int32_t> tokens, uint64_t vocab_size,
                                            int64_t shard_tokens);

// Writes dir/meta.json through a temporary file and a rename.
void write_dataset_meta(const std::filesystem::path& dir, const nlohmann::json& meta);

// A folder a dataset may be written into: absent, empty, or holding only what a dataset writes
// (meta.json, shards, the tokenizer, the writers' .lock; a folder a failed preparation left without
// its meta.json).
// Anything else is refused naming one such file, before any work: `tripod data prepare --out .`
// would have written beside, and over, a user's files. `command` starts the message.
void check_dataset_folder(const std::filesystem::path& dir, const std::string& command);

// Empties a dataset's folder before it is rewritten: meta.json first, so that an interrupted
// rewrite leaves no meta.json pointing at a mixture of old and new shards, then the previous
// dataset's shards and tokenizer (a prepared corpus rewritten as a synthetic one kept its
// tokenizer.model, which `tripod export hf` then shipped with a model of another vocabulary, and a
// smaller corpus left the larger one's extra shards beside its own). A preparation's staged
// tokenizer (.tokenizer-staging.*) is kept: it is the new dataset's. `dir` exists: the writer's lock
// (data/dataset_writer_lock.h) made it, and its .lock is kept too.
void invalidate_dataset(const std::filesystem::path& dir);

}  // namespace tripod::data
