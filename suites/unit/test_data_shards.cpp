// Token shard format and TokenDataset: round trips, and every corruption reported with the file's name.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "core/digest.h"
#include "core/error.h"
#include "data/shard_format.h"
#include "data/token_dataset.h"
#include "support/error_text.h"

namespace tripod::data {
namespace {
namespace fs = std::filesystem;

// A fresh directory under the system temp dir, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = fs::temp_directory_path() /
            ("tripod_shards_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

void patch_byte(const fs::path& path, std::streamoff offset, char value) {
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  file.seekp(offset);
  file.put(value);
}

TEST(ShardFormat, RoundTripTwoByteTokens) {
  TempDir dir;
  const fs::path path = dir.path() / "a.bin";
  const std::vector<int32_t> tokens = {0, 1, 255, 256, 40000, 65535, 7};
  write_shard(path, tokens, 65536);
  ShardHeader header;
  EXPECT_EQ(read_shard(path, &header), tokens);
  EXPECT_EQ(header.version, 1u);
  EXPECT_EQ(header.token_bytes, 2u);
  EXPECT_EQ(header.vocab_size, 65536u);
  EXPECT_EQ(header.token_count, tokens.size());
  EXPECT_EQ(fs::file_size(path), 64 + 2 * tokens.size());
  EXPECT_EQ(read_shard_header(path).checksum, header.checksum);
  EXPECT_FALSE(fs::exists(dir.path() / "a.bin.tmp"));
}

TEST(ShardFormat, RoundTripFourByteTokens) {
  TempDir dir;
  const fs::path path = dir.path() / "b.bin";
  const std::vector<int32_t> tokens = {0, 65535, 65536, 99999, 123};
  write_shard(path, tokens, 100000);
  ShardHeader header;
  EXPECT_EQ(read_shard(path, &header), tokens);
  EXPECT_EQ(header.token_bytes, 4u);
  EXPECT_EQ(fs::file_size(path), 64 + 4 * tokens.size());
}

TEST(ShardFormat, EmptyShardRoundTrips) {
  TempDir dir;
  write_shard(dir.path() / "empty.bin", {}, 50);
  EXPECT_TRUE(read_shard(dir.path() / "empty.bin").empty());
}

TEST(ShardFormat, HeaderIsLittleEndianAtFixedOffsets) {
  TempDir dir;
  const fs::path path = dir.path() / "c.bin";
  write_shard(path, std::vector<int32_t>{0x1234}, 70000);
  std::ifstream in(path, std::ios::binary);
  std::vector<unsigned char> raw(fs::file_size(path));
  in.read(reinterpret_cast<char*>(raw.data()), static_cast<std::streamsize>(raw.size()));
  EXPECT_EQ(std::string(raw.begin(), raw.begin() + 8), "TRIPODTK");
  EXPECT_EQ(raw[8], 1);    // version
  EXPECT_EQ(raw[12], 4);   // token_bytes
  EXPECT_EQ(raw[16] | raw[17] << 8 | raw[18] << 16, 70000);  // vocab_size
  EXPECT_EQ(raw[24], 1);   // token_count
  for (int i = 40; i < 64; ++i) EXPECT_EQ(raw[i], 0) << "padding byte " << i;
  EXPECT_EQ(raw[64], 0x34);
  EXPECT_EQ(raw[65], 0x12);
}

TEST(ShardFormat, TruncatedShardIsReported) {
  TempDir dir;
  const fs::path path = dir.path() / "truncated.bin";
  write_shard(path, std::vector<int32_t>(100, 3), 10);
  fs::resize_file(path, 64 + 150);
  const std::string message = expected_error([&] { read_shard(path); });
  EXPECT_NE(message.find("truncated"), std::string::npos) << message;
  EXPECT_NE(message.find(path.string()), std::string::npos) << message;
  EXPECT_NE(message.find("expected 264 bytes, found 214"), std::string::npos) << message;

  fs::resize_file(path, 20);  // not even a whole header
  EXPECT_NE(expected_error([&] { read_shard(path); }).find("truncated"), std::string::npos);
}

TEST(ShardFormat, FlippedPayloadByteFailsChecksum) {
  TempDir dir;
  const fs::path path = dir.path() / "flipped.bin";
  std::vector<int32_t> tokens(1000);
  std::iota(tokens.begin(), tokens.end(), 0);
  write_shard(path, tokens, 1000);
  patch_byte(path, 64 + 501, 0x01);
  const std::string message = expected_error([&] { read_shard(path); });
  EXPECT_NE(message.find("checksum"), std::string::npos) << message;
  EXPECT_NE(message.find(path.string()), std::string::npos) << message;
}

TEST(ShardFormat, BadMagicIsReported) {
  TempDir dir;
  const fs::path path = dir.path() / "magic.bin";
  write_shard(path, std::vector<int32_t>{1, 2, 3}, 10);
  patch_byte(path, 0, 'X');
  const std::string message = expected_error([&] { read_shard_header(path); });
  EXPECT_NE(message.find("magic"), std::string::npos) << message;
  EXPECT_NE(message.find(path.string()), std::string::npos) << message;
}

TEST(ShardFormat, UnsupportedVersionIsReported) {
  TempDir dir;
  const fs::path path = dir.path() / "version.bin";
  write_shard(path, std::vector<int32_t>{1}, 10);
  patch_byte(path, 8, 2);
  EXPECT_NE(expected_error([&] { read_shard(path); }).find("version 2"), std::string::npos);
}

TEST(ShardFormat, TokenOutsideVocabularyIsRejectedOnWrite) {
  TempDir dir;
  const fs::path path = dir.path() / "bad.bin";
  std::string message = expected_error([&] { write_shard(path, std::vector<int32_t>{1, 10}, 10); });
  EXPECT_NE(message.find("token 10 at position 1"), std::string::npos) << message;
  EXPECT_NE(message.find(path.string()), std::string::npos) << message;
  expected_error([&] { write_shard(path, std::vector<int32_t>{-1}, 10); });
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(dir.path() / "bad.bin.tmp"));
}

TEST(ShardFormat, TokenOutsideVocabularyIsRejectedOnRead) {
  TempDir dir;
  const fs::path path = dir.path() / "vocab.bin";
  write_shard(path, std::vector<int32_t>{5, 50}, 100);
  patch_byte(path, 16, 20);  // vocab_size 100 -> 20; the checksum covers only the payload
  const std::string message = expected_error([&] { read_shard(path); });
  EXPECT_NE(message.find("token 50"), std::string::npos) << message;
}

TEST(ShardFormat, MissingShardNamesThePath) {
  const fs::path path = fs::temp_directory_path() / "tripod_no_such_shard.bin";
  const std::string message = expected_error([&] { read_shard(path); });
  EXPECT_NE(message.find(path.string()), std::string::npos) << message;
}

// A directory with a train split of three shards and a one-shard val split.
void write_small_dataset(const fs::path& dir, const std::vector<int32_t>& train,
                         const std::vector<int32_t>& val, int64_t vocab) {
  nlohmann::json splits;
  splits["train"] = write_split_shards(dir, "train", train, vocab, 4);
  splits["val"] = write_split_shards(dir, "val", val, vocab, 100);
  write_dataset_meta(dir, {{"format", "tripod-tokens"}, {"version", 1}, {"vocab_size", vocab},
                           {"tokenizer", nullptr}, {"splits", splits}, {"source", "test"}});
}

TEST(DataTokenDataset, OpensSplitsAsOneContiguousArray) {
  TempDir dir;
  const std::vector<int32_t> train = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, val = {11, 12};
  write_small_dataset(dir.path(), train, val, 20);
  EXPECT_TRUE(fs::exists(dir.path() / "train_000002.bin"));
  const TokenDataset data = TokenDataset::open(dir.path(), "train");
  EXPECT_EQ(data.vocab_size(), 20);
  ASSERT_EQ(data.size(), 10);
  EXPECT_EQ(std::vector<int32_t>(data.tokens(), data.tokens() + data.size()), train);
  EXPECT_EQ(data.meta()["source"], "test");
  EXPECT_EQ(TokenDataset::open(dir.path(), "val").size(), 2);
}

// The split's digest is the same whether the tokens are loaded whole (training) or streamed a shard
// at a time (export): XXH64 of the int32 ids in order, whatever the shard boundaries.
TEST(DataTokenDataset, TheTokensDigestIsTheSameLoadedOrStreamed) {
  TempDir dir, other;
  const std::vector<int32_t> train = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  write_small_dataset(dir.path(), train, {11, 12}, 20);  // three train shards
  const std::string loaded = TokenDataset::open(dir.path(), "train").tokens_xxh64();
  EXPECT_EQ(loaded, xxh64_hex(train.data(), train.size() * sizeof(int32_t)));
  EXPECT_EQ(split_tokens_xxh64(dir.path(), "train"), loaded);
  std::vector<int32_t> changed = train;
  changed[9] = 11;
  write_small_dataset(other.path(), changed, {11, 12}, 20);
  EXPECT_NE(split_tokens_xxh64(other.path(), "train"), loaded);
}

TEST(DataTokenDataset, ErrorsNameWhatIsMissing) {
  TempDir dir;
  const fs::path missing_dir = dir.path() / "nope";
  EXPECT_NE(expected_error([&] { TokenDataset::open(missing_dir, "train"); }).find(missing_dir.string()),
            std::string::npos);
  EXPECT_NE(expected_error([&] { TokenDataset::open(dir.path(), "train"); }).find("meta.json"), std::string::npos);

  write_small_dataset(dir.path(), {1, 2, 3, 4, 5}, {6}, 20);
  std::string message = expected_error([&] { TokenDataset::open(dir.path(), "test"); });
  EXPECT_NE(message.find("no split \"test\""), std::string::npos) << message;

  fs::remove(dir.path() / "train_000001.bin");
  message = expected_error([&] { TokenDataset::open(dir.path(), "train"); });
  EXPECT_NE(message.find((dir.path() / "train_000001.bin").string()), std::string::npos) << message;
}

TEST(DataTokenDataset, ShardVocabularyMustMatchMeta) {
  TempDir dir;
  write_small_dataset(dir.path(), {1, 2, 3}, {4}, 20);
  write_shard(dir.path() / "val_000000.bin", std::vector<int32_t>{4}, 30);
  const std::string message = expected_error([&] { TokenDataset::open(dir.path(), "val"); });
  EXPECT_NE(message.find("vocab_size 30"), std::string::npos) << message;
}

}  // namespace
}  // namespace tripod::data
