#include "data/token_dataset.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <iterator>

#include "core/bounded_json.h"
#include "core/digest.h"
#include "core/error.h"
#include "data/dataset_writer_lock.h"
#include "data/shard_format.h"

namespace tripod::data {
namespace fs = std::filesystem;

nlohmann::json TokenDataset::read_meta(const fs::path& dir) {
  check(!fs::exists(dir) || fs::is_directory(dir), "data directory ", dir, " is a file, not a prepared directory");
  check(fs::is_directory(dir), "data directory ", dir, " does not exist");
  const fs::path meta_path = dir / "meta.json";
  check(fs::exists(meta_path), "data directory ", dir,
        " has no meta.json (not prepared, or preparation did not finish)");
  // A folder there failed as an "internal error" without the path, and a named pipe hung the run.
  check(fs::is_regular_file(meta_path), meta_path, " is not a regular file (a prepared directory's meta.json is one)");
  std::ifstream in(meta_path);
  check(in.good(), meta_path, ": cannot open for reading");
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  return parse_meta(text, meta_path);
}

nlohmann::json TokenDataset::parse_meta(const std::string& text, const fs::path& meta_path) {
  // meta.json nests three deep (splits, shards); 32 leaves room for what a preparer records.
  const nlohmann::json meta = parse_bounded_json(text, meta_path.string(), /*max_depth=*/32);
  // value() with a json default: a field of another JSON type compares unequal instead of throwing
  // nlohmann's type_error.
  check(meta.is_object() && meta.value("format", nlohmann::json()) == kDatasetFormat, meta_path,
        ": \"format\" is not \"", kDatasetFormat, "\"");
  check(meta.value("version", nlohmann::json()) == kDatasetVersion, meta_path, ": unsupported \"version\" (expected ",
        kDatasetVersion, ")");
  check(meta.contains("vocab_size") && meta["vocab_size"].is_number_integer() &&
            meta["vocab_size"].get<int64_t>() >= 1,
        meta_path, ": \"vocab_size\" must be a positive integer");
  check(meta.contains("splits") && meta["splits"].is_object(), meta_path,
        ": \"splits\" must be an object of split name -> shard file list");
  // A shard in two splits (or twice in one) is data measured where it was trained on, or counted
  // twice: a meta.json listing a training shard as the held-out split gave "val loss" on training data.
  std::map<std::string, std::string> split_of;
  for (const auto& [name, shards] : meta["splits"].items()) {
    check(shards.is_array(), meta_path, ": split \"", name, "\" must be a list of shard files");
    for (const auto& shard : shards) {
      check(shard.is_string(), meta_path, ": split \"", name, "\" lists a non-string shard");
      const auto [at, fresh] = split_of.emplace(shard.get<std::string>(), name);
      TRIPOD_CHECK(fresh, meta_path, ": shard ", shard.get<std::string>(), " is listed ",
                   at->second == name ? "twice in split \"" + name + "\""
                                      : "in split \"" + at->second + "\" and in split \"" + name + "\"",
                   " (each shard belongs to one split, once)");
    }
  }
  return meta;
}

namespace {

// Reads `split`'s shards as meta.json lists them, in order, each checked (size, checksum, ids, its
// vocabulary against meta.json's), and hands each to `take`: the one loop behind loading a split
// whole and digesting it a shard at a time.
void read_split_shards(const fs::path& dir, const nlohmann::json& meta, const std::string& split,
                       const std::function<void(const std::vector<int32_t>&)>& take) {
  const auto& splits = meta["splits"];
  if (!splits.contains(split)) {
    std::string available;
    for (const auto& [name, shards] : splits.items()) available += (available.empty() ? "" : ", ") + name;
    fail(dir / "meta.json", ": no split \"", split, "\" (available: ", available, ")");
  }
  const auto vocab = meta["vocab_size"].get<int64_t>();
  int64_t tokens = 0;
  for (const auto& name : splits[split]) {
    const fs::path shard_path = dir / name.get<std::string>();
    ShardHeader header;
    const std::vector<int32_t> shard = read_shard(shard_path, &header);
    check_shard_vocab(dir, shard_path, header.vocab_size, vocab);
    take(shard);
    tokens += static_cast<int64_t>(shard.size());
  }
  check(tokens > 0, "split \"", split, "\" of data directory ", dir, " has no tokens");
}

}  // namespace

TokenDataset TokenDataset::open(const fs::path& dir, const std::string& split) {
  TokenDataset data;
  data.dir_ = dir;
  data.split_ = split;
  data.meta_ = read_meta(dir);
  data.vocab_size_ = data.meta_["vocab_size"].get<int64_t>();
  read_split_shards(dir, data.meta_, split, [&](const std::vector<int32_t>& shard) {
    data.tokens_.insert(data.tokens_.end(), shard.begin(), shard.end());
  });
  data.tokens_xxh64_ = xxh64_hex(data.tokens_.data(), data.tokens_.size() * sizeof(int32_t));
  return data;
}

std::string split_tokens_xxh64(const fs::path& dir, const std::string& split) {
  Xxh64 hash;
  read_split_shards(dir, TokenDataset::read_meta(dir), split, [&](const std::vector<int32_t>& shard) {
    hash.update(shard.data(), shard.size() * sizeof(int32_t));
  });
  return hash.hex();
}

void check_tokenizer_identity(const fs::path& tokenizer_file, const nlohmann::json& meta) {
  const nlohmann::json recorded = meta.value("tokenizer_xxh64", nlohmann::json());
  if (!recorded.is_string()) return;  // prepared before the digest was recorded
  const std::string actual = file_xxh64(tokenizer_file);
  check(actual == recorded.get<std::string>(), tokenizer_file, " has XXH64 ", actual, " but meta.json records ",
        recorded.get<std::string>(), ": a tokenizer from another preparation (its ids decode into other text)");
}

void check_shard_vocab(const fs::path& dir, const fs::path& shard, uint64_t shard_vocab, int64_t meta_vocab) {
  check(meta_vocab >= 0 && shard_vocab == static_cast<uint64_t>(meta_vocab), "token shard ", shard, " has vocab_size ",
        shard_vocab, " but ", dir / "meta.json", " says ", meta_vocab);
}

std::string shard_file_name(const std::string& split, int64_t index) {
  char number[32];
  std::snprintf(number, sizeof number, "_%06lld.bin", static_cast<long long>(index));
  return split + number;
}

std::vector<std::string> write_split_shards(const fs::path& dir, const std::string& split,
                                            std::span<const int32_t> tokens, uint64_t vocab_size,
                                            int64_t shard_tokens) {
  check(shard_tokens >= 1, "shard size must be at least 1 token (got ", shard_tokens, ")");
  std::vector<std::string> names;
  for (std::size_t begin = 0; begin < tokens.size(); begin += static_cast<std::size_t>(shard_tokens)) {
    const std::size_t count = std::min(tokens.size() - begin, static_cast<std::size_t>(shard_tokens));
    names.push_back(shard_file_name(split, static_cast<int64_t>(names.size())));
    write_shard(dir / names.back(), tokens.subspan(begin, count), vocab_size);
  }
  return names;
}

void write_dataset_meta(const fs::path& dir, const nlohmann::json& meta) {
  const fs::path final_path = dir / "meta.json";
  const fs::path temporary = dir / "meta.json.tmp";
  {
    std::ofstream out(temporary, std::ios::trunc);
    check(out.good(), temporary, ": cannot open for writing");
    out << meta.dump(2) << "\n";
    out.close();
    check(out.good(), temporary, ": write failed");
  }
  std::error_code ec;
  fs::rename(temporary, final_path, ec);
  check(!ec, final_path, ": cannot rename from ", temporary, ": ", ec.message());
}

namespace {

bool written_by_a_dataset(const std::string& name) {
  if (name == "meta.json" || name == "meta.json.tmp" || name == "tokenizer.model" || name == "tokenizer.vocab" ||
      name.rfind(".tokenizer-staging.", 0) == 0 || name == kDatasetLockFile)
    return true;
  // A shard: train_NNNNNN.bin or val_NNNNNN.bin (shard_file_name).
  for (const std::string split : {"train_", "val_"}) {
    if (name.rfind(split, 0) != 0 || name.size() != split.size() + 10 || !name.ends_with(".bin")) continue;
    if (std::all_of(name.begin() + static_cast<std::ptrdiff_t>(split.size()), name.end() - 4,
                    [](char c) { return c >= '0' && c <= '9'; }))
      return true;
  }
  return false;
}

}  // namespace

void check_dataset_folder(const fs::path& dir, const std::string& command) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return;
  TRIPOD_CHECK(fs::is_directory(dir, ec), command, ": --out ", dir.string(), " is a file, not a folder");
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    TRIPOD_CHECK(written_by_a_dataset(name), command, ": --out ", dir.string(),
                 " holds files that are not a dataset's (", name,
                 " among them); refusing to write into it and risk them (give a new or empty folder, or a ",
                 "dataset's folder to rewrite)");
  }
  TRIPOD_CHECK(!ec, command, ": cannot read the folder --out ", dir.string(), ": ", ec.message());
}

void invalidate_dataset(const fs::path& dir) {
  std::error_code ec;
  fs::remove(dir / "meta.json", ec);
  check(!ec, "cannot remove the old ", dir / "meta.json", ": ", ec.message());
  std::vector<fs::path> previous;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    // The staged tokenizer is the new dataset's; the lock file is held by this writer (removing it
    // would let a second writer lock a new file of the same name).
    if (written_by_a_dataset(name) && name.rfind(".tokenizer-staging.", 0) != 0 && name != kDatasetLockFile)
      previous.push_back(entry.path());
  }
  check(!ec, "cannot read the data directory ", dir, ": ", ec.message());
  for (const fs::path& file : previous) {
    fs::remove(file, ec);
    check(!ec, "cannot remove the previous dataset's ", file, ": ", ec.message());
  }
}

}  // namespace tripod::data
