// NVML is loaded at run time: where the library is absent (this CI machine, a container without
// the driver) the reader says so and refuses reads with that reason, never crashes or throws at
// construction. A library that exists but is not NVML is refused by name of the missing symbol.
#include <gtest/gtest.h>

#include "core/error.h"
#include "perf/nvml_reader.h"

namespace tripod {
namespace {

TEST(NvmlReader, AnAbsentLibraryIsReportedNotFatal) {
  const NvmlReader nvml("libnvidia-ml-does-not-exist.so.1");
  EXPECT_FALSE(nvml.available());
  EXPECT_NE(nvml.why_unavailable().find("libnvidia-ml-does-not-exist.so.1 could not be loaded"), std::string::npos)
      << nvml.why_unavailable();
  EXPECT_EQ(nvml.device_count(), 0);
  EXPECT_THROW(nvml.read_index(0), Error);
  EXPECT_THROW(nvml.read_bus_id("0000:3B:00.0"), Error);
}

TEST(NvmlReader, ALibraryWithoutNvmlIsRefusedByItsMissingFunction) {
  const NvmlReader nvml("libm.so.6");
  EXPECT_FALSE(nvml.available());
  EXPECT_NE(nvml.why_unavailable().find("libm.so.6 lacks nvmlInit_v2"), std::string::npos) << nvml.why_unavailable();
}

}  // namespace
}  // namespace tripod
