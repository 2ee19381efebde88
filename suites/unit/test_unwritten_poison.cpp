// TRIPOD_POISON_UNWRITTEN (backend/unwritten_poison.h): its values and refusals, and what it does to
// the memory a backend hands out for overwrite — NaN bytes on the emulated device, never on the
// CPU's host memory, never in what alloc zero-fills — so that a read of anything unwritten shows.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "backend/backend_factory.h"
#include "backend/unwritten_poison.h"
#include "support/error_text.h"

namespace tripod {
namespace {

bool choose(const std::string& value) {
  const std::map<std::string, std::string> vars = {{"TRIPOD_POISON_UNWRITTEN", value}};
  return choose_unwritten_poison([&](const char* name) { return vars.count(name) ? vars.at(name) : std::string(); });
}

TEST(UnwrittenPoison, OffUnlessAskedForByOne) {
  EXPECT_FALSE(choose(""));
  EXPECT_FALSE(choose("0"));
  EXPECT_TRUE(choose("1"));
  for (const std::string value : {"yes", "2", "true", " 1"}) {
    const std::string error = expected_error([&] { choose(value); });
    EXPECT_NE(error.find("TRIPOD_POISON_UNWRITTEN is 1"), std::string::npos) << error;
    EXPECT_NE(error.find("not '" + value + "'"), std::string::npos) << error;
  }
}

// Sets the variable for the backends made in its scope (they read it when made).
struct PoisonAsked {
  explicit PoisonAsked(const char* value) { setenv("TRIPOD_POISON_UNWRITTEN", value, 1); }
  ~PoisonAsked() { unsetenv("TRIPOD_POISON_UNWRITTEN"); }
};

std::vector<unsigned char> bytes_of(Backend& be, const Tensor& t) {
  std::vector<unsigned char> host(t.bytes());
  be.download(t, host.data());
  return host;
}

bool all_bytes(const std::vector<unsigned char>& bytes, unsigned char value) {
  for (unsigned char b : bytes)
    if (b != value) return false;
  return !bytes.empty();
}

TEST(UnwrittenPoison, TheEmulatedDevicesMemoryForOverwriteIsNaNsAndAllocStillZeroFills) {
  const PoisonAsked asked("1");
  auto device = make_emulated_backend();
  for (DType dtype : {DType::F32, DType::F64, DType::BF16}) {
    // sizes that the allocator's caching and alignment treat differently: small, odd, large
    for (int64_t n : {1, 37, 1 << 20}) {
      Tensor t = device->alloc_for_overwrite({n}, dtype);
      EXPECT_TRUE(all_bytes(bytes_of(*device, t), kUnwrittenPoisonByte)) << dtype_name(dtype) << " " << n;
      Tensor z = device->alloc({n}, dtype);
      EXPECT_TRUE(all_bytes(bytes_of(*device, z), 0)) << dtype_name(dtype) << " " << n;
    }
  }
  // every element of such memory is a NaN in each float type, so a sum over it is one
  Tensor f = device->alloc_for_overwrite({5}, DType::F32);
  float values[5];
  device->download(f, values);
  for (float v : values) EXPECT_TRUE(std::isnan(v));
  Tensor acc = device->alloc({1}, DType::F64);
  device->sum_squares(acc, f);
  double total = 0;
  device->download(acc, &total);
  EXPECT_TRUE(std::isnan(total));
}

TEST(UnwrittenPoison, TheCpusHostMemoryStaysTheCleanReference) {
  const PoisonAsked asked("1");
  auto cpu = make_cpu_backend();
  // the host backend ignores it: its results are what the emulated device's are compared with. (A
  // size no poisoned tensor had: the host's large blocks are kept and reused by exact size, bytes
  // and all, whichever backend freed them.)
  Tensor t = cpu->alloc_for_overwrite({(3 << 20) / 4 + 1000}, DType::F32);
  EXPECT_FALSE(all_bytes(bytes_of(*cpu, t), kUnwrittenPoisonByte));
}

TEST(UnwrittenPoison, ABadValueStopsTheBackendFromStarting) {
  const PoisonAsked asked("on");
  const std::string error = expected_error([] { make_emulated_backend(); });
  EXPECT_NE(error.find("TRIPOD_POISON_UNWRITTEN is 1"), std::string::npos) << error;
}

}  // namespace
}  // namespace tripod
