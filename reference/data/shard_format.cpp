#include "data/shard_format.h"

#include <xxhash.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <string_view>

#include "core/error.h"

namespace tripod::data {
namespace fs = std::filesystem;
namespace {

constexpr std::string_view kMagic = "TRIPODTK";
// Token ids are int32, so a vocabulary holds at most 2^31 of them.
constexpr uint64_t kMaxShardVocab = static_cast<uint64_t>(std::numeric_limits<int32_t>::max()) + 1;

// Explicit little-endian encoding keeps the format identical on any host.
void put_le(unsigned char* out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out[i] = static_cast<unsigned char>(value >> (8 * i));
}

uint64_t get_le(const unsigned char* in, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) value |= static_cast<uint64_t>(in[i]) << (8 * i);
  return value;
}

std::string hex64(uint64_t value) {
  char text[19];
  std::snprintf(text, sizeof text, "0x%016llx", static_cast<unsigned long long>(value));
  return text;
}

uint64_t file_size_of(const fs::path& path) {
  std::error_code ec;
  auto size = fs::file_size(path, ec);
  check(!ec, "token shard ", path, ": cannot stat: ", ec.message());
  return size;
}

}  // namespace

uint32_t shard_token_bytes(uint64_t vocab_size) { return vocab_size <= 65536 ? 2 : 4; }

void write_shard(const fs::path& path, std::span<const int32_t> tokens, uint64_t vocab_size) {
  check(vocab_size >= 1 && vocab_size <= kMaxShardVocab,
        "token shard ", path, ": vocab_size ", vocab_size, " is outside [1, 2^31]");
  const uint32_t width = shard_token_bytes(vocab_size);
  std::vector<unsigned char> payload(tokens.size() * width);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const int32_t token = tokens[i];
    check(token >= 0 && static_cast<uint64_t>(token) < vocab_size, "token shard ", path,
          ": token ", token, " at position ", i, " is outside the vocabulary [0, ", vocab_size, ")");
    put_le(&payload[i * width], static_cast<uint32_t>(token), static_cast<int>(width));
  }

  unsigned char header[kShardHeaderBytes] = {};
  std::memcpy(header, kMagic.data(), kMagic.size());
  put_le(header + 8, kShardVersion, 4);
  put_le(header + 12, width, 4);
  put_le(header + 16, vocab_size, 8);
  put_le(header + 24, tokens.size(), 8);
  put_le(header + 32, XXH64(payload.data(), payload.size(), 0), 8);

  fs::path temporary = path;
  temporary += ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    check(out.good(), "token shard ", temporary, ": cannot open for writing");
    out.write(reinterpret_cast<const char*>(header), sizeof header);
    out.write(reinterpret_cast<const char*>(payload.data()), static_cast<std::streamsize>(payload.size()));
    out.close();
    check(out.good(), "token shard ", temporary, ": write failed (disk full?)");
  }
  std::error_code ec;
  fs::rename(temporary, path, ec);
  check(!ec, "token shard ", path, ": cannot rename from ", temporary, ": ", ec.message());
}

namespace {

// Validates the 64 header bytes of the shard at `path` (magic, version, token width).
ShardHeader decode_header(const unsigned char* raw, const fs::path& path) {
  check(std::memcmp(raw, kMagic.data(), kMagic.size()) == 0, "token shard ", path,
        ": bad magic (not a Tripod token shard; expected \"", kMagic, "\")");
  ShardHeader header;
  header.version = static_cast<uint32_t>(get_le(raw + 8, 4));
  header.token_bytes = static_cast<uint32_t>(get_le(raw + 12, 4));
  header.vocab_size = get_le(raw + 16, 8);
  header.token_count = get_le(raw + 24, 8);
  header.checksum = get_le(raw + 32, 8);
  check(header.version == kShardVersion, "token shard ", path, ": unsupported version ",
        header.version, " (this build reads version ", kShardVersion, ")");
  check(header.token_bytes == 2 || header.token_bytes == 4, "token shard ", path,
        ": token_bytes is ", header.token_bytes, ", expected 2 or 4");
  check(header.vocab_size >= 1, "token shard ", path, ": vocab_size is 0");
  // write_shard's limit: every id below vocab_size must fit the int32 the reader returns.
  check(header.vocab_size <= kMaxShardVocab, "token shard ", path, ": vocab_size ", header.vocab_size,
        " is above 2^31 (token ids are int32)");
  return header;
}

// A shard of `found` bytes must be exactly the header and token_count tokens.
void check_shard_size(const ShardHeader& header, uint64_t found, const fs::path& path) {
  // Compare in units of tokens first so that a corrupt, huge token_count cannot overflow.
  const uint64_t max_count = (std::numeric_limits<uint64_t>::max() - kShardHeaderBytes) / header.token_bytes;
  const uint64_t expected = header.token_count > max_count
                                ? std::numeric_limits<uint64_t>::max()
                                : kShardHeaderBytes + header.token_count * header.token_bytes;
  check(found >= expected, "token shard ", path, " is truncated: expected ", expected,
        " bytes, found ", found);
  check(found == expected, "token shard ", path, " has the wrong size: expected ", expected,
        " bytes, found ", found, " (trailing bytes after the payload)");
}

// Verifies the payload's checksum and decodes its token_count ids, each below vocab_size.
std::vector<int32_t> decode_tokens(const ShardHeader& header, const unsigned char* payload, std::size_t size,
                                   const fs::path& path) {
  const uint64_t checksum = XXH64(payload, size, 0);
  check(checksum == header.checksum, "token shard ", path, ": checksum mismatch: header says ",
        hex64(header.checksum), ", payload hashes to ", hex64(checksum), " (the file is corrupt)");

  std::vector<int32_t> tokens(header.token_count);
  const int width = static_cast<int>(header.token_bytes);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const uint64_t token = get_le(&payload[i * width], width);
    check(token < header.vocab_size, "token shard ", path, ": token ", token, " at position ", i,
          " is not below vocab_size ", header.vocab_size);
    tokens[i] = static_cast<int32_t>(token);
  }
  return tokens;
}

}  // namespace

ShardHeader read_shard_header(const fs::path& path) {
  check(fs::exists(path), "token shard ", path, " does not exist");
  check(fs::is_regular_file(path), "token shard ", path, " is not a regular file");
  const uint64_t size = file_size_of(path);
  check(size >= kShardHeaderBytes, "token shard ", path, " is truncated: expected at least ",
        kShardHeaderBytes, " bytes of header, found ", size);
  std::ifstream in(path, std::ios::binary);
  check(in.good(), "token shard ", path, ": cannot open for reading");
  unsigned char raw[kShardHeaderBytes];
  in.read(reinterpret_cast<char*>(raw), sizeof raw);
  check(in.good(), "token shard ", path, ": cannot read the header");
  return decode_header(raw, path);
}

std::vector<int32_t> read_shard(const fs::path& path, ShardHeader* header_out) {
  const ShardHeader header = read_shard_header(path);
  check_shard_size(header, file_size_of(path), path);

  std::vector<unsigned char> payload(header.token_count * header.token_bytes);
  std::ifstream in(path, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(kShardHeaderBytes));
  in.read(reinterpret_cast<char*>(payload.data()), static_cast<std::streamsize>(payload.size()));
  check(in.good() || payload.empty(), "token shard ", path, ": cannot read the token payload");

  std::vector<int32_t> tokens = decode_tokens(header, payload.data(), payload.size(), path);
  if (header_out) *header_out = header;
  return tokens;
}

std::vector<int32_t> parse_shard(std::span<const std::byte> bytes, const fs::path& origin, ShardHeader* header_out) {
  check(bytes.size() >= kShardHeaderBytes, "token shard ", origin, " is truncated: expected at least ",
        kShardHeaderBytes, " bytes of header, found ", bytes.size());
  const auto* raw = reinterpret_cast<const unsigned char*>(bytes.data());
  const ShardHeader header = decode_header(raw, origin);
  check_shard_size(header, bytes.size(), origin);
  std::vector<int32_t> tokens =
      decode_tokens(header, raw + kShardHeaderBytes, bytes.size() - kShardHeaderBytes, origin);
  if (header_out) *header_out = header;
  return tokens;
}

}  // namespace tripod::data
