// libFuzzer target: the token shard reader (data/shard_format.h) on arbitrary bytes.
// A payload checksum guards everything after the header, and random mutations almost never keep it
// valid; so each input is read twice: as it is, and with the header's checksum set to match its
// payload, which lets the fuzzer reach the token decoding too.
// Seeds: shards written by write_shard with 2- and 4-byte tokens, one token, and none.
#include <xxhash.h>

#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "data/shard_format.h"
#include "fuzz_support.h"

namespace {

using namespace tripod;
using namespace tripod::data;

void write_seeds(const std::filesystem::path& folder) {
  std::vector<int32_t> tokens(48);
  std::iota(tokens.begin(), tokens.end(), 0);
  write_shard(folder / "two_byte_tokens.bin", tokens, 50257);
  tokens.push_back(70000);
  write_shard(folder / "four_byte_tokens.bin", tokens, 100000);
  write_shard(folder / "one_token.bin", std::vector<int32_t>{7}, 8);
  write_shard(folder / "empty.bin", std::vector<int32_t>{}, 2);
}

void read(std::span<const std::byte> bytes) {
  fuzz::expect_refusal_or_success([&] {
    ShardHeader header;
    const std::vector<int32_t> tokens = parse_shard(bytes, "fuzz-input", &header);
    fuzz::require(tokens.size() == header.token_count, "token_count tokens are returned");
    for (int32_t token : tokens)
      fuzz::require(token >= 0 && static_cast<uint64_t>(token) < header.vocab_size,
                    "every token id is in [0, vocab_size)");
  });
}

}  // namespace

TRIPOD_FUZZ_SEEDS(write_seeds)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  read(fuzz::as_bytes(data, size));
  if (size >= kShardHeaderBytes) {
    std::vector<std::byte> fixed(fuzz::as_bytes(data, size).begin(), fuzz::as_bytes(data, size).end());
    const uint64_t checksum = XXH64(fixed.data() + kShardHeaderBytes, size - kShardHeaderBytes, 0);
    for (int i = 0; i < 8; ++i) fixed[32 + i] = static_cast<std::byte>(checksum >> (8 * i));  // little-endian
    read(fixed);
  }
  return 0;
}
