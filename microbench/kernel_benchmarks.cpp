// The memory-bound kernels of a training step, through the Backend, at the chosen model's shapes
// on one tensor-parallel rank. Each reports bytes_per_second from the bytes it must move, counted
// by hand below as compulsory traffic: every tensor it reads or writes counted once (an
// accumulated output is read and written), write-allocate and re-reads not counted. A kernel that
// makes extra passes over memory therefore shows a lower GB/s than one that streams once; compare
// with STREAM triad, measured in the same run. Attention also reports its GEMM FLOPs.
#include <functional>
#include <vector>

#include "microbench/bench_setup.h"
#include "model/param_spec.h"

namespace tripod::microbench {
namespace {

// A cheap, deterministic, sign-varying pattern in [-amplitude, amplitude] (Knuth's multiplicative
// hash of the index): the kernels' speed does not depend on the values, only that they are
// ordinary finite numbers, and a Philox fill of ~10^8 elements would cost more than the benchmark.
void fill_pattern(Backend& backend, const Tensor& t, double amplitude) {
  const int64_t n = t.numel();
  auto value = [amplitude](int64_t i) {
    const uint32_t h = static_cast<uint32_t>(i) * 2654435761u;
    return amplitude * (static_cast<double>(h >> 8) / static_cast<double>(1u << 23) - 1.0);
  };
  if (t.dtype() == DType::F64) {
    std::vector<double> host(static_cast<std::size_t>(n));
    for (int64_t i = 0; i < n; ++i) host[i] = value(i);
    backend.upload(host.data(), t);
  } else {
    std::vector<float> host(static_cast<std::size_t>(n));
    for (int64_t i = 0; i < n; ++i) host[i] = static_cast<float>(value(i));
    backend.upload(host.data(), t);
  }
}

using Op = std::function<void()>;

// Times the op that `prepare` returns (prepare allocates and fills outside the timing).
void time_kernel(benchmark::State& state, Backend& backend, double bytes, double flops,
                 const std::function<Op()>& prepare) {
  const Op op = prepare();
  op();  // untimed warm-up: threads started, pages touched
  backend.synchronize();
  for (auto _ : state) {
    op();
    backend.synchronize();  // a device's kernels are asynchronous: each iteration ends when it is done
    benchmark::ClobberMemory();
  }
  state.counters[kBytesCounter] = benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate);
  if (flops > 0)
    state.counters[kFlopsCounter] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
}

struct KernelRegistrar {
  const BenchSetup& setup;
  Backend& backend;
  BenchCatalog& catalog;
  void add(const std::string& kernel, const std::string& shape, double bytes, double flops,
           std::function<Op()> prepare) {
    BenchInfo info;
    info.kind = BenchKind::Kernel;
    info.dtype = setup.dtype;
    info.shape = shape;
    info.bytes_per_iteration = bytes;
    info.flops_per_iteration = flops;
    Backend& be = backend;
    register_timed(catalog, "kernel/" + kernel + "/" + shape, info, [&be, bytes, flops, prepare](benchmark::State& state) {
      time_kernel(state, be, bytes, flops, prepare);
    })->Unit(benchmark::kMicrosecond);
  }
};

// "1024x768": shapes in names without spaces or brackets, so --benchmark_filter needs no escaping.
std::string dims(std::initializer_list<int64_t> d) {
  std::string s;
  for (int64_t x : d) {
    if (!s.empty()) s += 'x';
    s += std::to_string(x);
  }
  return s;
}

}  // namespace

void register_kernel_benchmarks(const BenchSetup& setup, Backend& be, BenchCatalog& catalog) {
  const ModelConfig& m = setup.model;
  const DType dt = setup.dtype;
  const double s = static_cast<double>(dtype_size(dt));  // bytes per element
  const int64_t B = setup.batch, T = setup.seq_len, N = setup.tokens(), C = m.d_model;
  const int64_t F = m.d_ff / setup.tp, Vr = (m.vocab_size + setup.tp - 1) / setup.tp;
  const int64_t H = m.n_head / setup.tp, Ca = C / setup.tp;  // this rank's heads and their channels
  const int64_t P = count_params(gpt_param_specs(m)) / setup.tp;
  const double dN = static_cast<double>(N), dC = static_cast<double>(C), dF = static_cast<double>(F);
  const double dV = static_cast<double>(Vr), dCa = static_cast<double>(Ca);
  const double dT = static_cast<double>(T), dB = static_cast<double>(B), dH = static_cast<double>(H);
  KernelRegistrar reg{setup, be, catalog};

  // LayerNorm forward [N,C]: read inp[N,C], weight[C], bias[C]; write out[N,C], mean[N], rstd[N].
  reg.add(
      "layernorm_fwd", dims({N, C}), s * (2 * dN * dC + 2 * dC + 2 * dN), 0, [&be, dt, N, C, eps = m.layernorm_eps] {
        Tensor out = be.alloc({N, C}, dt), mean = be.alloc({N}, dt), rstd = be.alloc({N}, dt);
        Tensor inp = be.alloc({N, C}, dt), w = be.alloc({C}, dt), b = be.alloc({C}, dt);
        fill_pattern(be, inp, 2.0);
        be.fill(w, 1.0);
        return Op([&be, out, mean, rstd, inp, w, b, eps] { be.layernorm_forward(out, mean, rstd, inp, w, b, eps); });
      });
  // LayerNorm backward: read dout[N,C], inp[N,C], weight[C], mean[N], rstd[N]; read and write
  // dinp[N,C] (it accumulates), dweight[C], dbias[C]: 4NC + 2N + 5C elements. The kernel's second
  // pass over dout and inp (column blocks, for the weight gradients) is not counted.
  reg.add("layernorm_bwd", dims({N, C}), s * (4 * dN * dC + 2 * dN + 5 * dC), 0, [&be, dt, N, C] {
    Tensor dinp = be.alloc({N, C}, dt), dw = be.alloc({C}, dt), db = be.alloc({C}, dt);
    Tensor dout = be.alloc({N, C}, dt), inp = be.alloc({N, C}, dt), w = be.alloc({C}, dt);
    Tensor mean = be.alloc({N}, dt), rstd = be.alloc({N}, dt);
    fill_pattern(be, dout, 0.1);
    fill_pattern(be, inp, 2.0);
    be.fill(w, 1.0);
    be.fill(rstd, 1.0);
    return Op([=, &be] { be.layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd); });
  });
  // GELU forward on the MLP activation [N, F/tp]: read inp, write out: 2 N F elements.
  reg.add("gelu_fwd", dims({N, F}), s * 2 * dN * dF, 0, [&be, dt, N, F] {
    Tensor out = be.alloc({N, F}, dt), inp = be.alloc({N, F}, dt);
    fill_pattern(be, inp, 3.0);
    return Op([=, &be] { be.gelu_forward(out, inp); });
  });
  // GELU backward: read inp and dout, write dinp: 3 N F elements.
  reg.add("gelu_bwd", dims({N, F}), s * 3 * dN * dF, 0, [&be, dt, N, F] {
    Tensor dinp = be.alloc({N, F}, dt), inp = be.alloc({N, F}, dt), dout = be.alloc({N, F}, dt);
    fill_pattern(be, inp, 3.0);
    fill_pattern(be, dout, 0.1);
    return Op([=, &be] { be.gelu_backward(dinp, inp, dout); });
  });
  // Attention forward, this rank's H/tp heads (C/tp channels): read qkv[B,T,3C'], write out[B,T,C']
  // and probs[B,H',T,T]: 4NC' + B H' T^2 elements. FLOPs: QK^T and PV over the full T x T, the
  // nominal count (the CPU's products skip the masked key blocks, about 9/16 of the square at
  // T = 1024, so its rate reads as nominal FLOPs per second; the summary says so): 2 * 2 * B * T^2 * C'.
  const double probs = dB * dH * dT * dT;
  reg.add("attention_fwd", dims({B, T, H, m.head_dim()}), s * (4 * dN * dCa + probs), 4 * dB * dT * dT * dCa,
          [&be, dt, B, T, H, Ca] {
            Tensor out = be.alloc({B, T, Ca}, dt), pr = be.alloc({B, H, T, T}, dt);
            Tensor qkv = be.alloc({B, T, 3 * Ca}, dt);
            fill_pattern(be, qkv, 1.0);
            return Op([=, &be] { be.attention_forward(out, pr, qkv, H); });
          });
  // Attention backward: read dout[B,T,C'], qkv[B,T,3C'], probs[B,H',T,T]; write dqkv[B,T,3C']:
  // 7NC' + B H' T^2 elements. FLOPs: four T x T x hd GEMMs per head: 4 * 2 * B * T^2 * C'.
  reg.add("attention_bwd", dims({B, T, H, m.head_dim()}), s * (7 * dN * dCa + probs), 8 * dB * dT * dT * dCa,
          [&be, dt, B, T, H, Ca] {
            Tensor dqkv = be.alloc({B, T, 3 * Ca}, dt), dout = be.alloc({B, T, Ca}, dt);
            Tensor qkv = be.alloc({B, T, 3 * Ca}, dt), pr = be.alloc({B, H, T, T}, dt);
            fill_pattern(be, qkv, 1.0);
            fill_pattern(be, dout, 0.1);
            Tensor out = be.alloc({B, T, Ca}, dt);
            be.attention_forward(out, pr, qkv, H);  // real softmax probabilities
            return Op([=, &be] { be.attention_backward(dqkv, dout, qkv, pr, H); });
          });
  // Cross-entropy forward on this rank's logits [N, V/tp]: read logits, write losses[N]; targets
  // are int32: N V' + N elements + 4N bytes.
  auto targets_for = [&be, N, Vr] {
    Tensor t = be.alloc({N}, DType::I32);
    std::vector<int32_t> host(static_cast<std::size_t>(N));
    for (int64_t i = 0; i < N; ++i) host[i] = static_cast<int32_t>((i * 7919) % Vr);
    be.upload(host.data(), t);
    return t;
  };
  reg.add("cross_entropy_fwd", dims({N, Vr}), s * (dN * dV + dN) + 4 * dN, 0, [&be, dt, N, Vr, targets_for] {
    Tensor losses = be.alloc({N}, dt), logits = be.alloc({N, Vr}, dt), targets = targets_for();
    fill_pattern(be, logits, 4.0);
    return Op([=, &be] { be.cross_entropy_forward(losses, logits, targets); });
  });
  // Cross-entropy backward, in place: read and write logits[N, V'], read targets: 2 N V' elements
  // + 4N bytes (the logsumexp pass re-reads the row, not counted).
  reg.add("cross_entropy_bwd", dims({N, Vr}), s * 2 * dN * dV + 4 * dN, 0, [&be, dt, N, Vr, targets_for] {
    Tensor logits = be.alloc({N, Vr}, dt), targets = targets_for();
    fill_pattern(be, logits, 4.0);
    const double grad_scale = 1.0 / static_cast<double>(N);
    return Op([=, &be] { be.cross_entropy_backward(logits, targets, grad_scale); });
  });
  // AdamW over this rank's share of every parameter: read param, grad, m, v; write param, m, v:
  // 7P elements.
  reg.add("adamw", dims({P}), s * 7 * static_cast<double>(P), 0, [&be, dt, P] {
    Tensor p = be.alloc({P}, dt), g = be.alloc({P}, dt), mo = be.alloc({P}, dt), v = be.alloc({P}, dt);
    be.fill(p, 0.02);
    be.fill(g, 1e-3);
    return Op([=, &be] {
      be.adamw(p, g, mo, v, /*lr=*/6e-4, /*beta1=*/0.9, /*beta2=*/0.95, /*eps=*/1e-8, /*weight_decay=*/0.1,
               /*step=*/10, /*grad_scale=*/1.0);
    });
  });
}

}  // namespace tripod::microbench
