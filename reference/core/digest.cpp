#include "core/digest.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>
#include <vector>

#include <xxhash.h>

#include "core/error.h"

namespace tripod {

std::string hex16(uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
  return text;
}

std::string xxh64_hex(const void* data, std::size_t bytes) { return hex16(XXH64(data, bytes, 0)); }

Xxh64::Xxh64() : state_(XXH64_createState()) {
  if (state_ == nullptr) throw std::bad_alloc();
  XXH64_reset(state_, 0);
}

Xxh64::~Xxh64() { XXH64_freeState(state_); }

void Xxh64::update(const void* data, std::size_t bytes) { XXH64_update(state_, data, bytes); }

uint64_t Xxh64::digest() const { return XXH64_digest(state_); }

std::string file_xxh64(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TRIPOD_CHECK(fd >= 0, "cannot open ", path.string(), ": ", std::strerror(errno));
  Xxh64 hash;
  std::vector<char> buffer(1 << 20);
  ssize_t n;
  while ((n = ::read(fd, buffer.data(), buffer.size())) > 0) hash.update(buffer.data(), static_cast<std::size_t>(n));
  ::close(fd);
  return hash.hex();
}

}  // namespace tripod
