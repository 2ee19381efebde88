#include "ckpt/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <fstream>
#include <limits>
#include <set>
#include <nlohmann/json.hpp>

#include "core/bounded_json.h"

namespace tripod::ckpt {

// The format is little-endian; Tripod copies bytes straight to and from memory.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace {

using ordered_json = nlohmann::ordered_json;
constexpr const char* kMetadataKey = "__metadata__";

std::string sys_error() { return std::strerror(errno); }

// Writes all of `bytes` to `fd`, retrying short writes and EINTR.
void write_all(int fd, const void* bytes, std::size_t size, const std::filesystem::path& path) {
  const char* p = static_cast<const char*>(bytes);
  while (size > 0) {
    ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    TRIPOD_CHECK(n > 0, "writing ", path.string(), ": ", sys_error());
    p += n;
    size -= static_cast<std::size_t>(n);
  }
}

// Directory fsync makes the rename itself durable; some filesystems refuse it, which is harmless.
void fsync_directory(const std::filesystem::path& dir) {
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

// Bytes that `shape` x `dtype` needs, or fails (naming the tensor) if it overflows 64 bits, which
// only a corrupted header can make happen.
uint64_t checked_bytes(const Shape& shape, DType dtype, const std::string& what) {
  uint64_t bytes = dtype_size(dtype);
  for (int64_t d : shape) {
    TRIPOD_CHECK(!__builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes), what, ": shape ", shape_str(shape),
                 " is too large");
  }
  return bytes;
}

// One tensor's header entry: its name, dtype and shape (data still empty) and where its bytes lie.
struct TensorEntry {
  HostTensor tensor;
  uint64_t begin, end;
};

// Reads the 8-byte header length and the header text after it; `in` is left at the first data byte.
std::string read_header_text(std::ifstream& in, const std::string& file, uint64_t file_size) {
  uint64_t header_size = 0;
  in.read(reinterpret_cast<char*>(&header_size), 8);
  check(in.good(), "cannot read the header length of ", file);
  check(header_size <= file_size - 8, file, ": header length ", header_size,
        " runs past the end of the file (", file_size, " bytes)");
  std::string text(header_size, '\0');
  in.read(text.data(), static_cast<std::streamsize>(header_size));
  check(in.good(), "cannot read the header of ", file);
  return text;
}

// The header with its tensors in file order. A repeated top-level key would silently hide a tensor,
// so it is refused; headers nest three deep (tensor, shape), so anything past 8 is not one.
struct ParsedHeader {
  nlohmann::json values;
  std::vector<std::string> keys;  // in file order
};

ParsedHeader parse_header(const std::string& text, const std::string& file) {
  ParsedHeader header;
  header.values = parse_bounded_json(text, file + ": the header", /*max_depth=*/8, &header.keys);
  check(header.values.is_object(), file, ": the header is not a JSON object");
  return header;
}

std::map<std::string, std::string> parse_metadata(const nlohmann::json& info, const std::string& file) {
  check(info.is_object(), file, ": __metadata__ is not an object");
  std::map<std::string, std::string> metadata;
  for (const auto& [k, v] : info.items()) {
    check(v.is_string(), file, ": metadata value of '", k, "' is not a string");
    metadata[k] = v.get<std::string>();
  }
  return metadata;
}

// Validates one tensor's header entry; its byte span must match what its shape and dtype need.
TensorEntry parse_tensor_entry(const std::string& name, const nlohmann::json& info, const std::string& file) {
  const std::string what = file + ", tensor '" + name + "'";
  check(info.is_object() && info.contains("dtype") && info.contains("shape") && info.contains("data_offsets"),
        what, ": header entry needs dtype, shape and data_offsets");
  check(info["dtype"].is_string(), what, ": dtype is not a string");
  TensorEntry entry{HostTensor{name, DType::F32, {}, {}}, 0, 0};
  try {
    entry.tensor.dtype = parse_safetensors_dtype(info["dtype"].get<std::string>());
  } catch (const Error& e) {
    fail(what, ": ", e.what());
  }
  check(info["shape"].is_array(), what, ": shape is not an array");
  for (const auto& d : info["shape"]) {
    check(d.is_number_unsigned() && d.get<uint64_t>() <= uint64_t(std::numeric_limits<int64_t>::max()),
          what, ": shape entry ", d.dump(), " is not a non-negative integer");
    entry.tensor.shape.push_back(d.get<int64_t>());
  }
  const auto& offsets = info["data_offsets"];
  check(offsets.is_array() && offsets.size() == 2 && offsets[0].is_number_unsigned() &&
            offsets[1].is_number_unsigned(),
        what, ": data_offsets is not a pair of non-negative integers");
  entry.begin = offsets[0].get<uint64_t>();
  entry.end = offsets[1].get<uint64_t>();
  check(entry.begin <= entry.end, what, ": data_offsets [", entry.begin, ", ", entry.end, "] are reversed");
  const uint64_t bytes = checked_bytes(entry.tensor.shape, entry.tensor.dtype, what);
  TRIPOD_CHECK(entry.end - entry.begin == bytes, what, ": data_offsets [", entry.begin, ", ", entry.end, "] span ",
               entry.end - entry.begin, " bytes but shape ", shape_str(entry.tensor.shape), " of ",
               info["dtype"].get<std::string>(), " needs ", bytes);
  return entry;
}

// The data must be exactly the tensors laid end to end (as HF's own validation demands), so
// overlaps, holes and trailing bytes all mean a corrupted file. Stable sort keeps header order
// among empty tensors that share an offset. Leaves `entries` in data order.
void check_data_layout(std::vector<TensorEntry>& entries, uint64_t data_size, const std::string& file) {
  std::stable_sort(entries.begin(), entries.end(),
                   [](const TensorEntry& a, const TensorEntry& b) { return a.begin < b.begin; });
  uint64_t expected = 0;
  for (const TensorEntry& e : entries) {
    check(e.begin == expected, file, ", tensor '", e.tensor.name, "': data_offsets [", e.begin, ", ", e.end,
          "] ", e.begin < expected ? "overlap the previous tensor" : "leave a gap after the previous tensor",
          " (expected to begin at ", expected, ")");
    check(e.end <= data_size, file, " is truncated: tensor '", e.tensor.name, "' ends at data byte ", e.end,
          " but the file holds only ", data_size, " data bytes");
    expected = e.end;
  }
  check(expected == data_size, file, ": ", data_size - expected, " bytes after the last tensor's data");
}

// What a header says, validated against the `data_size` bytes after it: the tensors (data still
// empty) in data order, and the metadata.
struct HeaderLayout {
  std::vector<TensorEntry> entries;
  std::map<std::string, std::string> metadata;
};

HeaderLayout parse_layout(const std::string& text, uint64_t data_size, const std::string& file) {
  const ParsedHeader header = parse_header(text, file);
  HeaderLayout layout;
  for (const std::string& name : header.keys) {
    const nlohmann::json& info = header.values.at(name);
    if (name == kMetadataKey) {
      layout.metadata = parse_metadata(info, file);
      continue;
    }
    layout.entries.push_back(parse_tensor_entry(name, info, file));
  }
  check_data_layout(layout.entries, data_size, file);
  return layout;
}

}  // namespace

std::string safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32: return "F32";
    case DType::F64: return "F64";
    case DType::BF16: return "BF16";
    case DType::I32: return "I32";
  }
  fail("dtype ", static_cast<int>(dtype), " has no safetensors name");
}

DType parse_safetensors_dtype(const std::string& name) {
  if (name == "F32") return DType::F32;
  if (name == "F64") return DType::F64;
  if (name == "BF16") return DType::BF16;
  if (name == "I32") return DType::I32;
  fail("unsupported safetensors dtype '", name, "' (Tripod reads F32, F64, BF16 and I32)");
}

void write_safetensors(const std::filesystem::path& path, const std::vector<HostTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  ordered_json header = ordered_json::object();
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  uint64_t offset = 0;
  std::set<std::string> names;
  for (const HostTensor& t : tensors) {
    const std::string what = "safetensors file " + path.string() + ", tensor '" + t.name + "'";
    check(t.name != kMetadataKey, what, ": the name is reserved for the metadata");
    check(names.insert(t.name).second, what, ": duplicate tensor name");
    for (int64_t d : t.shape) TRIPOD_CHECK(d >= 0, what, ": negative dimension in shape ", shape_str(t.shape));
    const uint64_t bytes = checked_bytes(t.shape, t.dtype, what);
    TRIPOD_CHECK(t.data.size() == bytes, what, ": holds ", t.data.size(), " bytes but shape ", shape_str(t.shape),
                 " of ", safetensors_dtype_name(t.dtype), " needs ", bytes);
    header[t.name] = {{"dtype", safetensors_dtype_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  // Pad with spaces so the data starts 8-byte aligned (8 + N is a multiple of 8), as HF does.
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t header_size = text.size();

  std::filesystem::path tmp = path;
  tmp += ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TRIPOD_CHECK(fd >= 0, "cannot create ", tmp.string(), ": ", sys_error());
  try {
    write_all(fd, &header_size, sizeof header_size, tmp);
    write_all(fd, text.data(), text.size(), tmp);
    for (const HostTensor& t : tensors) write_all(fd, t.data.data(), t.data.size(), tmp);
    TRIPOD_CHECK(::fsync(fd) == 0, "fsync of ", tmp.string(), " failed: ", sys_error());
    const int closed = ::close(fd);
    fd = -1;
    TRIPOD_CHECK(closed == 0, "closing ", tmp.string(), " failed: ", sys_error());
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    TRIPOD_CHECK(!ec, "cannot rename ", tmp.string(), " to ", path.string(), ": ", ec.message());
  } catch (...) {
    if (fd >= 0) ::close(fd);
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    throw;
  }
  fsync_directory(path.parent_path());
}

SafetensorsFile SafetensorsFile::read(const std::filesystem::path& path) {
  const std::string file = "safetensors file " + path.string();
  std::ifstream in(path, std::ios::binary);
  check(in.good(), "cannot open ", file);
  std::error_code ec;
  const uint64_t file_size = std::filesystem::file_size(path, ec);
  check(!ec, "cannot stat ", file, ": ", ec.message());
  check(file_size >= 8, file, " is ", file_size, " bytes, shorter than the 8-byte header length");

  const std::string text = read_header_text(in, file, file_size);
  HeaderLayout layout = parse_layout(text, file_size - 8 - text.size(), file);
  SafetensorsFile result;
  result.path_ = path;
  result.metadata_ = std::move(layout.metadata);
  for (TensorEntry& e : layout.entries) {
    e.tensor.data.resize(e.end - e.begin);
    in.read(reinterpret_cast<char*>(e.tensor.data.data()), static_cast<std::streamsize>(e.tensor.data.size()));
    check(in.good(), file, ": cannot read the data of tensor '", e.tensor.name, "' (file truncated?)");
    result.add(std::move(e.tensor));
  }
  return result;
}

SafetensorsFile SafetensorsFile::parse(std::span<const std::byte> bytes, const std::filesystem::path& origin) {
  const std::string file = "safetensors file " + origin.string();
  const uint64_t file_size = bytes.size();
  check(file_size >= 8, file, " is ", file_size, " bytes, shorter than the 8-byte header length");
  uint64_t header_size = 0;
  std::memcpy(&header_size, bytes.data(), 8);
  check(header_size <= file_size - 8, file, ": header length ", header_size,
        " runs past the end of the file (", file_size, " bytes)");
  const std::string text(reinterpret_cast<const char*>(bytes.data()) + 8, header_size);
  const std::span<const std::byte> data = bytes.subspan(8 + header_size);

  HeaderLayout layout = parse_layout(text, data.size(), file);
  SafetensorsFile result;
  result.path_ = origin;
  result.metadata_ = std::move(layout.metadata);
  for (TensorEntry& e : layout.entries) {
    const auto tensor_bytes = data.subspan(e.begin, e.end - e.begin);
    e.tensor.data.assign(tensor_bytes.begin(), tensor_bytes.end());
    result.add(std::move(e.tensor));
  }
  return result;
}

void SafetensorsFile::add(HostTensor tensor) {
  index_[tensor.name] = tensors_.size();
  tensors_.push_back(std::move(tensor));
}

const HostTensor& SafetensorsFile::get(const std::string& name) const {
  auto it = index_.find(name);
  TRIPOD_CHECK(it != index_.end(), "safetensors file ", path_.string(), " has no tensor '", name, "'");
  return tensors_[it->second];
}

}  // namespace tripod::ckpt
