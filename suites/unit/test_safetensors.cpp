// safetensors I/O: round trips of every dtype Tripod stores, and every malformed file rejected with
// an error that names the file (and tensor). The cross-check against an independent (numpy) reader
// lives in suites/python/test_torch_reference.py, which reads the files tripod_reference_dump writes.
#include "ckpt/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>

#include "support/error_text.h"

namespace tripod::ckpt {
namespace {

namespace fs = std::filesystem;

// A fresh directory per test, removed afterwards, so parallel CTest runs do not collide.
class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("tripod_safetensors_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

#define EXPECT_ERROR_WITH(statement, ...)                                          \
  do {                                                                             \
    const std::string msg_ = error_of([&] { statement; });                         \
    for (const std::string& part_ : std::vector<std::string>{__VA_ARGS__})         \
      EXPECT_NE(msg_.find(part_), std::string::npos) << "'" << part_ << "' not in: " << msg_; \
  } while (0)

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}
void spit(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary) << bytes;
}
// A file with a hand-written header, for the malformed cases the writer refuses to produce.
void write_raw(const fs::path& p, const std::string& header, std::size_t data_bytes) {
  uint64_t n = header.size();
  std::string bytes(reinterpret_cast<const char*>(&n), 8);
  spit(p, bytes + header + std::string(data_bytes, '\x01'));
}

std::vector<HostTensor> sample_tensors() {
  std::vector<HostTensor> t;
  t.push_back(make_host_tensor<float>("h.0.attn.c_attn.weight", {2, 3}, {1.5f, -2.f, 3.25f, 0.f, -0.f, 1e-30f}));
  t.push_back(make_host_tensor<double>("wte.weight", {4}, {1.0 / 3.0, -1e300, 2.5, 7.0}));
  t.push_back(make_host_tensor<int32_t>("tokens", {2, 2, 2}, {0, 1, -1, 50256, 7, 8, 9, 2147483647}));
  t.push_back(make_host_tensor<std::uint16_t>("bf16", {3}, {0x3f80, 0xbf80, 0x7f80}));
  t.push_back(make_host_tensor<double>("scalar", {}, {42.0}));  // 0-d: one element
  t.push_back(make_host_tensor<float>("empty", {0, 5}, std::vector<float>{}));
  t.push_back(make_host_tensor<int32_t>("last", {1}, {-5}));
  return t;
}

TEST_F(SafetensorsTest, RoundTripsDtypesShapesAndMetadata) {
  const fs::path path = dir_ / "model.safetensors";
  const auto tensors = sample_tensors();
  const std::map<std::string, std::string> metadata{{"format", "pt"}, {"step", "12"}};
  write_safetensors(path, tensors, metadata);
  EXPECT_FALSE(fs::exists(dir_ / "model.safetensors.tmp"));

  // Layout: the data starts 8-byte aligned after the space-padded header.
  const std::string bytes = slurp(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ((8 + n) % 8, 0u);
  EXPECT_EQ(bytes[8], '{');

  const auto file = SafetensorsFile::read(path);
  EXPECT_EQ(file.metadata(), metadata);
  ASSERT_EQ(file.tensors().size(), tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const HostTensor& got = file.tensors()[i];  // file order == write order
    EXPECT_EQ(got.name, tensors[i].name);
    EXPECT_EQ(got.dtype, tensors[i].dtype) << got.name;
    EXPECT_EQ(got.shape, tensors[i].shape) << got.name;
    EXPECT_EQ(got.data, tensors[i].data) << got.name;
    EXPECT_TRUE(file.contains(got.name));
  }
  EXPECT_EQ(file.get("scalar").numel(), 1);
  EXPECT_EQ(file.get("scalar").as<double>()[0], 42.0);
  EXPECT_EQ(file.get("empty").numel(), 0);
  EXPECT_EQ(file.get("tokens").as<int32_t>()[3], 50256);
  EXPECT_EQ(file.get("wte.weight").as<double>()[0], 1.0 / 3.0);
  EXPECT_EQ(file.get("bf16").as<std::uint16_t>()[2], 0x7f80);
  EXPECT_FALSE(file.contains("nope"));
}

TEST_F(SafetensorsTest, EmptyFileAndOverwrite) {
  const fs::path path = dir_ / "x.safetensors";
  write_safetensors(path, {});
  EXPECT_TRUE(SafetensorsFile::read(path).tensors().empty());
  write_safetensors(path, {make_host_tensor<float>("a", {1}, {2.f})});  // replaces the old file
  EXPECT_EQ(SafetensorsFile::read(path).get("a").as<float>()[0], 2.f);
}

TEST_F(SafetensorsTest, MissingTensorAndWrongTypeNameFileAndTensor) {
  const fs::path path = dir_ / "m.safetensors";
  write_safetensors(path, sample_tensors());
  const auto file = SafetensorsFile::read(path);
  EXPECT_ERROR_WITH(file.get("lm_head.weight"), path.string(), "lm_head.weight");
  EXPECT_ERROR_WITH(file.get("wte.weight").as<float>(), "wte.weight", "fp64");
}

TEST_F(SafetensorsTest, WriterRejectsDuplicatesAndBadSizesWithoutLeavingAFile) {
  const fs::path path = dir_ / "bad.safetensors";
  auto tensors = sample_tensors();
  tensors.push_back(make_host_tensor<float>("wte.weight", {1}, {1.f}));
  EXPECT_ERROR_WITH(write_safetensors(path, tensors), path.string(), "wte.weight", "duplicate");
  HostTensor short_data = make_host_tensor<float>("short", {2}, {1.f, 2.f});
  short_data.shape = {3};
  EXPECT_ERROR_WITH(write_safetensors(path, {short_data}), path.string(), "short");
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(dir_ / "bad.safetensors.tmp"));
}

TEST_F(SafetensorsTest, RejectsShortTruncatedAndCorruptedFiles) {
  const fs::path good = dir_ / "good.safetensors";
  write_safetensors(good, sample_tensors(), {{"k", "v"}});
  const std::string bytes = slurp(good);
  const fs::path bad = dir_ / "bad.safetensors";

  spit(bad, bytes.substr(0, 5));
  EXPECT_ERROR_WITH(SafetensorsFile::read(bad), bad.string(), "shorter than");

  std::string huge = bytes;
  const uint64_t n = uint64_t(1) << 40;
  std::memcpy(huge.data(), &n, 8);
  spit(bad, huge);
  EXPECT_ERROR_WITH(SafetensorsFile::read(bad), bad.string(), "header length");

  spit(bad, bytes.substr(0, bytes.size() - 3));  // cuts into the last tensor's data
  EXPECT_ERROR_WITH(SafetensorsFile::read(bad), bad.string(), "truncated", "'last'");

  std::string corrupt = bytes;
  corrupt[8] = 'X';  // the opening brace
  spit(bad, corrupt);
  EXPECT_ERROR_WITH(SafetensorsFile::read(bad), bad.string(), "not valid JSON");

  spit(bad, bytes + "junk");
  EXPECT_ERROR_WITH(SafetensorsFile::read(bad), bad.string(), "after the last tensor");

  EXPECT_ERROR_WITH(SafetensorsFile::read(dir_ / "absent.safetensors"), "absent.safetensors");
}

TEST_F(SafetensorsTest, RejectsBadHeaders) {
  const fs::path p = dir_ / "h.safetensors";
  auto expect = [&](const std::string& header, std::size_t data, std::vector<std::string> parts) {
    write_raw(p, header, data);
    parts.push_back(p.string());
    const std::string msg = error_of([&] { SafetensorsFile::read(p); });
    for (const auto& part : parts) EXPECT_NE(msg.find(part), std::string::npos) << header << " -> " << msg;
  };
  expect(R"({"a":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})", 4, {"'a'", "F16", "unsupported"});
  expect(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4, {"'a'", "needs 8"});
  expect(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})",
         8, {"'b'", "overlap"});
  expect(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8, {"'a'", "gap"});
  expect(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 2, {"'a'", "truncated"});
  expect(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", 4, {"'a'", "reversed"});
  expect(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4, {"'a'", "non-negative"});
  expect(R"({"a":{"dtype":"F32","shape":[1]}})", 4, {"'a'", "data_offsets"});
  expect(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})", 4, {"'a'", "too large"});
  expect(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
         8, {"'a'", "twice"});
  expect(R"({"__metadata__":{"k":1}})", 0, {"metadata", "'k'"});
  expect(R"([1,2])", 0, {"not a JSON object"});
}

}  // namespace
}  // namespace tripod::ckpt
