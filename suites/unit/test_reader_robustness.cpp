// The file readers on hostile input, one test per bug the fuzz suite (suites/fuzz, ci/fuzz.sh) found,
// each failing before its fix; and the in-memory entry points the fuzzers call, which must read
// exactly what the file readers read.
#include <gtest/gtest.h>
#include <unistd.h>
#include <xxhash.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "ckpt/safetensors.h"
#include "core/error.h"
#include "data/shard_format.h"
#include "data/token_dataset.h"
#include "support/error_text.h"

namespace tripod {
namespace {
namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = fs::temp_directory_path() /
            ("tripod_robustness_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::vector<std::byte> bytes_of(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string text{std::istreambuf_iterator<char>(in), {}};
  const auto* begin = reinterpret_cast<const std::byte*>(text.data());
  return {begin, begin + text.size()};
}

void write_bytes(const fs::path& path, const std::vector<unsigned char>& bytes) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                               static_cast<std::streamsize>(bytes.size()));
}

void put_le(std::vector<unsigned char>& out, std::size_t at, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out[at + i] = static_cast<unsigned char>(value >> (8 * i));
}

// Found by fuzz_token_shard: a shard whose header claims a vocabulary above 2^31 (which write_shard
// refuses) and whose checksum matches was read, and its 4-byte ids of 2^31 and above came back as
// negative int32 token ids, which index embeddings out of bounds.
TEST(ReaderRobustness, ShardWithAVocabularyAboveInt32IsRefused) {
  const uint64_t vocab = uint64_t(1) << 32;
  std::vector<unsigned char> shard(data::kShardHeaderBytes + 8, 0);
  std::memcpy(shard.data(), "TRIPODTK", 8);
  put_le(shard, 8, data::kShardVersion, 4);
  put_le(shard, 12, 4, 4);  // token_bytes
  put_le(shard, 16, vocab, 8);
  put_le(shard, 24, 2, 8);  // token_count
  put_le(shard, 64, 7, 4);
  put_le(shard, 68, 0xFFFFFFFFu, 4);  // below vocab_size, but not an int32
  put_le(shard, 32, XXH64(shard.data() + 64, 8, 0), 8);

  TempDir dir;
  const fs::path path = dir.path() / "wide.bin";
  write_bytes(path, shard);
  for (const std::string& message :
       {expected_error([&] { data::read_shard(path); }),
        expected_error([&] { data::parse_shard(bytes_of(path), path); })}) {
    EXPECT_NE(message.find("vocab_size 4294967296"), std::string::npos) << message;
    EXPECT_NE(message.find("wide.bin"), std::string::npos) << message;
  }
}

// Found by fuzz_dataset_meta: a meta.json whose "format" or "version" had another JSON type escaped
// as nlohmann::json's type_error instead of a tripod::Error naming meta.json.
TEST(ReaderRobustness, DatasetMetaWithWronglyTypedFormatOrVersionIsATripodError) {
  for (const char* text : {R"({"format": {}})", R"({"format": 1, "version": 1})",
                           R"({"format": "tripod-tokens", "version": "1"})",
                           R"({"format": "tripod-tokens", "version": [1]})"}) {
    const std::string message = expected_error([&] { data::TokenDataset::parse_meta(text, "d/meta.json"); });
    EXPECT_NE(message.find("d/meta.json"), std::string::npos) << text << " -> " << message;
  }
  TempDir dir;
  std::ofstream(dir.path() / "meta.json") << R"({"format": "tripod-tokens", "version": "1"})";
  EXPECT_NE(expected_error([&] { data::TokenDataset::read_meta(dir.path()); }).find("version"), std::string::npos);
}

// A safetensors header as the file's bytes: the u64 length, then the text.
std::vector<std::byte> safetensors_bytes(const std::string& header) {
  std::vector<std::byte> bytes(8 + header.size());
  const uint64_t size = header.size();
  std::memcpy(bytes.data(), &size, 8);
  std::memcpy(bytes.data() + 8, header.data(), header.size());
  return bytes;
}

std::string nested_arrays(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

// Found by running fuzz_safetensors on inputs past libFuzzer's length limit: a header of a million
// nested brackets (2 MB) overflowed the stack and killed the process, because nlohmann's ordered_json
// copies a value, recursively, each time the object holding it grows. Headers nest three deep; a
// deeper one is now refused before it is built.
TEST(ReaderRobustness, DeeplyNestedSafetensorsHeaderIsRefused) {
  const std::string deep = nested_arrays(1'000'000);
  const std::string message = expected_error([&] {
    ckpt::SafetensorsFile::parse(
        safetensors_bytes(R"({"a":{"dtype":"F32","shape":[)" + deep + R"(],"data_offsets":[0,4],"x":1}})"),
        "deep.safetensors");
  });
  EXPECT_NE(message.find("deep.safetensors"), std::string::npos) << message.substr(0, 300);
  EXPECT_NE(message.find("nests deeper"), std::string::npos) << message.substr(0, 300);
}

// The same for meta.json: it parsed, and the trainer's copy of it (train_loop.cpp) or any dump then
// recursed a million levels deep.
TEST(ReaderRobustness, DeeplyNestedDatasetMetaIsRefused) {
  const std::string text = R"({"format": "tripod-tokens", "version": 1, "vocab_size": 2, "splits": {},
                               "source": )" + nested_arrays(1'000'000) + "}";
  const std::string message = expected_error([&] { data::TokenDataset::parse_meta(text, "d/meta.json"); });
  EXPECT_NE(message.find("d/meta.json"), std::string::npos) << message.substr(0, 300);
  EXPECT_NE(message.find("nests deeper"), std::string::npos) << message.substr(0, 300);
}

// Found with the fuzz target on a large input: ordered_json looks keys up linearly, so a header of n
// tensors took O(n^2) to parse; 50,000 empty tensors (2.9 MB) took 7.6 s (gcc -O3), 200,000 would
// take two minutes. The bound below is 100 times what the fix takes.
TEST(ReaderRobustness, HeaderOfManyTensorsParsesInLinearTime) {
  constexpr int kTensors = 200'000;
  std::string header = "{";
  for (int i = 0; i < kTensors; ++i)
    header += (i ? "," : "") + ("\"t" + std::to_string(i) + "\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}");
  header += "}";
  const auto start = std::chrono::steady_clock::now();
  const auto file = ckpt::SafetensorsFile::parse(safetensors_bytes(header), "many.safetensors");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(file.tensors().size(), static_cast<std::size_t>(kTensors));
  EXPECT_EQ(file.tensors().front().name, "t0");  // header order among empty tensors at one offset
  EXPECT_EQ(file.tensors().back().name, "t" + std::to_string(kTensors - 1));
  EXPECT_LT(seconds, 30.0);
}

TEST(ReaderRobustness, InMemoryReadersMatchTheFileReaders) {
  TempDir dir;
  const fs::path shard = dir.path() / "s.bin";
  const std::vector<int32_t> tokens = {0, 5, 65535, 70000, 99999};
  data::write_shard(shard, tokens, 100000);
  data::ShardHeader from_file, from_memory;
  EXPECT_EQ(data::read_shard(shard, &from_file), tokens);
  EXPECT_EQ(data::parse_shard(bytes_of(shard), shard, &from_memory), tokens);
  EXPECT_EQ(from_memory.checksum, from_file.checksum);
  EXPECT_EQ(from_memory.vocab_size, 100000u);

  const fs::path tensors = dir.path() / "t.safetensors";
  ckpt::write_safetensors(tensors,
                          {ckpt::make_host_tensor<float>("a", {2}, {1.f, 2.f}),
                           ckpt::make_host_tensor<int32_t>("b", {0, 3}, std::vector<int32_t>{}),
                           ckpt::make_host_tensor<double>("c", {}, {3.0})},
                          {{"k", "v"}});
  const auto file = ckpt::SafetensorsFile::read(tensors);
  const auto memory = ckpt::SafetensorsFile::parse(bytes_of(tensors), tensors);
  ASSERT_EQ(memory.tensors().size(), file.tensors().size());
  for (std::size_t i = 0; i < file.tensors().size(); ++i) {
    EXPECT_EQ(memory.tensors()[i].name, file.tensors()[i].name);
    EXPECT_EQ(memory.tensors()[i].shape, file.tensors()[i].shape);
    EXPECT_EQ(memory.tensors()[i].data, file.tensors()[i].data);
  }
  EXPECT_EQ(memory.metadata(), file.metadata());
  EXPECT_EQ(memory.path(), tensors);

  // The in-memory reader refuses what the file reader refuses, with the same message.
  std::vector<std::byte> truncated = bytes_of(tensors);
  truncated.pop_back();
  write_bytes(tensors, std::vector<unsigned char>(reinterpret_cast<unsigned char*>(truncated.data()),
                                                  reinterpret_cast<unsigned char*>(truncated.data()) + truncated.size()));
  EXPECT_EQ(expected_error([&] { ckpt::SafetensorsFile::parse(truncated, tensors); }),
            expected_error([&] { ckpt::SafetensorsFile::read(tensors); }));
}

}  // namespace
}  // namespace tripod
