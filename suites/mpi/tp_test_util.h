// Helpers for the tensor-parallel suites (test_tp_*.cpp): the world split into TP groups, full
// inputs that every rank builds identically (so each rank can run the unsplit computation locally
// and compare its slice), slicing, and comparisons — bitwise, against a rigorous rounding bound,
// or normwise.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "comm/mpi_communicator.h"
#include "core/counter_rng.h"
#include "model/param_set.h"

namespace tripod::testing {

// The TP sizes of `candidates` that divide the world; the world is split into consecutive groups.
inline std::vector<int> tp_sizes(int world_size, std::vector<int> candidates = {1, 2, 4}) {
  std::vector<int> sizes;
  for (int t : candidates)
    if (world_size % t == 0) sizes.push_back(t);
  return sizes;
}

inline std::unique_ptr<Communicator> tp_group(const Communicator& world, int t) {
  return world.split(world.rank() / t, world.rank(), "tp" + std::to_string(t));
}

inline const std::vector<DType> kTpTypes = {DType::F32, DType::F64};

// Uniform in [-scale, scale), a function of (seed, element) only: the same tensor on every rank.
inline Tensor random_tensor(Backend& be, Shape shape, DType dt, uint64_t seed, double scale = 1.0) {
  const CounterRng rng(seed, "tp.test");
  std::vector<double> v(static_cast<std::size_t>(shape_numel(shape)));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = scale * (2 * rng.uniform(i) - 1);
  Tensor t = be.alloc(shape, dt);
  from_host_f64(be, v, t);
  return t;
}

inline Tensor tensor_of(Backend& be, Shape shape, DType dt, const std::vector<double>& values) {
  Tensor t = be.alloc(std::move(shape), dt);
  from_host_f64(be, values, t);
  return t;
}

// Copy of rows [r0, r1) of a tensor seen as [rows, width].
inline Tensor row_block(Backend& be, const Tensor& t, int64_t r0, int64_t r1) {
  const int64_t width = t.numel() / t.dim(0);
  Shape shape = t.shape();
  shape[0] = r1 - r0;
  Tensor out = be.alloc(shape, t.dtype());
  be.copy(t.view(r0 * width, {(r1 - r0) * width}), out.reshape({(r1 - r0) * width}));
  return out;
}

// Copy of columns [c0, c1) of a matrix [rows, cols].
inline Tensor column_block(Backend& be, const Tensor& t, int64_t c0, int64_t c1) {
  const int64_t rows = t.dim(0), cols = t.dim(1);
  std::vector<double> all = to_host_f64(be, t), part;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = c0; c < c1; ++c) part.push_back(all[static_cast<std::size_t>(r * cols + c)]);
  return tensor_of(be, {rows, c1 - c0}, t.dtype(), part);
}

// Rows [r*n, (r+1)*n) of each of the three q|k|v blocks of a [3C, ...] tensor, concatenated.
inline Tensor qkv_block(Backend& be, const Tensor& t, int rank, int tp) {
  const int64_t block = t.dim(0) / 3, n = block / tp, width = t.numel() / t.dim(0);
  std::vector<double> all = to_host_f64(be, t), part;
  for (int64_t b = 0; b < 3; ++b) {
    const auto first = all.begin() + (b * block + rank * n) * width;
    part.insert(part.end(), first, first + n * width);
  }
  Shape shape = t.shape();
  shape[0] = 3 * n;
  return tensor_of(be, shape, t.dtype(), part);
}

inline double unit_roundoff(DType dt) { return dt == DType::F32 ? std::ldexp(1.0, -24) : std::ldexp(1.0, -53); }

// gamma_k = k u / (1 - k u): the classic bound on the relative rounding error of a k-term sum or
// dot product computed in any order (Higham, Accuracy and Stability, 3.1): |fl(x.y) - x.y| <=
// gamma_k |x|.|y|. Two computations of the same dot product in different orders (a GEMM kernel's
// blocking, a sum split over ranks) therefore differ by at most 2 gamma_k |x|.|y|.
inline double gamma_k(int64_t k, DType dt) {
  const double ku = static_cast<double>(k) * unit_roundoff(dt);
  return ku / (1 - ku);
}

// |A| @ op(|B|) in fp64: A [m,k] row-major; B [k,n], or [n,k] when b_transposed (as W [out, in]).
inline std::vector<double> abs_product(const std::vector<double>& a, const std::vector<double>& b, int64_t m, int64_t k,
                                       int64_t n, bool b_transposed) {
  std::vector<double> c(static_cast<std::size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p)
        s += std::fabs(a[static_cast<std::size_t>(i * k + p)]) *
             std::fabs(b[static_cast<std::size_t>(b_transposed ? j * k + p : p * n + j)]);
      c[static_cast<std::size_t>(i * n + j)] = s;
    }
  return c;
}

// Elements [r0, r1) x [c0, c1) of a row-major [rows, cols] host matrix.
inline std::vector<double> sub_matrix(const std::vector<double>& m, int64_t cols, int64_t r0, int64_t r1, int64_t c0,
                                      int64_t c1) {
  std::vector<double> out;
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t c = c0; c < c1; ++c) out.push_back(m[static_cast<std::size_t>(r * cols + c)]);
  return out;
}

// Checks that `values` are the same, bit for bit, on every rank of `group` (replicated results).
inline void expect_replicated(Communicator& group, const std::vector<double>& values, const std::string& what) {
  std::vector<double> all(values.size() * static_cast<std::size_t>(group.size()));
  const auto view = [](const std::vector<double>& v) {
    return Tensor(
        std::make_shared<Storage>(const_cast<double*>(v.data()), v.size() * sizeof(double), Device::Host, nullptr), 0,
        Shape{static_cast<int64_t>(v.size())}, DType::F64);
  };
  group.all_gather(view(values), view(all));
  for (int r = 0; r < group.size(); ++r) {
    const auto first = all.begin() + static_cast<std::ptrdiff_t>(r * values.size());
    EXPECT_TRUE(std::equal(first, first + static_cast<std::ptrdiff_t>(values.size()), values.begin()))
        << what << ": differs between this rank and TP rank " << r << " (should be replicated)";
  }
}

// Every element equal, bit for bit (compared as doubles: fp32 widens exactly).
inline void expect_bitwise(const std::vector<double>& got, const std::vector<double>& ref, const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  std::size_t count = 0, first = 0;
  for (std::size_t i = 0; i < ref.size(); ++i)
    if (!(got[i] == ref[i] && std::signbit(got[i]) == std::signbit(ref[i])) &&
        !(std::isnan(got[i]) && std::isnan(ref[i])))
      if (count++ == 0) first = i;
  EXPECT_EQ(count, 0u) << what << ": " << count << " of " << ref.size() << " elements differ; first at " << first
                       << ": got " << (count ? got[first] : 0.0) << ", expected " << (count ? ref[first] : 0.0);
}

// |got - ref| <= bound elementwise.
inline void expect_within(const std::vector<double>& got, const std::vector<double>& ref,
                          const std::vector<double>& bound, const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  ASSERT_EQ(bound.size(), ref.size()) << what;
  std::size_t count = 0, first = 0;
  for (std::size_t i = 0; i < ref.size(); ++i)
    if (!(std::fabs(got[i] - ref[i]) <= bound[i]))
      if (count++ == 0) first = i;
  EXPECT_EQ(count, 0u) << what << ": " << count << " elements outside the bound; first at " << first << ": got "
                       << (count ? got[first] : 0.0) << ", expected " << (count ? ref[first] : 0.0) << " +- "
                       << (count ? bound[first] : 0.0);
}

// Normwise: max |got - ref| <= rtol * max |ref|.
inline void expect_close(const std::vector<double>& got, const std::vector<double>& ref, double rtol,
                         const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    diff = std::max(diff, std::fabs(got[i] - ref[i]));
    scale = std::max(scale, std::fabs(ref[i]));
  }
  EXPECT_LE(diff, rtol * scale) << what << ": max abs difference " << diff << " vs max |ref| " << scale << " (relative "
                                << diff / std::max(scale, 1e-300) << ", tolerance " << rtol << ")";
}

// Bitwise where the split leaves the arithmetic unchanged, normwise rtol where it reorders a sum.
inline void expect_same(const std::vector<double>& got, const std::vector<double>& ref, bool exact, double rtol,
                        const std::string& what) {
  if (exact)
    expect_bitwise(got, ref, what + " (bit-identical)");
  else
    expect_close(got, ref, rtol, what);
}

}  // namespace tripod::testing

namespace tripod::testing {

// Runs `body`, which must throw tripod::Error containing `expected` on every rank of `world`, and
// checks that the message is the same on every rank; then a barrier, so a rank that did not
// throw (and went on to communicate) shows up as a failure or a hang here, not in a later test.
template <typename Body>
void expect_same_error_everywhere(Communicator& world, const std::string& expected, Body&& body) {
  std::string message = "(no error)";
  try {
    body();
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_NE(message.find(expected), std::string::npos)
      << "message: " << message << "\nexpected to contain: " << expected;
  int32_t mine = static_cast<int32_t>(std::hash<std::string>{}(message)&0x7fffffff);
  std::vector<int32_t> all(static_cast<std::size_t>(world.size()));
  Tensor in(std::make_shared<Storage>(&mine, 4, Device::Host, nullptr), 0, Shape{1}, DType::I32);
  Tensor out(std::make_shared<Storage>(all.data(), all.size() * 4, Device::Host, nullptr), 0,
             Shape{static_cast<int64_t>(all.size())}, DType::I32);
  world.all_gather(in, out);
  for (int32_t h : all) EXPECT_EQ(h, all[0]) << "the error message differs between ranks; here: " << message;
  world.barrier();
}

}  // namespace tripod::testing
