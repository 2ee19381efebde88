// Turns a plain-text corpus into a prepared data directory: a BPE tokenizer trained on the text
// (out_dir/tokenizer.model), train/val token shards and meta.json.
#pragma once
#include <cstdint>
#include <filesystem>

namespace tripod::data {

struct PrepareOptions {
  std::filesystem::path input, out_dir;
  int vocab_size = 4096;
  double val_fraction = 0.05;      // the last fraction of the token stream becomes "val"
  // A held-out text of its own (a split drawn by document, say): then `input` is all "train",
  // this file all "val", val_fraction is not used, and the tokenizer learns from `input` only.
  std::filesystem::path val_input;
  int64_t shard_tokens = 1 << 24;  // tokens per shard file
};

struct PrepareReport {
  int64_t train_tokens = 0, val_tokens = 0;
  int vocab_size = 0;
  double bytes_per_token = 0;  // input bytes / tokens: the tokenizer's compression
};

PrepareReport prepare_text_corpus(const PrepareOptions& options);

}  // namespace tripod::data
