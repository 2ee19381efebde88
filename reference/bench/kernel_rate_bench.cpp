#include "bench/kernel_rate_bench.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/backend_factory.h"
#include "backend/transfer.h"
#include "bench/timed_cases.h"
#include "bench/timed_regions.h"
#include "core/error.h"
#include "core/output_file.h"

namespace tripod::bench {

using nlohmann::json;

void run_kernel_rate(const KernelRateOptions& o) {
  const DType dt = parse_dtype(o.dtype);
  check(dt == DType::F32 || dt == DType::F64, "kernel-rate: --dtype fp32 or fp64, not ", o.dtype);
  check(o.tokens > 0 && o.channels > 0 && o.vocab > 0, "kernel-rate: --tokens, --channels and --vocab must be positive");
  // A region is at most kMaxCallsPerRegion calls: a longer --min-time-ms was cut short while the header
  // still promised it.
  check(o.min_time_ms >= 0 && o.min_time_ms <= kMaxRegionMs, "kernel-rate: --min-time-ms must be 0 to ", kMaxRegionMs,
        " (got ", o.min_time_ms, ")");
  const int64_t n = o.tokens, c = o.channels, v = o.vocab;
  // Attention's shape: B sequences of T tokens, H heads.
  check(o.context > 0 && o.heads >= 0, "kernel-rate: --context must be positive and --heads not negative");
  const int64_t seq = std::min(o.context, n), heads = o.heads > 0 ? o.heads : std::max<int64_t>(1, c / 64);
  check(n % seq == 0, "kernel-rate: --context ", seq, " does not divide --tokens ", n);
  check(c % heads == 0, "kernel-rate: --heads ", heads, " does not divide --channels ", c);
  const int64_t batch = n / seq;
  auto backend = make_backend(o.backend);
  Backend& b = *backend;
  const double s = static_cast<double>(dtype_size(dt)), nc = static_cast<double>(n * c);
  // [N, C] activations, their gradients, [N, 4C] for GELU, [N, V] logits.
  Tensor x = b.alloc({n, c}, dt), y = b.alloc({n, c}, dt), a2 = b.alloc({n, c}, dt), dx = b.alloc({n, c}, dt);
  Tensor w = b.alloc({c}, dt), bias = b.alloc({c}, dt), dw = b.alloc({c}, dt), db = b.alloc({c}, dt);
  Tensor mean = b.alloc({n}, dt), rstd = b.alloc({n}, dt);
  Tensor h = b.alloc({n, 4 * c}, dt), dh = b.alloc({n, 4 * c}, dt), hout = b.alloc({n, 4 * c}, dt);
  Tensor m = b.alloc({n, c}, dt), var = b.alloc({n, c}, dt), dbias4 = b.alloc({4 * c}, dt);
  // The logits' rows padded as the trainer pads them (Backend::gemm_row_multiple: 50257 -> 50264 on
  // CUDA), so the window rows run the kernels training runs (a padded operand copy would take the
  // unfused path); the padding is never in a window's softmax. The bytes count V columns.
  const int64_t row_multiple = b.gemm_row_multiple(), vp = (v + row_multiple - 1) / row_multiple * row_multiple;
  Tensor logits = b.alloc({n, vp}, dt), losses = b.alloc({n}, dt), targets = b.alloc({n}, DType::I32);
  Tensor qkv = b.alloc({batch, seq, 3 * c}, dt), att = b.alloc({batch, seq, c}, dt), datt = b.alloc({batch, seq, c}, dt);
  Tensor probs = b.alloc({batch, heads, seq, seq}, dt), dqkv = b.alloc({batch, seq, 3 * c}, dt);
  // The single-device loss's window forms over the whole vocabulary (what training runs), and the
  // embedding's gradients: [V, C] table, [T, C] positions.
  Tensor row_max = b.alloc({n}, dt), sums = b.alloc({2, n}, dt), lse = b.alloc({n}, dt);
  Tensor dwte = b.alloc({v, c}, dt), dwpe = b.alloc({seq, c}, dt), tokens = b.alloc({n}, DType::I32);
  const VocabWindow whole{0, v, v};
  uint64_t seed = 1;
  for (const Tensor* t : {&x, &y, &a2, &dx, &w, &bias, &h, &dh, &logits, &qkv, &datt}) fill_random(b, *t, seed++);
  b.fill(var, 1.0);
  std::vector<int32_t> target_ids(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) target_ids[static_cast<std::size_t>(i)] = static_cast<int32_t>((i * 7919) % v);
  b.upload(target_ids.data(), targets);
  // Token ids with repeats, as text has (about 8 tokens a row): the token gradient adds runs.
  std::vector<int32_t> token_ids(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) token_ids[static_cast<std::size_t>(i)] = static_cast<int32_t>((i * 7919) % (n / 8 + 1) % v);
  b.upload(token_ids.data(), tokens);
  b.layernorm_forward(y, mean, rstd, x, w, bias, 1e-5);  // statistics for the backward
  b.attention_forward(att, probs, qkv, heads);            // real probabilities for the backward
  const double square = static_cast<double>(batch * heads) * static_cast<double>(seq * seq);
  const double products = static_cast<double>(batch) * static_cast<double>(seq * seq) * static_cast<double>(c);

  // The optimizer's shape of work: AdamW over [N, C] in 96 runs, half of them 768 elements (as
  // GPT-2's LayerNorm weights and biases), half the rest (its matrices), alternating weight decay:
  // one adamw_runs call (CUDA: one launch) against a call of adamw a run. Both move the adamw row's
  // bytes.
  std::vector<AdamWRun> adamw_runs;
  {
    const int64_t small = std::min<int64_t>(768, n * c / 96), large = (n * c - 48 * small) / 48;
    for (int64_t r = 0, at = 0; r < 96; ++r) {
      const int64_t length = r % 2 ? small : (r == 94 ? n * c - at - small : large);
      adamw_runs.push_back({at, length, r % 2 ? 0.0 : 0.1});
      at += length;
    }
  }
  auto flat = [&](const Tensor& t) { return t.view(0, {t.numel()}); };

  std::vector<KernelCase> cases = {
      // The baseline copies [N, 4C] (GPT-2 at N 8192: 2 x 100 MB), well past a GPU's L2 (50-60 MB on
      // an H200), so it is the device memory's rate; a copy of [N, C] would be partly served from L2.
      {"copy", 2 * 4 * nc * s, [&] { b.copy(h, hout); }},
      {"add", 3 * nc * s, [&] { b.add(y, x, a2); }},
      {"bias_add", 2 * nc * s, [&] { b.bias_add(y, bias); }},
      {"layernorm fwd", 2 * nc * s, [&] { b.layernorm_forward(y, mean, rstd, x, w, bias, 1e-5); }},
      {"layernorm bwd", 4 * nc * s, [&] { b.layernorm_backward(dx, dw, db, a2, x, w, mean, rstd); }},
      {"gelu fwd", 2 * 4 * nc * s, [&] { b.gelu_forward(hout, h); }},
      {"gelu bwd", 3 * 4 * nc * s, [&] { b.gelu_backward(dh, h, hout); }},
      {"adamw", 7 * nc * s, [&] { b.adamw(y, a2, m, var, 1e-4, 0.9, 0.95, 1e-8, 0.1, 10, 1.0); }},
      {"adamw 96 runs (1 call)", 7 * nc * s,
       [&] { b.adamw_runs(flat(y), flat(a2), flat(m), flat(var), adamw_runs, 1e-4, 0.9, 0.95, 1e-8, 10, 1.0); }},
      {"adamw 96 runs apart", 7 * nc * s, [&] {
         for (const AdamWRun& r : adamw_runs) {
           auto span = [&](const Tensor& t) { return t.view(r.offset, {r.length}); };
           b.adamw(span(y), span(a2), span(m), span(var), 1e-4, 0.9, 0.95, 1e-8, r.weight_decay, 10, 1.0);
         }
       }},
      {"cross-entropy fwd", static_cast<double>(n * v) * s, [&] { b.cross_entropy_forward(losses, logits, targets); }},
      // In place: every call turns the logits into gradients of the previous call's; the traffic is the same.
      {"cross-entropy bwd", 2.0 * static_cast<double>(n * v) * s, [&] { b.cross_entropy_backward(logits, targets, 1.0); }},
      // Two passes over the logits (max, then the sum of exponentials); the backward reads and writes them once.
      {"cross-entropy window fwd", 2.0 * static_cast<double>(n * v) * s,
       [&] {
         b.logits_row_max(row_max, logits, targets, whole);
         b.logits_exp_sums(sums, logits, row_max, targets, whole);
         b.cross_entropy_from_sums(losses, lse, row_max, sums, targets);
       }},
      // The same statistics in one pass (Backend::logits_stats: an online max and sum on a device;
      // the CPU's is the two passes): the logits read once.
      {"ce window fwd, 1 pass", static_cast<double>(n * v) * s,
       [&] {
         b.logits_stats(row_max, sums, logits, targets, whole);
         b.cross_entropy_from_sums(losses, lse, row_max, sums, targets);
       }},
      {"cross-entropy window bwd", 2.0 * static_cast<double>(n * v) * s,
       [&] { b.cross_entropy_backward_window(logits, lse, targets, whole, 1.0); }},
      // A training forward's loss with its gradient (Backend::cross_entropy_with_gradient: each row
      // read once from memory), against the 1-pass forward then the backward. Both count the logits
      // read and written once, so their GB/s compare as their times do.
      {"ce fwd+bwd, 1 kernel", 2.0 * static_cast<double>(n * v) * s,
       [&] { b.cross_entropy_with_gradient(losses, logits, targets, v, 1.0); }},
      {"ce fwd then bwd", 2.0 * static_cast<double>(n * v) * s,
       [&] {
         b.logits_stats(row_max, sums, logits, targets, whole);
         b.cross_entropy_from_sums(losses, lse, row_max, sums, targets);
         b.cross_entropy_backward_window(logits, lse, targets, whole, 1.0);
       }},
      // dout read twice (token and position gradients), the touched table rows read and written.
      {"embedding bwd", (2 * nc + 2.0 * static_cast<double>((n / 8 + 1 < v ? n / 8 + 1 : v) * c)) * s,
       [&] { b.embedding_backward(dwte, dwpe, y, tokens, seq); }},
      {"attention fwd", (4 * nc + square) * s, [&] { b.attention_forward(att, probs, qkv, heads); }, 4 * products},
      {"attention bwd", (7 * nc + square) * s, [&] { b.attention_backward(dqkv, datt, qkv, probs, heads); },
       8 * products},
  };
  Tensor proj_w;                  // the bf16 cases' [C, C] weight and its prepared copies: they
  std::vector<Tensor> proj_ops;   // outlive the block below, as the timed calls read them
  Tensor dqkv_bias;               // c_attn's bias gradient for the attention backward's operand, likewise
  std::vector<Tensor> qkv_ops;    // c_attn's prepared operands, its bias and outputs (bf16, fp32), likewise
  Tensor qkv_bias, qkv16, qkv32;
  Tensor logits16;                // bf16-mixed's bf16 logits, likewise
  Tensor h16, hout16;             // and its bf16 pre-activation fc and gradient of gelu(fc)
  Tensor att_qkv16, datt16;       // and attention's qkv and output gradient where the model keeps them in bf16
  if (dt == DType::F32) {
    // The same under the bf16-mixed policy: products on bf16 operands (bf16 tensor cores on a GPU).
    auto bf16_operands = [&b](const std::function<void()>& call) {
      return [&b, call] {
        b.set_fp32_matmul(Fp32Matmul::Bf16Operands);
        call();
        b.set_fp32_matmul(Fp32Matmul::Exact);
      };
    };
    // A linear layer's output gradient [N, 4C] (GPT-2's c_fc) rounded for its GEMMs with its bias
    // gradient: in the copy's pass (gemm_operands with the bias; CUDA fuses them), and as two calls.
    // Both count the same bytes (fp32 read once, bf16 written), so their GB/s compare directly.
    const double copy_bytes = 4 * nc * (s + 2);
    cases.push_back({"bias_grad+bf16 (fused)", copy_bytes, bf16_operands([&] { b.gemm_operands({dh}, dbias4); })});
    cases.push_back({"bias_grad, bf16 apart", copy_bytes, bf16_operands([&] {
                       b.bias_grad(dbias4, dh);
                       b.gemm_operands({dh});
                     })});
    // The MLP's gelu(fc) [N, 4C] as c_proj's bf16 operand: straight from fc (Backend::gelu_operand,
    // one pass on a GPU), and as the fp32 GELU then its copy (what the model did before). Both
    // count the same bytes (fc read once, the bf16 operand written), so their GB/s compare directly.
    cases.push_back({"gelu->bf16 (fused)", copy_bytes, bf16_operands([&] { b.gelu_operand(h); })});
    cases.push_back({"gelu, bf16 apart", copy_bytes, bf16_operands([&] {
                       b.gelu_forward(hout, h);
                       b.gemm_operands({hout});
                     })});
    // ln1/ln2 [N, C] as their GEMM's bf16 operand: in the LayerNorm's pass (layernorm_operand) and
    // as the fp32 output then its copy. Both count x read once and the bf16 operand written.
    const double norm_bytes = nc * (s + 2);
    cases.push_back({"layernorm->bf16 (fused)", norm_bytes,
                     bf16_operands([&] { b.layernorm_operand(mean, rstd, x, w, bias, 1e-5); })});
    cases.push_back({"layernorm, bf16 apart", norm_bytes, bf16_operands([&] {
                       b.layernorm_forward(y, mean, rstd, x, w, bias, 1e-5);
                       b.gemm_operands({y});
                     })});
    // Its backward: d fc = gelu_backward(fc, d gelu) as c_fc's bf16 operand with c_fc's bias
    // gradient, in one pass (gelu_backward_operand) and as the fp32 gradient then its fused copy.
    // Both count fc and d gelu read once and the bf16 operand written.
    const double backward_bytes = 4 * nc * (2 * s + 2);
    cases.push_back({"gelu bwd+db+bf16 (fused)", backward_bytes,
                     bf16_operands([&] { b.gelu_backward_operand(h, hout, dbias4); })});
    cases.push_back({"gelu bwd, db+bf16 apart", backward_bytes, bf16_operands([&] {
                       b.gelu_backward(dh, h, hout);
                       b.gemm_operands({dh}, dbias4);
                     })});
    // bf16-mixed's pre-activation fc is bf16 (model/gpt.h's rounded_activation_dtype), and the
    // gradient of gelu(fc) the backward reads: the same two fused producers reading them, their
    // bytes halved.
    h16 = b.alloc(h.shape(), DType::BF16);
    hout16 = b.alloc(hout.shape(), DType::BF16);
    b.convert(h, h16);
    b.convert(hout, hout16);
    cases.push_back({"gelu->bf16, bf16 fc", 4 * nc * (2 + 2), bf16_operands([&] { b.gelu_operand(h16); })});
    cases.push_back({"gelu bwd+db+bf16, bf16 fc, d", 4 * nc * (2 + 2 + 2),
                     bf16_operands([&] { b.gelu_backward_operand(h16, hout16, dbias4); })});
    // The loss gradient [N, V] as the LM head's bf16 operand: written from the logits in one pass
    // (cross_entropy_backward_window_operand; the logits stay as they are, so every call reads the
    // same ones) and as the in-place gradient then its copy. Both count the logits read once and the
    // bf16 operand written.
    const double loss_bytes = static_cast<double>(n * v) * (s + 2);
    cases.push_back({"ce window bwd->bf16 (fused)", loss_bytes,
                     bf16_operands([&] { b.cross_entropy_backward_window_operand(logits, lse, targets, whole, 1.0); })});
    cases.push_back({"ce window bwd, bf16 apart", loss_bytes, bf16_operands([&] {
                       b.cross_entropy_backward_window(logits, lse, targets, whole, 1.0);
                       b.gemm_operands({logits});
                     })});
    // bf16-mixed's logits are bf16 (model/gpt.h's rounded_activation_dtype): the loss's one-pass
    // statistics read them once, its gradient reads and writes them in place, the LM head's operand
    // (every call turns the previous call's gradients into new ones; the traffic is the same).
    logits16 = b.alloc({n, vp}, DType::BF16);
    b.convert(logits, logits16);
    const double logits16_bytes = static_cast<double>(n * v) * 2;
    cases.push_back({"ce window fwd, bf16 logits", logits16_bytes, [&] {
                       b.logits_stats(row_max, sums, logits16, targets, whole);
                       b.cross_entropy_from_sums(losses, lse, row_max, sums, targets);
                     }});
    cases.push_back({"ce window bwd, bf16 logits", 2 * logits16_bytes,
                     [&] { b.cross_entropy_backward_window(logits16, lse, targets, whole, 1.0); }});
    // GPT-2's training forward under bf16-mixed: the loss with its gradient in one kernel, against
    // the two rows above in turn (both counted as the logits read and written once, as above).
    cases.push_back({"ce fwd+bwd, 1 kernel, bf16", 2 * logits16_bytes,
                     [&] { b.cross_entropy_with_gradient(losses, logits16, targets, v, 1.0); }});
    cases.push_back({"ce fwd then bwd, bf16", 2 * logits16_bytes, [&] {
                       b.logits_stats(row_max, sums, logits16, targets, whole);
                       b.cross_entropy_from_sums(losses, lse, row_max, sums, targets);
                       b.cross_entropy_backward_window(logits16, lse, targets, whole, 1.0);
                     }});
    // The attention projection's output with the residual stream's add (GPT-2: [N, C] = [N, C] x
    // [C, C]^T + bias + residual), on prepared bf16 operands as the trainer runs it: the residual
    // read by the GEMM (gemm_bias_residual; CUDA: cuBLASLt's C, the bias in the same epilogue) and
    // as gemm_bias then add. Both count the output written and the residual read, and the same FLOPs.
    proj_w = b.alloc({c, c}, dt);
    fill_random(b, proj_w, seed++);
    bf16_operands([&] { proj_ops = b.gemm_operands({a2, proj_w}); })();
    const int64_t ld_x = proj_ops[0].dim(-1), ld_w = proj_ops[1].dim(-1), k = std::min(ld_x, ld_w);
    const double projection_flops = 2.0 * static_cast<double>(n) * static_cast<double>(c * c);
    cases.push_back({"proj+residual (fused)", 2 * nc * s, [&, ld_x, ld_w, k] {
                       b.gemm_bias_residual(false, true, n, c, k, proj_ops[0], ld_x, proj_ops[1], ld_w, y, bias, x,
                                            DType::F32);
                     }, projection_flops});
    cases.push_back({"proj, residual apart", 2 * nc * s, [&, ld_x, ld_w, k] {
                       b.gemm_bias(false, true, n, c, k, proj_ops[0], ld_x, proj_ops[1], ld_w, y, bias, DType::F32);
                       b.add(y, y, x);
                     }, projection_flops});
    // c_attn's output qkv [N, 3C] in bf16 (Backend::attention_input_dtype: under flash-mma the
    // attention reads nothing else): the fp32 sum with the bias rounded once, from the GEMM's
    // epilogue (gemm_bias into a bf16 C; CUDA: an fp32 bias into cuBLASLt's bf16 D), and as the fp32
    // result then its conversion. Both count the bf16 qkv written, and the same FLOPs.
    Tensor qkv_w = b.alloc({3 * c, c}, dt);
    fill_random(b, qkv_w, seed++);
    qkv_bias = b.alloc({3 * c}, dt);
    fill_random(b, qkv_bias, seed++);
    qkv16 = b.alloc({n, 3 * c}, DType::BF16);
    qkv32 = b.alloc({n, 3 * c}, dt);
    bf16_operands([&] { qkv_ops = b.gemm_operands({a2, qkv_w}); })();
    const int64_t qld_x = qkv_ops[0].dim(-1), qld_w = qkv_ops[1].dim(-1), qk = std::min(qld_x, qld_w);
    const double qkv_flops = 2.0 * static_cast<double>(n) * static_cast<double>(3 * c * c);
    cases.push_back({"qkv->bf16, bias (fused)", 3 * nc * 2, [&, qld_x, qld_w, qk] {
                       b.gemm_bias(false, true, n, 3 * c, qk, qkv_ops[0], qld_x, qkv_ops[1], qld_w, qkv16, qkv_bias,
                                   DType::F32);
                     }, qkv_flops});
    cases.push_back({"qkv, bf16 apart", 3 * nc * 2, [&, qld_x, qld_w, qk] {
                       b.gemm_bias(false, true, n, 3 * c, qk, qkv_ops[0], qld_x, qkv_ops[1], qld_w, qkv32, qkv_bias,
                                   DType::F32);
                       b.convert(qkv32, qkv16);
                     }, qkv_flops});
    cases.push_back({"attention fwd bf16", (4 * nc + square) * s,
                     bf16_operands([&] { b.attention_forward(att, probs, qkv, heads); }), 4 * products});
    // The attention's output as c_proj's bf16 operand: written so by the attention (attention_operand;
    // CUDA's GEMM attention rounds in its copy back to token-major rows) and as the fp32 output then
    // its copy. Both count the attention's bytes with the bf16 operand written instead of fp32 out.
    const double operand_bytes = (3 * nc + square) * s + 2 * nc;
    cases.push_back({"attention fwd->bf16 (fused)", operand_bytes,
                     bf16_operands([&] { b.attention_operand(probs, qkv, heads); }), 4 * products});
    cases.push_back({"attention fwd, bf16 apart", operand_bytes, bf16_operands([&] {
                       b.attention_forward(att, probs, qkv, heads);
                       b.gemm_operands({att});
                     }), 4 * products});
    cases.push_back({"attention bwd bf16", (7 * nc + square) * s,
                     bf16_operands([&] { b.attention_backward(dqkv, datt, qkv, probs, heads); }), 8 * products});
    // dqkv as c_attn's bf16 operand with its bias gradient: written so by the attention's backward
    // (attention_backward_operand; CUDA's GEMM attention rounds and sums in its pass back to
    // token-major rows) and as the fp32 dqkv then the fused copy and sums. Both count the
    // attention's bytes with the bf16 dqkv written instead of the fp32 one.
    dqkv_bias = b.alloc({3 * c}, dt);
    const double backward_operand_bytes = (4 * nc + square) * s + 2 * 3 * nc;
    cases.push_back({"attention bwd->bf16 (fused)", backward_operand_bytes, bf16_operands([&] {
                       b.attention_backward_operand(datt, qkv, probs, heads, dqkv_bias);
                     }), 8 * products});
    cases.push_back({"attention bwd, bf16 apart", backward_operand_bytes, bf16_operands([&] {
                       b.attention_backward(dqkv, datt, qkv, probs, heads);
                       b.gemm_operands({dqkv}, dqkv_bias);
                     }), 8 * products});
    // Where the model keeps qkv and attention's output gradient in bf16 (Backend::
    // attention_input_dtype: flash-mma at head sizes up to 64), the attention reads them as they
    // are, without the copies the rows above make each call: the same two calls from bf16 tensors
    // (the same bits), their bytes counting qkv and dout in bf16.
    b.set_fp32_matmul(Fp32Matmul::Bf16Operands);
    const bool model_keeps_bf16 = b.attention_input_dtype(dt, seq, c, heads) == DType::BF16;
    b.set_fp32_matmul(Fp32Matmul::Exact);
    if (model_keeps_bf16) {
      att_qkv16 = b.alloc(qkv.shape(), DType::BF16);
      datt16 = b.alloc(datt.shape(), DType::BF16);
      b.convert(qkv, att_qkv16);
      b.convert(datt, datt16);
      cases.push_back({"attention fwd, bf16 qkv", 3 * nc * 2 + (nc + square) * s,
                       bf16_operands([&] { b.attention_forward(att, probs, att_qkv16, heads); }), 4 * products});
      // and as training runs it: c_proj's bf16 operand written by the forward itself, no fp32 out
      cases.push_back({"attention fwd->bf16, bf16 qkv", 3 * nc * 2 + square * s + 2 * nc,
                       bf16_operands([&] { b.attention_operand(probs, att_qkv16, heads); }), 4 * products});
      cases.push_back({"attention bwd, bf16 qkv, dout", 4 * nc * 2 + (3 * nc + square) * s,
                       bf16_operands([&] { b.attention_backward(dqkv, datt16, att_qkv16, probs, heads); }),
                       8 * products});
    }
  }
  std::printf("tripod bench kernel-rate: backend %s, %s, N %lld tokens, C %lld, V %lld, attention B %lld x T %lld, "
              "H %lld, %d timed regions of >= %.1f ms\n",
              b.name().c_str(), dtype_name(dt).c_str(), static_cast<long long>(n), static_cast<long long>(c),
              static_cast<long long>(v), static_cast<long long>(batch), static_cast<long long>(seq),
              static_cast<long long>(heads), o.repeat, o.min_time_ms);
  const TimedCases timed = time_kernel_cases(b, cases, o.repeat, o.min_time_ms);
  if (!o.json_out.empty())
    write_output_file(o.json_out, json{{"benchmark", "kernel_rate"}, {"backend", o.backend}, {"backend_name", b.name()},
                {"dtype", dtype_name(dt)}, {"tokens", n}, {"channels", c}, {"vocab", v}, {"attention_batch", batch},
                {"context", seq}, {"heads", heads}, {"repeat", o.repeat},
                {"min_time_ms", o.min_time_ms}, {"copy_gbps", timed.copy_gbps}, {"results", timed.rows}}.dump(2) + "\n",
                      "the results file (--json)");
  fail_naming_failed_rows("kernel-rate", "rows", timed.failed, cases.size(), o.json_out);
}

}  // namespace tripod::bench
