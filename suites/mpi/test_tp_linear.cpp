// Column- and row-parallel linear layers (parallel/tp_linear.h) against the unsplit layer
// (model/linear.h) on the same full inputs, which every rank builds and runs locally: every TP size
// in {1, 2, 4} dividing the world, with and without sequence parallelism, fp32 and fp64.
//
// What is bit-identical, and why the rest is not.
//  * tp = 1: everything (the same GEMM calls on the same data; collectives over one rank copy).
//  * Bias gradients: the column-parallel layer's is its slice of the same per-feature sums over the
//    same tokens in the same order (bias_grad is a plain loop, not BLAS); the row-parallel layer's,
//    without SP, is computed from the full (replicated) dout. Asserted bit for bit. So is the SP
//    gather of the input (pure data movement).
//  * Shard GEMMs compute the same dot products as the unsplit GEMM (column-parallel output and
//    weight gradient, row-parallel input and weight gradients) but not necessarily in the same
//    order. OpenBLAS picks a kernel and a code path per call from the matrix dimensions (0.3.21
//    on this SkylakeX machine: for sgemm, "small matrix" kernels when M*N*K <= 100^3 — with a
//    transposed A only if also M*N <= 1200 and K >= 32 — else the packed kernel; inside each,
//    separate paths for the tails of M and N), and not every path accumulates an output as one
//    FMA chain over k. Measured here, fp64: [16x40]@[40x32]^T gives a sequential FMA chain for
//    only 101 of 512 outputs, [16x24]@[24x32]^T for all. A shard has a different M or N, so it can
//    take another path: the row-parallel input gradient [16x32]@[32x24] and its tp=2 shard
//    [16x32]@[32x12] differ in 96 of 384 outputs (the last 4 of each shard's 12 columns, which
//    a 4-wide tail path computes in another order), while the column-parallel output
//    [16x24]@[24x32]^T and its shards match bit for bit. So these are held to the rigorous bound
//    below (a few ulp) rather than to bit-identity, which would test OpenBLAS's kernel selection
//    on one CPU.
//  * Where the split reorders a sum (row-parallel output: partial sums over input features added
//    across ranks; column-parallel input gradient: over output features; SP's row-parallel bias
//    gradient: over token blocks) the same bound holds, since it covers every summation order.
// The bound: two evaluations of a K-term dot product x.y in any orders differ by at most
// 2 gamma_K |x|.|y| (tp_test_util.h); a bias add counts as one more term.
#include "support/test_backend.h"
#include "model/linear.h"
#include "mpi_test_util.h"
#include "parallel/tp_linear.h"
#include "tp_test_util.h"

namespace tripod::testing {
namespace {

constexpr int64_t kN = 16, kI = 48, kO = 32;  // tokens, input features, output features

struct Unsplit {
  std::vector<double> x, w, b, dout;                          // inputs [N,I], [O,I], [O], [N,O]
  std::vector<double> y, dx, dw, db;                          // results [N,O], [N,I], [O,I], [O]
  std::vector<double> y_bound, dx_bound, dw_bound, db_bound;  // rounding bounds, same shapes
};

Unsplit unsplit(Backend& be, DType dt) {
  Tensor x = random_tensor(be, {kN, kI}, dt, 11), w = random_tensor(be, {kO, kI}, dt, 12, 0.3);
  Tensor b = random_tensor(be, {kO}, dt, 13), dout = random_tensor(be, {kN, kO}, dt, 14);
  Tensor y = be.alloc({kN, kO}, dt), dx = be.alloc({kN, kI}, dt), dw = be.alloc({kO, kI}, dt), db = be.alloc({kO}, dt);
  linear_forward(be, y, x, w, b);
  linear_backward(be, dx, dw, db, dout, x, w, false);
  Unsplit u;
  u.x = to_host_f64(be, x), u.w = to_host_f64(be, w), u.b = to_host_f64(be, b), u.dout = to_host_f64(be, dout);
  u.y = to_host_f64(be, y), u.dx = to_host_f64(be, dx), u.dw = to_host_f64(be, dw), u.db = to_host_f64(be, db);
  std::vector<double> dout_t(u.dout.size());  // [O,N]
  for (int64_t n = 0; n < kN; ++n)
    for (int64_t o = 0; o < kO; ++o)
      dout_t[static_cast<std::size_t>(o * kN + n)] = u.dout[static_cast<std::size_t>(n * kO + o)];
  u.y_bound = abs_product(u.x, u.w, kN, kI, kO, true);
  for (std::size_t i = 0; i < u.y_bound.size(); ++i)
    u.y_bound[i] = 2 * gamma_k(kI + 1, dt) * (u.y_bound[i] + std::fabs(u.b[i % kO]));
  u.dx_bound = abs_product(u.dout, u.w, kN, kO, kI, false);
  for (double& v : u.dx_bound) v *= 2 * gamma_k(kO, dt);
  u.dw_bound = abs_product(dout_t, u.x, kO, kN, kI, false);
  for (double& v : u.dw_bound) v *= 2 * gamma_k(kN, dt);
  u.db_bound.assign(kO, 0.0);
  for (std::size_t i = 0; i < u.dout.size(); ++i) u.db_bound[i % kO] += 2 * gamma_k(kN, dt) * std::fabs(u.dout[i]);
  return u;
}

// Bitwise when `exact`, else within the elementwise bound.
void expect_result(const std::vector<double>& got, const std::vector<double>& ref, const std::vector<double>& bound,
                   bool exact, const std::string& what) {
  if (exact)
    expect_bitwise(got, ref, what + " (bit-identical)");
  else
    expect_within(got, ref, bound, what);
}

std::vector<double> slice(const std::vector<double>& v, int64_t a, int64_t b) { return {v.begin() + a, v.begin() + b}; }

struct Case {
  DType dtype;
  bool sequence_parallel;
};

class TpLinear : public ::testing::TestWithParam<Case> {};

TEST_P(TpLinear, ColumnParallel) {
  const auto [dt, sp] = GetParam();
  auto be = testing::make_test_backend();
  auto world = testing::test_world();
  const Unsplit u = unsplit(*be, dt);
  for (int t : tp_sizes(world->size())) {
    SCOPED_TRACE("tp=" + std::to_string(t) + (sp ? " SP" : ""));
    auto comm = tp_group(*world, t);
    const tp::TpGroup group{*comm, sp};
    const int r = comm->rank();
    const bool one = t == 1;
    const int64_t Ol = kO / t, Ns = kN / t, o0 = r * Ol;
    Tensor w = tensor_of(*be, {Ol, kI}, dt, sub_matrix(u.w, kI, o0, o0 + Ol, 0, kI));
    Tensor b = tensor_of(*be, {Ol}, dt, slice(u.b, o0, o0 + Ol));
    Tensor inp = sp ? tensor_of(*be, {Ns, kI}, dt, sub_matrix(u.x, kI, r * Ns, (r + 1) * Ns, 0, kI))
                    : tensor_of(*be, {kN, kI}, dt, u.x);
    Tensor gathered = sp ? be->alloc({kN, kI}, dt) : Tensor();
    Tensor out = be->alloc({kN, Ol}, dt);
    tp::column_parallel_linear_forward(*be, group, out, inp, gathered, w, b);
    if (sp) expect_bitwise(to_host_f64(*be, gathered), u.x, "gathered input");
    expect_result(to_host_f64(*be, out), sub_matrix(u.y, kO, 0, kN, o0, o0 + Ol),
                  sub_matrix(u.y_bound, kO, 0, kN, o0, o0 + Ol), one, "output");

    Tensor dout = tensor_of(*be, {kN, Ol}, dt, sub_matrix(u.dout, kO, 0, kN, o0, o0 + Ol));
    Tensor dinp = be->alloc({sp ? Ns : kN, kI}, dt), dinp_full = sp ? be->alloc({kN, kI}, dt) : Tensor();
    Tensor dw = be->alloc({Ol, kI}, dt), db = be->alloc({Ol}, dt);
    tp::column_parallel_linear_backward(*be, group, dinp, dinp_full, dw, db, dout, sp ? gathered : inp, w);
    const int64_t n0 = sp ? r * Ns : 0, n1 = sp ? n0 + Ns : kN;
    expect_result(to_host_f64(*be, dinp), sub_matrix(u.dx, kI, n0, n1, 0, kI),
                  sub_matrix(u.dx_bound, kI, n0, n1, 0, kI), one, "input gradient");
    if (!sp) expect_replicated(*comm, to_host_f64(*be, dinp), "input gradient");
    expect_result(to_host_f64(*be, dw), sub_matrix(u.dw, kI, o0, o0 + Ol, 0, kI),
                  sub_matrix(u.dw_bound, kI, o0, o0 + Ol, 0, kI), one, "weight gradient");
    expect_bitwise(to_host_f64(*be, db), slice(u.db, o0, o0 + Ol), "bias gradient");
  }
}

TEST_P(TpLinear, RowParallel) {
  const auto [dt, sp] = GetParam();
  auto be = testing::make_test_backend();
  auto world = testing::test_world();
  const Unsplit u = unsplit(*be, dt);
  for (int t : tp_sizes(world->size())) {
    SCOPED_TRACE("tp=" + std::to_string(t) + (sp ? " SP" : ""));
    auto comm = tp_group(*world, t);
    const tp::TpGroup group{*comm, sp};
    const int r = comm->rank();
    const bool one = t == 1;
    const int64_t Il = kI / t, Ns = kN / t, i0 = r * Il;
    const int64_t n0 = sp ? r * Ns : 0, n1 = sp ? n0 + Ns : kN;  // the tokens this rank's output holds
    Tensor w = tensor_of(*be, {kO, Il}, dt, sub_matrix(u.w, kI, 0, kO, i0, i0 + Il));
    Tensor b = tensor_of(*be, {kO}, dt, u.b);
    Tensor inp = tensor_of(*be, {kN, Il}, dt, sub_matrix(u.x, kI, 0, kN, i0, i0 + Il));
    Tensor out = be->alloc({n1 - n0, kO}, dt), partial = sp ? be->alloc({kN, kO}, dt) : Tensor();
    tp::row_parallel_linear_forward(*be, group, out, partial, inp, w, b);
    expect_result(to_host_f64(*be, out), sub_matrix(u.y, kO, n0, n1, 0, kO), sub_matrix(u.y_bound, kO, n0, n1, 0, kO),
                  one, "output");
    if (!sp) expect_replicated(*comm, to_host_f64(*be, out), "output");

    Tensor dout = tensor_of(*be, {n1 - n0, kO}, dt, sub_matrix(u.dout, kO, n0, n1, 0, kO));
    Tensor dout_gathered = sp ? be->alloc({kN, kO}, dt) : Tensor();
    Tensor dinp = be->alloc({kN, Il}, dt), dw = be->alloc({kO, Il}, dt), db = be->alloc({kO}, dt);
    tp::row_parallel_linear_backward(*be, group, dinp, dw, db, dout, dout_gathered, inp, w);
    expect_result(to_host_f64(*be, dinp), sub_matrix(u.dx, kI, 0, kN, i0, i0 + Il),
                  sub_matrix(u.dx_bound, kI, 0, kN, i0, i0 + Il), one, "input gradient");
    expect_result(to_host_f64(*be, dw), sub_matrix(u.dw, kI, 0, kO, i0, i0 + Il),
                  sub_matrix(u.dw_bound, kI, 0, kO, i0, i0 + Il), one, "weight gradient");
    if (sp) {
      // This rank's tokens only; the trainer sums it over TP (tp_grad_needs_allreduce).
      comm->all_reduce(db, db, ReduceOp::Sum);
      expect_result(to_host_f64(*be, db), u.db, u.db_bound, one, "bias gradient (partial, summed over TP)");
    } else {
      expect_bitwise(to_host_f64(*be, db), u.db, "bias gradient");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, TpLinear,
                         ::testing::Values(Case{DType::F32, false}, Case{DType::F32, true}, Case{DType::F64, false},
                                           Case{DType::F64, true}),
                         [](const auto& info) {
                           return dtype_name(info.param.dtype) + (info.param.sequence_parallel ? "_sp" : "");
                         });

}  // namespace
}  // namespace tripod::testing
