// LayerNorm's arithmetic (backend/kernels/layernorm_math.h), replayed on the host as
// backend/cuda/kernels/layernorm.cu runs it, against cpu::layernorm_forward / layernorm_backward:
//   forward   a warp per row: each lane's layernorm_lane_sum, the warp's xor butterfly
//             (warp_butterfly_in_device_order, SumOf) -> mean; each lane's centred squares,
//             butterfly -> rstd; every element's output;
//   backward  a warp per row: each lane's two backward sums, each sum butterflied separately ->
//             means; dinp += layernorm_dinp; then dbias and dweight by the column-sum order
//             (column_sums_in_device_order; terms dout and layernorm_dweight_term), += into them.
//
// fp32 rows of whole groups of four (36, 768 channels) replay the kernels' grouped lanes
// (layernorm_math.h's kWidth 4); the rest the strided ones.
//
// Tolerances: relative to the largest element of each output, the caps kRelativeCap (1e-12 fp64,
// 1e-5 fp32). The replay differs from the CPU in the order of the row sums (32 strided lanes and a
// butterfly against one loop; the column sums' 16 warps against one loop), so its rounding
// differs by ~sqrt(terms) ulps of the partial sums: measured <= 6.3e-7 in fp32 and 2.1e-15 in fp64
// (the record of each run has every value), while a wrong term, mean or index is off by >= 1e-3. dinp is compared on the
// scale of its terms (see expect_backward_matches_cpu).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/kernels/layernorm_math.h"
#include "backend/kernels/row_reduce_math.h"
#include "kernel_math_test_util.h"

namespace tripod::kernels {
namespace {

using testing::kRelativeCap;
using testing::relative_difference;
using testing::uniform_values;

constexpr double kEps = 1e-5;

// The sum the warp's butterfly gives every lane, of one value per lane.
template <typename T, class LaneValue>
T warp_sum(const LaneValue& lane_value) {
  T lanes[kWarpLanes];
  for (int lane = 0; lane < kWarpLanes; ++lane) lanes[lane] = lane_value(lane);
  return warp_butterfly_in_device_order(lanes, SumOf{});
}

template <typename T>
struct Inputs {
  int64_t rows, channels;
  std::vector<T> x, weight, bias, dout;
};

// Rows with a non-zero mean (offset 0.5) and spread 2, so that both passes and the centring matter.
template <typename T>
Inputs<T> make_inputs(int64_t rows, int64_t channels, uint64_t seed) {
  return {rows,
          channels,
          uniform_values<T>(rows * channels, seed, "test.layernorm.x", -1.5, 2.5),
          uniform_values<T>(channels, seed, "test.layernorm.weight", 0.5, 1.5),
          uniform_values<T>(channels, seed, "test.layernorm.bias", -0.5, 0.5),
          uniform_values<T>(rows * channels, seed, "test.layernorm.dout", -1, 1)};
}

// ForwardRow of layernorm.cu over every row, with the lanes' channel groups the kernel takes for
// these channels (kWidth = layernorm_group_width: 4 for fp32 rows of whole groups).
template <typename T, int kWidth>
void forward_in_device_order(const Inputs<T>& in, std::vector<T>& out, std::vector<T>& mean, std::vector<T>& rstd) {
  const int64_t C = in.channels;
  for (int64_t r = 0; r < in.rows; ++r) {
    const T* x = in.x.data() + r * C;
    const T m = layernorm_mean(
        warp_sum<T>([&](int lane) { return layernorm_lane_sum<T, kWidth>(x, C, lane, kWarpLanes); }), C);
    const T s = layernorm_rstd(warp_sum<T>([&](int lane) {
                                 return layernorm_lane_centered_squares<T, kWidth>(x, m, C, lane, kWarpLanes);
                               }),
                               C, kEps);
    for (int64_t c = 0; c < C; ++c) out[r * C + c] = layernorm_output(x[c], m, s, in.weight[c], in.bias[c]);
    mean[r] = m;
    rstd[r] = s;
  }
}

// layernorm_backward_fused_kernel's dbias and dweight totals: a chunk (layernorm_grad_chunk_rows)
// a block; warp w of layernorm_grad_warps adds the chunk's rows w, w + warps, ... ascending into
// its partials from 0, the block adds the warps' partials in warp order from warp 0's, and the
// chunks' partials [chunks, 2C] go through the column sums (ChunkPartialColumns).
template <typename T, class Term>
std::vector<T> fused_column_totals(const Term& term, int64_t rows, int64_t channels) {
  const int warps = layernorm_grad_warps(channels, sizeof(T));
  EXPECT_GE(warps, 1) << channels << " channels";
  const int64_t chunk_rows = layernorm_grad_chunk_rows(rows), chunks = (rows + chunk_rows - 1) / chunk_rows;
  EXPECT_LE(chunks, kLayernormGradMaxChunks);
  std::vector<T> partials(static_cast<std::size_t>(chunks * channels));  // [chunks, C]
  for (int64_t chunk = 0; chunk < chunks; ++chunk) {
    const int64_t first = chunk * chunk_rows, end = std::min(rows, first + chunk_rows);
    for (int64_t c = 0; c < channels; ++c) {
      T block_total = 0;
      for (int w = 0; w < warps; ++w) {
        T warp_partial = 0;
        for (int64_t r = first + w; r < end; r += warps) warp_partial += term(r, c);
        block_total = w == 0 ? warp_partial : block_total + warp_partial;
      }
      partials[static_cast<std::size_t>(chunk * channels + c)] = block_total;
    }
  }
  return testing::column_sums_in_device_order<T>(
      [&](int64_t chunk, int64_t c) { return partials[static_cast<std::size_t>(chunk * channels + c)]; }, chunks,
      channels);
}

// BackwardRow of layernorm.cu over every row, then the WeightBiasColumns column sums, or (`fused`)
// the fused kernel's order of the same terms.
template <typename T, int kWidth>
void backward_in_device_order(const Inputs<T>& in, const std::vector<T>& mean, const std::vector<T>& rstd,
                              std::vector<T>& dinp, std::vector<T>& dweight, std::vector<T>& dbias, bool fused) {
  const int64_t C = in.channels;
  for (int64_t r = 0; r < in.rows; ++r) {
    const T* x = in.x.data() + r * C;
    const T* d = in.dout.data() + r * C;
    LayernormRowSums<T> lanes[kWarpLanes];
    for (int lane = 0; lane < kWarpLanes; ++lane)
      lanes[lane] =
          layernorm_lane_backward_sums<T, kWidth>(d, x, in.weight.data(), mean[r], rstd[r], C, lane, kWarpLanes);
    LayernormRowSums<T> sums;
    sums.dnorm = warp_sum<T>([&](int lane) { return lanes[lane].dnorm; });
    sums.dnorm_norm = warp_sum<T>([&](int lane) { return lanes[lane].dnorm_norm; });
    const LayernormRowSums<T> means = layernorm_backward_means(sums, C);
    for (int64_t c = 0; c < C; ++c) dinp[r * C + c] += layernorm_dinp(d[c], x[c], in.weight[c], mean[r], rstd[r], means);
  }
  auto dbias_term = [&](int64_t r, int64_t c) { return in.dout[r * C + c]; };
  auto dweight_term = [&](int64_t r, int64_t c) {
    return layernorm_dweight_term(in.dout[r * C + c], in.x[r * C + c], mean[r], rstd[r]);
  };
  const std::vector<T> dbias_totals = fused ? fused_column_totals<T>(dbias_term, in.rows, C)
                                            : testing::column_sums_in_device_order<T>(dbias_term, in.rows, C);
  const std::vector<T> dweight_totals = fused ? fused_column_totals<T>(dweight_term, in.rows, C)
                                              : testing::column_sums_in_device_order<T>(dweight_term, in.rows, C);
  for (int64_t c = 0; c < C; ++c) {  // WeightBiasColumns::finish
    dbias[c] += dbias_totals[c];
    dweight[c] += dweight_totals[c];
  }
}

// 1100: three chunks of the column sums; 8200: the fused backward's chunks of 17 rows
const int64_t kRows[] = {1, 5, 64, 1100, 8200};
const int64_t kChannels[] = {1, 7, 33, 36, 768, 769};  // 36, 768: fp32 lanes take groups of 4

std::string describe(int64_t rows, int64_t channels) { return std::to_string(rows) + " x " + std::to_string(channels); }

template <typename T>
void expect_forward_matches_cpu(uint64_t seed) {
  for (int64_t rows : kRows)
    for (int64_t channels : kChannels) {
      const Inputs<T> in = make_inputs<T>(rows, channels, seed);
      const auto n = static_cast<std::size_t>(rows * channels);
      std::vector<T> want_out(n), want_mean(rows), want_rstd(rows);
      cpu::layernorm_forward<T>(want_out.data(), want_mean.data(), want_rstd.data(), in.x.data(), in.weight.data(),
                                in.bias.data(), rows, channels, kEps);
      std::vector<T> got_out(n), got_mean(rows), got_rstd(rows);
      if (layernorm_group_width<T>(channels) == 4) forward_in_device_order<T, 4>(in, got_out, got_mean, got_rstd);
      else forward_in_device_order<T, 1>(in, got_out, got_mean, got_rstd);
      const double d_out = relative_difference(got_out, want_out), d_mean = relative_difference(got_mean, want_mean),
                   d_rstd = relative_difference(got_rstd, want_rstd);
      EXPECT_LE(d_out, kRelativeCap<T>) << "out, " << describe(rows, channels);
      EXPECT_LE(d_mean, kRelativeCap<T>) << "mean, " << describe(rows, channels);
      EXPECT_LE(d_rstd, kRelativeCap<T>) << "rstd, " << describe(rows, channels);
      const std::string shape = std::to_string(rows) + "x" + std::to_string(channels);
      testing::record_measure("out_" + shape, d_out);
      testing::record_measure("mean_" + shape, d_mean);
      testing::record_measure("rstd_" + shape, d_rstd);
    }
}

TEST(KernelLayernormMath, ForwardMatchesCpuFp32) { expect_forward_matches_cpu<float>(101); }
TEST(KernelLayernormMath, ForwardMatchesCpuFp64) { expect_forward_matches_cpu<double>(102); }

template <typename T>
void expect_backward_matches_cpu(uint64_t seed, bool fused) {
  for (int64_t rows : kRows)
    for (int64_t channels : kChannels) {
      const Inputs<T> in = make_inputs<T>(rows, channels, seed);
      // The statistics the forward saved (the CPU's, so that both backwards read the same ones).
      std::vector<T> out(static_cast<std::size_t>(rows * channels)), mean(rows), rstd(rows);
      cpu::layernorm_forward<T>(out.data(), mean.data(), rstd.data(), in.x.data(), in.weight.data(), in.bias.data(),
                                rows, channels, kEps);
      // All three gradients accumulate: start from non-zero values.
      const std::vector<T> dinp0 = uniform_values<T>(rows * channels, seed, "test.layernorm.dinp", -0.1, 0.1);
      const std::vector<T> dweight0 = uniform_values<T>(channels, seed, "test.layernorm.dweight", -0.1, 0.1);
      const std::vector<T> dbias0 = uniform_values<T>(channels, seed, "test.layernorm.dbias", -0.1, 0.1);
      std::vector<T> want_dinp = dinp0, want_dweight = dweight0, want_dbias = dbias0;
      cpu::layernorm_backward<T>(want_dinp.data(), want_dweight.data(), want_dbias.data(), in.dout.data(), in.x.data(),
                                 in.weight.data(), mean.data(), rstd.data(), rows, channels);
      std::vector<T> got_dinp = dinp0, got_dweight = dweight0, got_dbias = dbias0;
      if (layernorm_group_width<T>(channels) == 4)
        backward_in_device_order<T, 4>(in, mean, rstd, got_dinp, got_dweight, got_dbias, fused);
      else
        backward_in_device_order<T, 1>(in, mean, rstd, got_dinp, got_dweight, got_dbias, fused);
      // dinp is rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)): a difference of terms
      // of size rstd * |dnorm| that may cancel to ~0, and rounding is relative to the terms. With
      // one channel it cancels exactly (norm = 0, dnorm = its mean) and rstd = 1/sqrt(eps) = 316:
      // the replay gives exactly 0, as the CPU does now; an FMA-contracted d * w - mean(dnorm)
      // (the device's, or the CPU's when built with -ffp-contract=fast) leaves the product's
      // rounding error (an ulp of |dnorm|) times 316. So dinp's scale is the larger of its
      // largest element and max_r rstd_r * max_c |dout * weight|.
      double dinp_scale = testing::largest_magnitude(want_dinp);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < channels; ++c)
          dinp_scale = std::max(dinp_scale, std::fabs(static_cast<double>(rstd[r]) * in.dout[r * channels + c] *
                                                      in.weight[c]));
      const double d_dinp = testing::largest_difference(got_dinp, want_dinp) / dinp_scale,
                   d_dweight = relative_difference(got_dweight, want_dweight),
                   d_dbias = relative_difference(got_dbias, want_dbias);
      EXPECT_LE(d_dinp, kRelativeCap<T>) << "dinp, " << describe(rows, channels);
      EXPECT_LE(d_dweight, kRelativeCap<T>) << "dweight, " << describe(rows, channels);
      EXPECT_LE(d_dbias, kRelativeCap<T>) << "dbias, " << describe(rows, channels);
      if (channels > 1) {
        EXPECT_GT(relative_difference(got_dinp, dinp0), 1e-2);  // the row gradient was added
      }
      const std::string shape = std::string(fused ? "fused_" : "") + std::to_string(rows) + "x" + std::to_string(channels);
      testing::record_measure("dinp_" + shape, d_dinp);
      testing::record_measure("dweight_" + shape, d_dweight);
      testing::record_measure("dbias_" + shape, d_dbias);
    }
}

TEST(KernelLayernormMath, BackwardMatchesCpuFp32) { expect_backward_matches_cpu<float>(111, false); }
TEST(KernelLayernormMath, BackwardMatchesCpuFp64) { expect_backward_matches_cpu<double>(112, false); }
TEST(KernelLayernormMath, FusedBackwardMatchesCpuFp32) { expect_backward_matches_cpu<float>(113, true); }
TEST(KernelLayernormMath, FusedBackwardMatchesCpuFp64) { expect_backward_matches_cpu<double>(114, true); }

// The fused backward's partition depends only on the sizes: chunks of at least 16 rows, at most
// 512 of them (one column-sums chunk), covering every row; warps from the partials' size.
TEST(KernelLayernormMath, FusedBackwardPartition) {
  for (int64_t rows : {1, 16, 17, 8192, 8193, 1 << 20}) {
    const int64_t chunk_rows = layernorm_grad_chunk_rows(rows), chunks = (rows + chunk_rows - 1) / chunk_rows;
    EXPECT_GE(chunk_rows, kLayernormGradChunkRows) << rows;
    EXPECT_LE(chunks, kLayernormGradMaxChunks) << rows;
    EXPECT_EQ(column_chunks(chunks), 1) << rows;
    EXPECT_GE(chunks * chunk_rows, rows) << rows;
  }
  EXPECT_EQ(layernorm_grad_chunk_rows(8192), 16);
  EXPECT_EQ(layernorm_grad_chunk_rows(8200), 17);
  EXPECT_EQ(layernorm_grad_warps(768, 4), 8);  // GPT-2 fp32: 8 warps' [2][768] = 48 KiB
  EXPECT_EQ(layernorm_grad_warps(768, 8), 4);
  EXPECT_EQ(layernorm_grad_warps(1600, 4), 3);
  EXPECT_EQ(layernorm_grad_warps(6144, 4), 1);
  EXPECT_EQ(layernorm_grad_warps(6145, 4), 0);  // the two-pass form
  EXPECT_EQ(layernorm_grad_warps(0, 4), 0);
}

}  // namespace
}  // namespace tripod::kernels
