// The peak table: lookups by the names drivers report, the most specific row winning, and the
// dense figures the MFU is measured against.
#include <gtest/gtest.h>
#include <omp.h>

#include "core/error.h"
#include "perf/backend_peak.h"
#include "perf/cpu_clock.h"
#include "perf/device_peak.h"

namespace tripod {
namespace {

double table_tflops(std::string_view device, PeakPrecision p) { return device_peak(device, p).flops / 1e12; }

TEST(DevicePeak, NamesAsDriversReportThem) {
  // nvidia-smi / cudaGetDeviceProperties names.
  EXPECT_DOUBLE_EQ(table_tflops("NVIDIA H100 80GB HBM3", PeakPrecision::BF16), 989.5);  // SXM
  EXPECT_DOUBLE_EQ(table_tflops("NVIDIA H100 80GB HBM3", PeakPrecision::FP32), 67);
  EXPECT_DOUBLE_EQ(table_tflops("NVIDIA H200", PeakPrecision::BF16), 989.5);
  EXPECT_DOUBLE_EQ(table_tflops("NVIDIA H200", PeakPrecision::FP32), 67);
  EXPECT_DOUBLE_EQ(table_tflops("NVIDIA A100-SXM4-80GB", PeakPrecision::BF16), 312);
  EXPECT_DOUBLE_EQ(table_tflops("NVIDIA A100-SXM4-80GB", PeakPrecision::TF32), 156);
  EXPECT_DOUBLE_EQ(table_tflops("NVIDIA A100 80GB PCIe", PeakPrecision::FP32), 19.5);
  EXPECT_DOUBLE_EQ(table_tflops("AMD Instinct MI300X", PeakPrecision::BF16), 1307.4);
}

TEST(DevicePeak, MostSpecificRowWins) {
  // "H100 PCIe" also contains "H100"; "L40S" also contains "L4"; "A100" also contains "A10".
  EXPECT_DOUBLE_EQ(table_tflops("NVIDIA H100 PCIe", PeakPrecision::BF16), 756.5);
  EXPECT_DOUBLE_EQ(table_tflops("NVIDIA H100 NVL", PeakPrecision::BF16), 835.5);
  EXPECT_DOUBLE_EQ(table_tflops("NVIDIA L40S", PeakPrecision::BF16), 362.05);
  EXPECT_DOUBLE_EQ(table_tflops("NVIDIA L4", PeakPrecision::BF16), 121);
  // Whole words: a plain substring test gave the L40 the L4's peaks (a third of its fp32) and the
  // A10G the A10's.
  EXPECT_DOUBLE_EQ(table_tflops("NVIDIA L40", PeakPrecision::FP32), 90.5);
  EXPECT_DOUBLE_EQ(table_tflops("NVIDIA L40", PeakPrecision::BF16), 181.05);
  EXPECT_FALSE(find_device_peak("NVIDIA A10G").has_value());
  EXPECT_DOUBLE_EQ(table_tflops("NVIDIA GH200 480GB", PeakPrecision::BF16), 989.5);  // not a word of "H200"
  EXPECT_DOUBLE_EQ(table_tflops("NVIDIA A10", PeakPrecision::FP32), 31.2);
  EXPECT_DOUBLE_EQ(table_tflops("NVIDIA H100 80GB HBM3", PeakPrecision::BF16), 989.5);
  EXPECT_DOUBLE_EQ(table_tflops("NVIDIA A10", PeakPrecision::BF16), 125);
  EXPECT_EQ(find_device_peak("NVIDIA A100-PCIE-40GB")->name, "NVIDIA A100 (SXM4 and PCIe)");
}

TEST(DevicePeak, MatchIsCaseInsensitive) {
  ASSERT_TRUE(find_device_peak("nvidia h200 nvl").has_value());
  EXPECT_DOUBLE_EQ(find_device_peak("nvidia h200 nvl")->bf16_tflops, 835.5);
}

TEST(DevicePeak, EveryRowIsDenseAndConsistent) {
  for (const DevicePeakSpec& s : known_device_peaks()) {
    EXPECT_GT(s.bf16_tflops, 0) << s.name;
    EXPECT_GT(s.fp32_tflops, 0) << s.name;
    // Tensor-core bf16 is about twice tf32 (L40S's datasheet: 362.05 vs 183, not quite 2x) and
    // well above the plain fp32 pipeline: a swapped column would fail here.
    if (s.tf32_tflops > 0) EXPECT_NEAR(s.bf16_tflops / s.tf32_tflops, 2.0, 0.05) << s.name;
    EXPECT_GT(s.bf16_tflops, s.fp32_tflops) << s.name;
    EXPECT_FALSE(s.datasheet.empty()) << s.name;
    // Each row is found by its own match string (no earlier row shadows it entirely).
    EXPECT_EQ(find_device_peak(s.match)->name, s.name);
  }
}

TEST(DevicePeak, UnknownDeviceOrMissingFigureIsAnErrorNamingIt) {
  EXPECT_FALSE(find_device_peak("Some Future Accelerator").has_value());
  try {
    device_peak("Some Future Accelerator", PeakPrecision::BF16);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Some Future Accelerator"), std::string::npos);
  }
  EXPECT_THROW(device_peak("NVIDIA L40S", PeakPrecision::FP64), Error);  // no fp64 figure
}

// A MIG instance is named after its GPU ("... MIG 1g.10gb") but runs on a share of its SMs: the
// whole GPU's peak would make its MFU look a seventh of what it is. Its peak is unknown unless stated.
TEST(DevicePeak, AMigSliceGetsNoWholeGpuPeak) {
  const std::string slice = "NVIDIA H100 80GB HBM3 MIG 1g.10gb";
  EXPECT_TRUE(is_mig_slice(slice));
  EXPECT_FALSE(is_mig_slice("NVIDIA H100 80GB HBM3"));
  EXPECT_FALSE(is_mig_slice("Some Migrated Accelerator"));  // a word, not a substring
  EXPECT_FALSE(find_device_peak(slice).has_value());
  try {
    device_peak(slice, PeakPrecision::BF16);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("MIG slice"), std::string::npos) << e.what();
  }
  const PeakFlops through_backend = backend_peak("cuda (" + slice + ", sm_90, device 0)", DType::BF16);
  EXPECT_EQ(through_backend.flops, 0);
  EXPECT_NE(through_backend.source.find("MIG slice"), std::string::npos) << through_backend.source;
  EXPECT_EQ(percent_of_peak_text(1e14, through_backend), "n/a");
  // A stated peak still counts, and the whole GPU keeps its row.
  EXPECT_DOUBLE_EQ(backend_peak("cuda (" + slice + ", sm_90, device 0)", DType::BF16, 140).flops, 140e12);
  EXPECT_DOUBLE_EQ(backend_peak("cuda (NVIDIA H100 80GB HBM3, sm_90, device 0)", DType::BF16).flops, 989.5e12);
}

TEST(DevicePeak, SourceSaysWhereTheFigureCameFrom) {
  const PeakFlops p = device_peak("NVIDIA H100 80GB HBM3", PeakPrecision::BF16);
  EXPECT_NE(p.source.find("datasheet"), std::string::npos);
  EXPECT_NE(p.source.find("bf16"), std::string::npos);
}

TEST(DevicePeak, CpuPeakKeepsItsBehaviour) {
  const PeakFlops f32 = nominal_cpu_peak(DType::F32), f64 = nominal_cpu_peak(DType::F64);
  // (0 where /proc/cpuinfo gives no clock, e.g. on some ARM kernels; the relations still hold.)
  EXPECT_GE(f32.flops, 0);
  EXPECT_DOUBLE_EQ(f64.flops * 2, f32.flops);  // half the FLOPs per cycle in fp64
  EXPECT_NE(f32.source.find("nominal CPU peak"), std::string::npos);
  EXPECT_DOUBLE_EQ(resolve_peak(12.5, DType::F32).flops, 12.5e12);
  EXPECT_DOUBLE_EQ(resolve_peak(0, DType::F32).flops, f32.flops);
}

// A VM's /proc/cpuinfo gives a fixed base clock (2445 MHz here, where the cores run at about 3090):
// the peak takes the measured clock when it is the faster, so no measured rate exceeds it.
TEST(DevicePeak, CpuPeakUsesTheMeasuredClockWhenFaster) {
  const double mhz = measured_cpu_clock_mhz();
#if defined(__x86_64__)
  EXPECT_GT(mhz, 200);  // a chain of dependent additions, one a cycle
  EXPECT_LT(mhz, 10000);
#else
  EXPECT_EQ(mhz, 0);
#endif
  EXPECT_EQ(measured_cpu_clock_mhz(), mhz);  // measured once per process
  const PeakFlops f32 = nominal_cpu_peak(DType::F32);
  const double per_thread_mhz = f32.flops / omp_get_max_threads() / 1e6;
  EXPECT_GE(per_thread_mhz * 1.0000001, mhz * 8);  // at least 8 FLOP/cycle at the measured clock
  EXPECT_NE(f32.source.find("measured"), std::string::npos) << f32.source;
}

}  // namespace
}  // namespace tripod
