// One transformer block's two halves, end to end, tensor-parallel vs unsplit on the same full
// inputs and parameters (random, so biases and LayerNorm gains are exercised):
//   attention: y = x + c_proj(attention(c_attn(ln_1(x))))   c_attn column-parallel by heads (q|k|v
//              blocks), attention on n_head/tp heads, c_proj row-parallel
//   MLP:       y = x + c_proj(gelu(c_fc(ln_2(x))))           c_fc column-, c_proj row-parallel
// with and without sequence parallelism, TP sizes {1, 2, 4} dividing the world, fp32 and fp64.
// Gradients are assembled to logical tensors with the shard maps and compared with the unsplit ones;
// under SP the LayerNorm and c_proj-bias gradients are summed over TP first, as a trainer does
// (tp_grad_needs_allreduce).
//
// Tolerances. tp = 1: bit-identical. tp > 1: the row-parallel output and the column-parallel input
// gradient are sums split over ranks, and shard GEMMs may take other OpenBLAS paths (see
// test_tp_linear.cpp), so every result moves by rounding, then passes through LayerNorm, softmax
// and GELU (well conditioned here: inputs O(1)). Normwise (max error / max |value| per tensor):
// 64 u, u the unit roundoff, i.e. fp32 3.8e-6 and fp64 7.1e-15; observed at most 2.1e-7 (3.5 u)
// and 4.6e-16 (4.2 u) at tp 2 and 4, while a bug moves results by O(1).
// Bit-identical at every tp: the attention kernel on this rank's heads of the unsplit qkv gives
// exactly the unsplit output, probabilities and qkv gradient of those heads (head-split attention
// changes no arithmetic); and without SP the replicated results (output, input gradient,
// LayerNorm and c_proj-bias gradients) are identical on every rank of the group.
#include <algorithm>
#include <map>

#include "support/test_backend.h"
#include "model/config.h"
#include "model/linear.h"
#include "mpi_test_util.h"
#include "parallel/tp_linear.h"
#include "parallel/tp_shard.h"
#include "tp_test_util.h"

namespace tripod::testing {
namespace {

constexpr int64_t kB = 2, kT = 8, kN = kB * kT, kC = 16, kH = 4, kF = 32;
constexpr double kEps = 1e-5;

ModelConfig block_config() {
  ModelConfig c;
  c.n_layer = 1, c.n_head = kH, c.d_model = kC, c.d_ff = kF, c.vocab_size = 8, c.context = kT;
  return c;
}

// Names of one half's parameters, and whether its inner op is attention (else GELU).
struct Half {
  std::string ln, col, row;
  bool attention;
  int64_t hidden() const { return attention ? 3 * kC : kF; }  // column-parallel outputs
  int64_t inner() const { return attention ? kC : kF; }       // row-parallel inputs
};
const Half kAttention{"h.0.ln_1", "h.0.attn.c_attn", "h.0.attn.c_proj", true};
const Half kMlp{"h.0.ln_2", "h.0.mlp.c_fc", "h.0.mlp.c_proj", false};

std::vector<std::string> param_names(const Half& h) {
  return {h.ln + ".weight", h.ln + ".bias", h.col + ".weight", h.col + ".bias", h.row + ".weight", h.row + ".bias"};
}

using Values = std::map<std::string, std::vector<double>>;

struct Outcome {
  std::vector<double> y, dx;                                  // this rank's tokens ([N,C] without SP)
  Values grads;                                               // logical (assembled) gradients
  std::vector<double> hidden, inner, probs, dinner, dhidden;  // activations (for the head-split check)
};

// Runs the half on this rank's shards; `group` = nullptr runs the unsplit reference with
// model/linear.h and the backend kernels alone.
Outcome run_half(Backend& be, DType dt, const Half& h, const Values& full, const tp::TpGroup* group,
                 const std::vector<double>& x_full, const std::vector<double>& dy_full) {
  const int t = group ? group->size() : 1, r = group ? group->rank() : 0;
  const bool sp = group && group->sequence_parallel;
  const int64_t Nl = sp ? kN / t : kN, n0 = sp ? r * Nl : 0, hid = h.hidden() / t, inn = h.inner() / t;
  const std::vector<ParamSpec> specs = gpt_param_specs(block_config());
  std::map<std::string, tp::TpShard> shards;
  std::map<std::string, Tensor> p, g;
  for (const ParamSpec& spec : specs) {
    if (!full.count(spec.name)) continue;
    const tp::TpShard s = tp::tp_shard(spec, t, r);
    shards.emplace(spec.name, s);
    p[spec.name] = tensor_of(be, s.local, dt, tp::extract_shard(s, full.at(spec.name)));
    g[spec.name] = be.alloc(s.local, dt);
  }
  const Tensor &ln_w = p[h.ln + ".weight"], &ln_b = p[h.ln + ".bias"], &col_w = p[h.col + ".weight"],
               &col_b = p[h.col + ".bias"], &row_w = p[h.row + ".weight"], &row_b = p[h.row + ".bias"];
  Tensor x = tensor_of(be, {Nl, kC}, dt, sub_matrix(x_full, kC, n0, n0 + Nl, 0, kC));
  Tensor ln = be.alloc({Nl, kC}, dt), mean = be.alloc({Nl}, dt), rstd = be.alloc({Nl}, dt);
  Tensor ln_full = sp ? be.alloc({kN, kC}, dt) : Tensor(), hidden = be.alloc({kN, hid}, dt);
  Tensor inner = be.alloc({kN, inn}, dt), probs = be.alloc({kB, kH / t, kT, kT}, dt), y = be.alloc({Nl, kC}, dt);
  Tensor partial = sp ? be.alloc({kN, kC}, dt) : Tensor();
  // forward
  be.layernorm_forward(ln, mean, rstd, x, ln_w, ln_b, kEps);
  if (group)
    tp::column_parallel_linear_forward(be, *group, hidden, ln, ln_full, col_w, col_b);
  else
    linear_forward(be, hidden, ln, col_w, col_b);
  if (h.attention)
    be.attention_forward(inner.reshape({kB, kT, inn}), probs, hidden.reshape({kB, kT, hid}), kH / t);
  else
    be.gelu_forward(inner, hidden);
  if (group)
    tp::row_parallel_linear_forward(be, *group, y, partial, inner, row_w, row_b);
  else
    linear_forward(be, y, inner, row_w, row_b);
  be.add(y, y, x);  // residual
  // backward
  Tensor dy = tensor_of(be, {Nl, kC}, dt, sub_matrix(dy_full, kC, n0, n0 + Nl, 0, kC));
  Tensor dy_full_buf = sp ? be.alloc({kN, kC}, dt) : Tensor(), dinner = be.alloc({kN, inn}, dt);
  Tensor dhidden = be.alloc({kN, hid}, dt), dln = be.alloc({Nl, kC}, dt),
         dln_full = sp ? be.alloc({kN, kC}, dt) : Tensor();
  if (group)
    tp::row_parallel_linear_backward(be, *group, dinner, g[h.row + ".weight"], g[h.row + ".bias"], dy, dy_full_buf,
                                     inner, row_w);
  else
    linear_backward(be, dinner, g[h.row + ".weight"], g[h.row + ".bias"], dy, inner, row_w, false);
  if (h.attention)
    be.attention_backward(dhidden.reshape({kB, kT, hid}), dinner.reshape({kB, kT, inn}), hidden.reshape({kB, kT, hid}),
                          probs, kH / t);
  else
    be.gelu_backward(dhidden, hidden, dinner);
  if (group)
    tp::column_parallel_linear_backward(be, *group, dln, dln_full, g[h.col + ".weight"], g[h.col + ".bias"], dhidden,
                                        sp ? ln_full : ln, col_w);
  else
    linear_backward(be, dln, g[h.col + ".weight"], g[h.col + ".bias"], dhidden, ln, col_w, false);
  Tensor dx = be.alloc({Nl, kC}, dt);
  be.copy(dy, dx);  // the residual passes the gradient through; LayerNorm's backward adds to it
  be.layernorm_backward(dx, g[h.ln + ".weight"], g[h.ln + ".bias"], dln, x, ln_w, mean, rstd);

  Outcome out;
  out.y = to_host_f64(be, y), out.dx = to_host_f64(be, dx);
  for (const auto& [name, shard] : shards) {
    if (group && tp::tp_grad_needs_allreduce(find_spec(specs, name), sp))
      group->comm.all_reduce(g[name], g[name], ReduceOp::Sum);
    out.grads[name] =
        group ? tp::assemble_full(group->comm, shard, to_host_f64(be, g[name])) : to_host_f64(be, g[name]);
  }
  out.hidden = to_host_f64(be, hidden), out.inner = to_host_f64(be, inner), out.probs = to_host_f64(be, probs);
  out.dinner = to_host_f64(be, dinner), out.dhidden = to_host_f64(be, dhidden);
  return out;
}

struct BlockCase {
  DType dtype;
  bool sequence_parallel;
};

class TpBlocks : public ::testing::TestWithParam<BlockCase> {};

// Columns of heads [r*H/t, (r+1)*H/t) in each of the q, k, v blocks of a [N, 3C] matrix.
std::vector<double> qkv_columns(const std::vector<double>& m, int r, int t) {
  const int64_t cl = kC / t;
  std::vector<double> out;
  for (int64_t n = 0; n < kN; ++n)
    for (int64_t b = 0; b < 3; ++b)
      for (int64_t c = 0; c < cl; ++c) out.push_back(m[static_cast<std::size_t>(n * 3 * kC + b * kC + r * cl + c)]);
  return out;
}

// The attention kernel on rank r's heads of the unsplit qkv reproduces the unsplit output,
// probabilities and qkv gradient of those heads bit for bit (what head-split attention relies on).
void expect_head_split_exact(Backend& be, DType dt, const Outcome& ref, int r, int t) {
  const int64_t cl = kC / t, hl = kH / t;
  Tensor qkv = tensor_of(be, {kB, kT, 3 * cl}, dt, qkv_columns(ref.hidden, r, t));
  Tensor out = be.alloc({kB, kT, cl}, dt), probs = be.alloc({kB, hl, kT, kT}, dt);
  be.attention_forward(out, probs, qkv, hl);
  expect_bitwise(to_host_f64(be, out), sub_matrix(ref.inner, kC, 0, kN, r * cl, (r + 1) * cl), "attention output");
  // probs [B, H, T, T]: heads [r*hl, (r+1)*hl) of each batch row.
  expect_bitwise(to_host_f64(be, probs),
                 sub_matrix(ref.probs, kH * kT * kT, 0, kB, r * hl * kT * kT, (r + 1) * hl * kT * kT),
                 "attention probabilities");
  Tensor dout = tensor_of(be, {kB, kT, cl}, dt, sub_matrix(ref.dinner, kC, 0, kN, r * cl, (r + 1) * cl));
  Tensor dqkv = be.alloc({kB, kT, 3 * cl}, dt);
  be.attention_backward(dqkv, dout, qkv, probs, hl);
  expect_bitwise(to_host_f64(be, dqkv), qkv_columns(ref.dhidden, r, t), "attention qkv gradient");
}

void check_half(const Half& h, DType dt, bool sp) {
  auto be = testing::make_test_backend();
  auto world = testing::test_world();
  Values full;
  uint64_t seed = 100;
  for (const ParamSpec& spec : gpt_param_specs(block_config())) {
    const auto names = param_names(h);
    if (std::find(names.begin(), names.end(), spec.name) == names.end()) continue;
    std::vector<double> v =
        to_host_f64(*be, random_tensor(*be, spec.shape, dt, ++seed, spec.shape.size() == 2 ? 0.3 : 0.1));
    if (spec.init == InitKind::Ones)
      for (double& e : v) e += 1.0;  // LayerNorm gains around 1
    full[spec.name] = v;
  }
  const auto x = to_host_f64(*be, random_tensor(*be, {kN, kC}, dt, 201)),
             dy = to_host_f64(*be, random_tensor(*be, {kN, kC}, dt, 202));
  const Outcome ref = run_half(*be, dt, h, full, nullptr, x, dy);
  const double rtol = 64 * unit_roundoff(dt);  // see the header comment
  for (int t : tp_sizes(world->size())) {
    SCOPED_TRACE("tp=" + std::to_string(t) + (sp ? " SP" : ""));
    auto comm = tp_group(*world, t);
    const tp::TpGroup group{*comm, sp};
    const int r = comm->rank();
    const Outcome got = run_half(*be, dt, h, full, &group, x, dy);
    const int64_t n0 = sp ? r * (kN / t) : 0, n1 = sp ? n0 + kN / t : kN;
    expect_same(got.y, sub_matrix(ref.y, kC, n0, n1, 0, kC), t == 1, rtol, "output");
    expect_same(got.dx, sub_matrix(ref.dx, kC, n0, n1, 0, kC), t == 1, rtol, "input gradient");
    if (!sp) expect_replicated(*comm, got.y, "output"), expect_replicated(*comm, got.dx, "input gradient");
    for (const auto& [name, grad] : ref.grads) expect_same(got.grads.at(name), grad, t == 1, rtol, name + " gradient");
    if (h.attention) expect_head_split_exact(*be, dt, ref, r, t);
  }
}

TEST_P(TpBlocks, AttentionHalf) { check_half(kAttention, GetParam().dtype, GetParam().sequence_parallel); }
TEST_P(TpBlocks, MlpHalf) { check_half(kMlp, GetParam().dtype, GetParam().sequence_parallel); }

INSTANTIATE_TEST_SUITE_P(Layouts, TpBlocks,
                         ::testing::Values(BlockCase{DType::F32, false}, BlockCase{DType::F32, true},
                                           BlockCase{DType::F64, false}, BlockCase{DType::F64, true}),
                         [](const auto& info) {
                           return dtype_name(info.param.dtype) + (info.param.sequence_parallel ? "_sp" : "");
                         });

}  // namespace
}  // namespace tripod::testing
