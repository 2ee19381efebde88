// Backend checks of the transformer operations, the vocabulary-window forms and AdamW, on odd
// sizes (partial warps) and on GPT-2 124M's row sizes (768 channels, 50257 logits, hd 64).
#include <algorithm>

#include "backend/check/backend_check.h"
#include "backend/check/case_list.h"
#include "backend/transfer.h"
#include "core/error.h"

namespace tripod::backend_check {
namespace {

constexpr uint64_t kSeed = 1201;

struct Sizes {
  int64_t batch, seq, channels, heads, vocab;
  std::string text() const {
    return str_cat("B", batch, " T", seq, " C", channels, " H", heads, " V", vocab);
  }
};
const Sizes kOdd{3, 11, 40, 4, 97};
const Sizes kGpt2Rows{1, 64, 768, 12, 50257};

void add_embedding_cases(CaseList& cases, DType t, const Sizes& s) {
  const int64_t n = s.batch * s.seq, c = s.channels, v = s.vocab;
  cases.add("embedding_forward/backward", t, s.text(), [=](Backend& be) {
    Inputs in(be, t, kSeed);
    Tensor tokens = in.ids({n}, 0, v), wte = in.normal({v, c}, 0.02), wpe = in.normal({s.seq, c}, 0.01);
    Tensor out = be.alloc({n, c}, t), dout = in.normal({n, c});
    Tensor dwte = in.normal({v, c}, 0.1), dwpe = in.normal({s.seq, c}, 0.1);  // accumulated into
    be.embedding_forward(out, tokens, wte, wpe, s.seq);
    be.embedding_backward(dwte, dwpe, dout, tokens, s.seq);
    return std::vector<Output>{output(be, "out", out), output(be, "dwte", dwte), output(be, "dwpe", dwpe)};
  });
  // A TP rank's window: ids [start, start + valid) of a table padded to `rows`.
  const int64_t start = v / 3, valid = v / 3 + 1, rows = valid + 3;
  cases.add("embedding windows", t, s.text() + " window " + std::to_string(start) + "+" + std::to_string(valid),
            [=](Backend& be) {
              Inputs in(be, t, kSeed);
              Tensor tokens = in.ids({n}, 0, v), wte = in.normal({rows, c}, 0.02), wpe = in.normal({s.seq, c}, 0.01);
              Tensor out = in.normal({n, c}), dout = in.normal({n, c});
              Tensor dwte = in.normal({rows, c}, 0.1), dwpe = in.normal({s.seq, c}, 0.1);
              const VocabWindow w{start, valid, v};
              be.embedding_lookup_window(out, tokens, wte, w);
              be.position_add(out, wpe, 5, s.seq);
              be.embedding_backward_window(dwte, dwpe, dout, tokens, w, s.seq);
              return std::vector<Output>{output(be, "out", out), output(be, "dwte", dwte), output(be, "dwpe", dwpe)};
            });
}

void add_row_cases(CaseList& cases, DType t, const Sizes& s) {
  const int64_t n = s.batch * s.seq, c = s.channels;
  cases.add("layernorm_forward/backward", t, s.text(), [=](Backend& be) {
    Inputs in(be, t, kSeed);
    Tensor inp = in.normal({n, c}, 2.0), weight = in.normal({c}), bias = in.normal({c}, 0.1);
    Tensor out = be.alloc({n, c}, t), mean = be.alloc({n}, t), rstd = be.alloc({n}, t);
    be.layernorm_forward(out, mean, rstd, inp, weight, bias, 1e-5);
    Tensor dout = in.normal({n, c}), dinp = in.normal({n, c}, 0.1), dweight = in.normal({c}), dbias = in.normal({c});
    be.layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd);
    return std::vector<Output>{output(be, "out", out),     output(be, "mean", mean),       output(be, "rstd", rstd),
                               output(be, "dinp", dinp),   output(be, "dweight", dweight), output(be, "dbias", dbias)};
  });
  cases.add("bias_add/bias_grad, gelu", t, s.text() + " x4", [=](Backend& be) {
    Inputs in(be, t, kSeed);
    Tensor x = in.normal({n, 4 * c}, 2.0), bias = in.normal({4 * c}), dbias = in.normal({4 * c});
    Tensor dout = in.normal({n, 4 * c}), g = be.alloc({n, 4 * c}, t), dx = in.normal({n, 4 * c});
    be.bias_add(x, bias);
    be.bias_grad(dbias, dout);
    be.gelu_forward(g, x);
    be.gelu_backward(dx, x, dout);
    return std::vector<Output>{output(be, "x", x), output(be, "dbias", dbias), output(be, "gelu", g),
                               output(be, "dgelu", dx)};
  });
}

void add_attention_case(CaseList& cases, DType t, const Sizes& s) {
  const int64_t b = s.batch, T = s.seq, c = s.channels, h = s.heads;
  cases.add("attention_forward/backward", t, s.text(), [=](Backend& be) {
    Inputs in(be, t, kSeed);
    Tensor qkv = in.normal({b, T, 3 * c}), out = be.alloc({b, T, c}, t), probs = be.alloc({b, h, T, T}, t);
    be.attention_forward(out, probs, qkv, h);
    Tensor dout = in.normal({b, T, c}), dqkv = in.normal({b, T, 3 * c});  // overwritten
    be.attention_backward(dqkv, dout, qkv, probs, h);
    return std::vector<Output>{output(be, "out", out), output(be, "probs", probs), output(be, "dqkv", dqkv)};
  });
}

// A prepared GEMM operand's [rows, cols] values: a device's copy may be zero-padded to
// [rows', cols'] with rows' >= rows and cols' = its last dimension >= cols (backend.h's
// gemm_operands), the CPU's is not (the CUDA flash attention's operands are padded copies: the
// first GPU run of these cases compared 1600 elements with 1320).
Output operand_output(Backend& be, const std::string& name, const Tensor& op, int64_t rows, int64_t cols) {
  Output padded = output(be, name, op);
  const int64_t ld = op.dim(-1);
  TRIPOD_CHECK(ld >= cols && op.numel() >= rows * ld, name, ": an operand copy ", op.describe(), " smaller than [",
               rows, ", ", cols, "]");
  Output out{name, padded.dtype, {}};
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) out.values.push_back(padded.values[static_cast<std::size_t>(r * ld + j)]);
  return out;
}

// dq, dk and dv of a dqkv [rows, 3C] output, as outputs "dq", "dk", "dv".
std::vector<Output> qkv_thirds(const Output& dqkv, int64_t c) {
  std::vector<Output> thirds;
  const auto rows = static_cast<int64_t>(dqkv.values.size()) / (3 * c);
  for (int part = 0; part < 3; ++part) {
    Output third{std::string("d") + "qkv"[part], dqkv.dtype, {}};
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < c; ++j)
        third.values.push_back(dqkv.values[static_cast<std::size_t>((r * 3 + part) * c + j)]);
    thirds.push_back(std::move(third));
  }
  return thirds;
}

// fp32 attention under the bf16-mixed policy (Fp32Matmul::Bf16Operands): both backends round q, k,
// v, dout, the probabilities and the score gradients to bf16 for the products. probs is the fp32
// softmax of exactly multiplied rounded operands (the fp32 bound); out and dqkv are products of
// probabilities and score gradients that each backend computes a few fp32 ulps apart and may
// round one bf16 step apart: 2^-8 of their largest element (a wrong index or stride moves them by
// O(1)); dq, dk and dv each of its own.
// The flash attention (TRIPOD_CUDA_ATTENTION=flash) rounds the probabilities before their
// normalisation, the CPU after it, and its score gradients take D = rowsum(dout * out) from its own
// out: two roundings apart, 2^-7. (With 2^-8, 5 of 12 input draws failed on the emulated device,
// up to 5.0e-3 of the largest element, dq or dk, where a sum of such terms cancels; 2^-8 had come
// from one draw.)
double attention_output_bound(bool flash) { return flash ? 1.0 / 128 : 1.0 / 256; }
// A bf16 copy of such an output: its bound plus one bf16 step of the largest element (2^-7 of it
// at most), since two values apart by less than the bound may round a step apart.
double attention_copy_bound(bool flash) { return attention_output_bound(flash) + 1.0 / 128; }

void add_bf16_operand_attention_case(CaseList& cases, const Sizes& s) {
  const int64_t b = s.batch, T = s.seq, c = s.channels, h = s.heads;
  cases.add("attention_forward/backward bf16-operands", DType::F32, s.text(), [=](Backend& be) {
    Inputs in(be, DType::F32, kSeed + 3);
    Tensor qkv = in.normal({b, T, 3 * c}), out = be.alloc({b, T, c}, DType::F32);
    Tensor probs = be.alloc({b, h, T, T}, DType::F32);
    Tensor dout = in.normal({b, T, c}), dqkv = in.normal({b, T, 3 * c});  // overwritten
    bool keeps_probs = true;
    with_bf16_operands(be, [&] {
      keeps_probs = !be.takes_flash_attention(DType::F32, T, c, h);
      be.attention_forward(out, probs, qkv, h);
      be.attention_backward(dqkv, dout, qkv, probs, h);
    });
    // dq, dk and dv each against its own largest element: under flash attention dq is one kernel's
    // result and dk, dv another's, so the worst output names the kernel.
    std::vector<Output> outputs{output(be, "out", out), output(be, "probs", probs)};
    for (Output& third : qkv_thirds(output(be, "dqkv", dqkv), c)) outputs.push_back(std::move(third));
    for (Output& o : outputs) o.bound = attention_output_bound(!keeps_probs);
    outputs[1].bound = 0;  // probs: fp32's
    outputs[1].not_comparable = !keeps_probs;  // the flash attention keeps its own state there
    return outputs;
  });
  // Backend::attention_operand: the output written straight as its GEMM operand's bf16 copy (the
  // CUDA GEMM attention's token-major copy rounds as it writes), with the state as
  // attention_forward's; out's bound plus a bf16 step.
  cases.add("attention_operand fp32->bf16", DType::F32, s.text(), [=](Backend& be) {
    Inputs in(be, DType::F32, kSeed + 4);
    const Tensor qkv = in.normal({b, T, 3 * c});
    Tensor probs = be.alloc({b, h, T, T}, DType::F32), op;
    bool keeps_probs = true;
    with_bf16_operands(be, [&] {
      keeps_probs = !be.takes_flash_attention(DType::F32, T, c, h);
      op = be.attention_operand(probs, qkv, h);
    });
    std::vector<Output> outputs{operand_output(be, "out bf16", op, b * T, c), output(be, "probs", probs)};
    outputs[0].bound = attention_copy_bound(!keeps_probs);
    outputs[1].bound = 0;  // fp32's
    outputs[1].not_comparable = !keeps_probs;
    return outputs;
  });
  // Backend::attention_backward_operand: dqkv written straight as c_attn's bf16 operand with the
  // bias gradient's column sums (the CUDA GEMM attention's pass to token-major rows rounds and sums
  // as it reads), from attention_forward's state. dq, dk, dv: dqkv's bound plus a bf16 step; db:
  // dqkv's (its sums add the fp32 values). The inputs are the bf16-operands case's, so its dqkv is
  // this one's before rounding.
  cases.add("attention_backward_operand fp32->bf16, db", DType::F32, s.text(), [=](Backend& be) {
    Inputs in(be, DType::F32, kSeed + 3);
    const Tensor qkv = in.normal({b, T, 3 * c}), dout = in.normal({b, T, c});
    in.normal({b, T, 3 * c});  // the bf16-operands case's dqkv, overwritten there
    const Tensor db = in.normal({3 * c});
    Tensor out = be.alloc({b, T, c}, DType::F32), probs = be.alloc({b, h, T, T}, DType::F32), op;
    bool flash = false;
    with_bf16_operands(be, [&] {
      flash = be.takes_flash_attention(DType::F32, T, c, h);
      be.attention_forward(out, probs, qkv, h);
      op = be.attention_backward_operand(dout, qkv, probs, h, db);
    });
    std::vector<Output> outputs = qkv_thirds(operand_output(be, "dqkv bf16", op, b * T, 3 * c), c);
    for (Output& o : outputs) o.bound = attention_copy_bound(flash);
    outputs.push_back(output(be, "db", db));
    outputs.back().bound = attention_output_bound(flash);
    return outputs;
  });
  // The model's bf16 qkv (Backend::attention_input_dtype: where the attention reads nothing of an
  // fp32 qkv but its bf16 rounding, flash-mma at head sizes up to 64), through the two operand
  // forms the trainer calls under the policy: the rounded values, given as bf16 where the backend
  // takes them so and widened back to fp32 elsewhere (the same values for a backend that rounds
  // its operands). Bounds as the fp32 qkv's cases.
  cases.add("attention_operand/backward_operand bf16 qkv", DType::F32, s.text(), [=](Backend& be) {
    Inputs in(be, DType::F32, kSeed + 5);
    Tensor qkv = in.normal({b, T, 3 * c});
    const Tensor dout = in.normal({b, T, c}), db = in.normal({3 * c});
    Tensor probs = be.alloc({b, h, T, T}, DType::F32), out, dqkv;
    bool flash = false;
    with_bf16_operands(be, [&] {
      flash = be.takes_flash_attention(DType::F32, T, c, h);
      Tensor rounded = be.alloc(qkv.shape(), DType::BF16);
      be.convert(qkv, rounded);
      if (be.attention_input_dtype(DType::F32, T, c, h) == DType::BF16) qkv = rounded;
      else be.convert(rounded, qkv);
      out = be.attention_operand(probs, qkv, h);
      dqkv = be.attention_backward_operand(dout, qkv, probs, h, db);
    });
    std::vector<Output> outputs{operand_output(be, "out bf16", out, b * T, c)};
    for (Output& third : qkv_thirds(operand_output(be, "dqkv bf16", dqkv, b * T, 3 * c), c))
      outputs.push_back(std::move(third));
    for (Output& o : outputs) o.bound = attention_copy_bound(flash);
    outputs.push_back(output(be, "db", db));
    outputs.back().bound = attention_output_bound(flash);
    return outputs;
  });
}

// The vocabulary-window loss over logits of `logits_t` with statistics in `t`: fp32 or fp64 logits
// with their own statistics, or bf16-mixed's bf16 logits (model/gpt.h's rounded_activation_dtype)
// with fp32 ones, their gradient computed in fp32 and rounded once as it is written over them.
//   - One TP rank's columns: [start, start + valid) of V, padded to `cols`; targets anywhere in V.
//   - The single-device loss's statistics (Backend::logits_stats: one pass with an online max and
//     sum on a GPU) over a whole vocabulary, rows padded past it. At most 4099 columns (16 a
//     thread): the CPU adds the exponentials in one fp32 loop, about sqrt(V) roundings from the
//     exact sum (1.3e-5 at GPT-2's 50257, more than fp32's bound, 4e-6 at 4099), while the one-pass
//     device sum is within 1e-7 of it (test_kernel_cross_entropy_math.cpp's replay at 50257).
// Statistics and losses to their dtype's bound; bf16 gradients to bf16's (a value a few fp32 ulps
// from a tie may round a step apart).
void add_window_loss_cases(CaseList& cases, DType t, DType logits_t, const Sizes& s, double logit_scale) {
  const int64_t n = s.batch * s.seq, v = s.vocab;
  const int64_t start = v / 4, valid = v / 4 + 2, cols = valid + 2;
  const bool bf16 = logits_t == DType::BF16;
  const std::string tag = bf16 ? " bf16 logits" : "";
  cases.add("cross-entropy windows" + tag, logits_t,
            s.text() + " window " + std::to_string(start) + "+" + std::to_string(valid), [=](Backend& be) {
              Inputs in(be, t, kSeed);
              Tensor logits = in.normal_as({n, cols}, logits_t, logit_scale), targets = in.ids({n}, 0, v, 0.125);
              Tensor row_max = be.alloc({n}, t), sums = be.alloc({2, n}, t);
              Tensor losses = be.alloc({n}, t), logsumexp = be.alloc({n}, t);
              const VocabWindow w{start, valid, v};
              be.logits_row_max(row_max, logits, targets, w);
              be.logits_exp_sums(sums, logits, row_max, targets, w);
              be.cross_entropy_from_sums(losses, logsumexp, row_max, sums, targets);
              be.cross_entropy_backward_window(logits, logsumexp, targets, w, 1.0 / 37);
              return std::vector<Output>{output(be, "row_max", row_max), output(be, "sums", sums),
                                         output(be, "losses", losses), output(be, "logsumexp", logsumexp),
                                         output(be, bf16 ? "dlogits bf16" : "dlogits", logits)};
            });
  const int64_t width = std::min<int64_t>(v, 4099);
  cases.add("logits_stats (one pass)" + tag, logits_t,
            std::to_string(n) + " rows of " + std::to_string(width) + " padded to " + std::to_string(width + 3),
            [=](Backend& be) {
              Inputs in(be, t, kSeed);
              Tensor logits = in.normal_as({n, width + 3}, logits_t, logit_scale);
              Tensor targets = in.ids({n}, 0, width, 0.125);
              Tensor row_max = be.alloc({n}, t), sums = be.alloc({2, n}, t);
              be.logits_stats(row_max, sums, logits, targets, VocabWindow{0, width, width});
              return std::vector<Output>{output(be, "row_max", row_max), output(be, "sums", sums)};
            });
  // A training forward's loss with its gradient (Backend::cross_entropy_with_gradient: one kernel
  // on a GPU), the same shapes: its statistics are logits_stats' and its gradient the window's.
  cases.add("cross_entropy_with_gradient" + tag, logits_t,
            std::to_string(n) + " rows of " + std::to_string(width) + " padded to " + std::to_string(width + 3),
            [=](Backend& be) {
              Inputs in(be, t, kSeed);
              Tensor logits = in.normal_as({n, width + 3}, logits_t, logit_scale);
              Tensor targets = in.ids({n}, 0, width, 0.125), losses = be.alloc({n}, t);
              be.cross_entropy_with_gradient(losses, logits, targets, width, 1.0 / 37);
              return std::vector<Output>{output(be, "losses", losses),
                                         output(be, bf16 ? "dlogits bf16" : "dlogits", logits)};
            });
}

void add_loss_cases(CaseList& cases, DType t, const Sizes& s, double logit_scale) {
  const int64_t n = s.batch * s.seq, v = s.vocab;
  cases.add("cross_entropy_forward/backward", t, s.text() + " logits ~" + std::to_string(int(logit_scale)),
            [=](Backend& be) {
              Inputs in(be, t, kSeed);
              Tensor logits = in.normal({n, v}, logit_scale), targets = in.ids({n}, 0, v, 0.125);
              Tensor losses = be.alloc({n}, t);
              be.cross_entropy_forward(losses, logits, targets);
              be.cross_entropy_backward(logits, targets, 1.0 / 37);
              return std::vector<Output>{output(be, "losses", losses), output(be, "dlogits", logits)};
            });
  add_window_loss_cases(cases, t, t, s, logit_scale);
}

void add_adamw_case(CaseList& cases, DType t) {
  cases.add("adamw", t, "100003 step 3, from 1 step 4", [=](Backend& be) {
    Inputs in(be, t, kSeed);
    const int64_t n = 100'003;
    Tensor p = in.normal({n}, 0.02), g = in.normal({n}, 1e-3), m = in.normal({n}, 1e-4);
    Tensor v = in.positive({n}, 0.0, 1e-6);
    be.adamw(p, g, m, v, 6e-4, 0.9, 0.95, 1e-8, 0.1, 3, 0.5);
    // A run of tensors starting one element in (the optimizer's spans need not be aligned): a
    // device's two-a-thread path does not apply there.
    auto from_1 = [&](const Tensor& x) { return x.view(1, {n - 1}); };
    be.adamw(from_1(p), from_1(g), from_1(m), from_1(v), 3e-4, 0.9, 0.95, 1e-8, 0.0, 4, 1.0);
    return std::vector<Output>{output(be, "param", p), output(be, "m", m), output(be, "v", v)};
  });
  // Many runs of one set of buffers (the optimizer's runs of tensors; CUDA: one launch a 64 runs):
  // 70 runs of 0 to 9000 elements, odd and even offsets, gaps left untouched, two weight decays.
  cases.add("adamw_runs", t, "150001, 70 runs step 2", [=](Backend& be) {
    Inputs in(be, t, kSeed);
    const int64_t n = 150'001;
    Tensor p = in.normal({n}, 0.02), g = in.normal({n}, 1e-3), m = in.normal({n}, 1e-4);
    Tensor v = in.positive({n}, 0.0, 1e-6);
    const int64_t sizes[] = {1, 768, 0, 4097, 3, 2304, 9000, 5, 4096, 768};
    std::vector<AdamWRun> runs;
    for (int64_t r = 0, at = 0; r < 70; ++r) {
      const int64_t length = sizes[r % 10];
      runs.push_back({at, length, r % 2 ? 0.1 : 0.0});
      at += length + (r % 7 == 3 ? 2 : 0);  // now and then a gap
    }
    be.adamw_runs(p, g, m, v, runs, 6e-4, 0.9, 0.95, 1e-8, 2, 0.5);
    return std::vector<Output>{output(be, "param", p), output(be, "m", m), output(be, "v", v)};
  });
}

}  // namespace

void add_layer_cases(CaseList& cases, const std::vector<DType>& dtypes) {
  for (DType t : dtypes) {
    if (t == DType::BF16) {  // fp32 attention with bf16 GEMM operands, and its operand copies
      add_bf16_operand_attention_case(cases, kOdd);
      add_bf16_operand_attention_case(cases, {2, 128, 128, 2, 97});
      add_bf16_operand_attention_case(cases, {1, 520, 128, 2, 97});
      for (const Sizes& s : {kOdd, kGpt2Rows}) add_window_loss_cases(cases, DType::F32, DType::BF16, s, 4.0);
      continue;
    }
    const double big_logits = t == DType::F64 ? 1000 : 100;  // the logsumexp shift must matter
    for (const Sizes& s : {kOdd, kGpt2Rows}) {
      add_row_cases(cases, t, s);
      add_loss_cases(cases, t, s, 1.0);
    }
    add_row_cases(cases, t, {3, 367, 40, 4, 97});  // 1101 rows: column sums in three chunks of rows
    // CUDA's fused LayerNorm backward at more than 512 x 16 rows (chunks of 17) and a width that
    // is not whole groups of four (one channel a lane)
    add_row_cases(cases, t, {1, 8200, 41, 1, 97});
    add_embedding_cases(cases, t, kOdd);
    add_embedding_cases(cases, t, {1, 64, 768, 12, 4096});  // GPT-2's width; a table of 50257 rows adds nothing
    add_loss_cases(cases, t, kOdd, big_logits);
    add_attention_case(cases, t, kOdd);
    add_attention_case(cases, t, {2, 128, 128, 2, 97});  // head size 64, as GPT-2's
    // Two causal row blocks (a GPU's products stop at T/2 for the first half of the rows), and fp32
    // rows of 520 columns: the device's grouped softmax rows, two groups of four a thread.
    add_attention_case(cases, t, {1, 520, 128, 2, 97});
    add_adamw_case(cases, t);
  }
}

std::vector<OpCase> all_op_cases(const std::vector<DType>& dtypes) {
  CaseList cases;
  add_memory_cases(cases, dtypes);
  add_layer_cases(cases, dtypes);
  return cases.take();
}

}  // namespace tripod::backend_check
