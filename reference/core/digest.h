// XXH64 digests (seed 0) as the project records them: 16 lowercase hex digits. Checkpoints'
// manifests, shards and blocks, datasets' token streams, conformance trajectories and sweep
// configurations all name their contents this way.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

struct XXH64_state_s;  // xxhash.h's streaming state

namespace tripod {

std::string hex16(uint64_t value);
std::string xxh64_hex(const void* data, std::size_t bytes);
// The XXH64 of a file's bytes, read a MiB at a time (a checkpoint's shards, a golden bundle's files);
// throws tripod::Error naming it when it cannot be opened.
std::string file_xxh64(const std::filesystem::path& path);

// A streaming XXH64: the digest of every update()'s bytes in order, the same as xxh64_hex of
// their concatenation. Owns its state (freed on every path, a throw between updates included).
class Xxh64 {
 public:
  Xxh64();
  ~Xxh64();
  Xxh64(const Xxh64&) = delete;
  Xxh64& operator=(const Xxh64&) = delete;

  void update(const void* data, std::size_t bytes);
  uint64_t digest() const;
  std::string hex() const { return hex16(digest()); }

 private:
  XXH64_state_s* state_;
};

}  // namespace tripod
