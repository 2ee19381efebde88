// What every fuzz target shares (suites/fuzz/CMakeLists.txt says how to add one).
//
// A reader may refuse any input with a tripod::Error: that is correct behaviour, and the harness
// swallows it. Anything else is a finding that libFuzzer reports and keeps: a sanitizer report, a
// crash, any other exception (it escapes LLVMFuzzerTestOneInput and aborts), a hang (-timeout), an
// allocation past -rss_limit_mb, or a broken promise about what the reader accepted (require()).
//
// Seeds come from the project's own writers: with TRIPOD_FUZZ_WRITE_SEEDS=<folder> in the
// environment, a target writes its seed files there and exits without fuzzing (ci/fuzz.sh).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <span>

#include "core/error.h"

namespace tripod::fuzz {

// The fuzzer's input as the bytes of a file.
inline std::span<const std::byte> as_bytes(const uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const std::byte*>(data), size};
}

// Runs the reader on one input; its refusals (tripod::Error) are expected.
template <class Read>
void expect_refusal_or_success(Read read) {
  try {
    read();
  } catch (const Error&) {
  }
}

// A promise the reader makes about what it accepted; breaking it is a finding.
inline void require(bool holds, const char* promise) {
  if (!holds) {
    std::fprintf(stderr, "tripod fuzz: the reader accepted an input that breaks its promise: %s\n", promise);
    std::abort();
  }
}

// Writes the seeds and exits when asked to (see above); otherwise returns and fuzzing starts.
inline void write_seeds_if_asked(void (*write_seeds)(const std::filesystem::path& folder)) {
  const char* folder = std::getenv("TRIPOD_FUZZ_WRITE_SEEDS");
  if (folder == nullptr) return;
  std::filesystem::create_directories(folder);
  write_seeds(folder);
  std::exit(0);
}

}  // namespace tripod::fuzz

// Defines libFuzzer's start-up hook to write the target's seeds when asked.
#define TRIPOD_FUZZ_SEEDS(write_seeds)                            \
  extern "C" int LLVMFuzzerInitialize(int*, char***) {            \
    tripod::fuzz::write_seeds_if_asked(write_seeds);              \
    return 0;                                                     \
  }
