// Backend checks of memory, conversions, GEMM, elementwise operations and reductions.
#include <cmath>
#include <limits>

#include "backend/check/backend_check.h"
#include "backend/check/case_list.h"
#include "backend/transfer.h"

namespace tripod::backend_check {
namespace {

constexpr uint64_t kSeed = 20261201;

void add_gemm_cases(CaseList& cases, DType ab, DType c_dtype) {
  // Odd sizes (partial tiles), padded leading dimensions, every transpose, alpha and beta both live.
  const int64_t m = 33, n = 17, k = 65, pad = 3;
  for (int t = 0; t < 4; ++t) {
    const bool ta = t & 1, tb = t & 2;
    const std::string name = std::string("gemm ") + (ta ? "T" : "N") + (tb ? "T" : "N") + " " + dtype_name(ab) +
                             "->" + dtype_name(c_dtype);
    cases.add(name, c_dtype, dims({m, n, k}) + ", ld +3", [=](Backend& be) {
      Inputs in(be, ab, kSeed + t);
      const int64_t a_rows = ta ? k : m, a_cols = ta ? m : k, b_rows = tb ? n : k, b_cols = tb ? k : n;
      Tensor a = in.normal_as({a_rows, a_cols + pad}, ab, 1.0);
      Tensor b = in.normal_as({b_rows, b_cols + pad}, ab, 1.0);
      Tensor c = in.normal_as({m, n + pad}, c_dtype, 1.0);
      be.gemm(ta, tb, m, n, k, 0.7, a, a_cols + pad, b, b_cols + pad, 0.3, c, n + pad, gemm_accumulate_dtype(ab));
      return std::vector<Output>{output(be, "c", c)};
    });
  }
  // A GPT-2 124M layer's shape (the MLP's first matmul over 64 tokens), large enough for tensor-core paths.
  cases.add(std::string("gemm NN ") + dtype_name(ab) + "->" + dtype_name(c_dtype) + " gpt2-fc", c_dtype,
            dims({64, 3072, 768}), [=](Backend& be) {
              Inputs in(be, ab, kSeed + 9);
              Tensor a = in.normal_as({64, 768}, ab, 1.0), b = in.normal_as({768, 3072}, ab, 0.02);
              Tensor c = in.normal_as({64, 3072}, c_dtype, 1.0);
              be.gemm(false, false, 64, 3072, 768, 1.0, a, 768, b, 3072, 0.0, c, 3072, gemm_accumulate_dtype(ab));
              return std::vector<Output>{output(be, "c", c)};
            });
  // A linear layer's product with its bias (GPT-2's attention projection over 64 tokens): a device
  // may fuse the bias into the GEMM (the CUDA backend's cuBLASLt epilogue, for fp32); a bias one
  // element into its buffer (bias+1) is off 16-byte alignment and takes the separate addition.
  for (int64_t offset : {0, 1}) {
    if (c_dtype == DType::BF16) break;  // bias_add has no bf16 form: the trainer's C is fp32 or fp64
    cases.add(std::string("gemm_bias NT ") + dtype_name(ab) + "->" + dtype_name(c_dtype) +
                  (offset ? " bias+1" : ""),
              c_dtype, dims({64, 768, 768}), [=](Backend& be) {
                Inputs in(be, ab, kSeed + 12 + offset);
                Tensor x = in.normal_as({64, 768}, ab, 1.0), w = in.normal_as({768, 768}, ab, 0.02);
                Tensor bias = in.normal_as({768 + 1}, c_dtype, 1.0).view(offset, {768});
                Tensor out = in.normal_as({64, 768}, c_dtype, 1.0);
                be.gemm_bias(false, true, 64, 768, 768, x, 768, w, 768, out, bias, gemm_accumulate_dtype(ab));
                return std::vector<Output>{output(be, "out", out)};
              });
  }
  // ... and with the residual stream's add (gemm_bias_residual: a device reads the residual in the
  // GEMM's epilogue, the bias too where it is fp32): a residual 16-byte aligned, one 4 bytes off
  // (res+1), and no bias.
  for (int variant = 0; variant < 3; ++variant) {
    if (c_dtype == DType::BF16) break;  // the residual stream is fp32 or fp64
    static const char* const kTags[] = {"", " res+1", " no-bias"};
    cases.add(std::string("gemm_bias_residual NT ") + dtype_name(ab) + "->" + dtype_name(c_dtype) + kTags[variant],
              c_dtype, dims({64, 768, 768}), [=](Backend& be) {
                Inputs in(be, ab, kSeed + 14 + variant);
                Tensor x = in.normal_as({64, 768}, ab, 1.0), w = in.normal_as({768, 768}, ab, 0.02);
                Tensor bias = variant == 2 ? Tensor() : in.normal_as({768}, c_dtype, 1.0);
                Tensor out = in.normal_as({64, 768}, c_dtype, 1.0);
                const Tensor residual = in.normal_as({64 * 768 + 1}, c_dtype, 1.0).view(variant == 1 ? 1 : 0, {64, 768});
                be.gemm_bias_residual(false, true, 64, 768, 768, x, 768, w, 768, out, bias, residual,
                                      gemm_accumulate_dtype(ab));
                return std::vector<Output>{output(be, "out", out)};
              });
  }
  // The LM head over an odd vocabulary (97 here; GPT-2's 50257): the logits' leading dimension is
  // odd, so rows start at 2- or 4-byte alignment, below the 16 bytes tensor-core kernels like. The
  // forward (logits = x W^T) and dX (dlogits W) must still find an algorithm and agree.
  const int64_t vocab = 97, tokens = 64, channels = 768;
  cases.add(std::string("gemm NT ") + dtype_name(ab) + "->" + dtype_name(c_dtype) + " lm-head odd-vocab", c_dtype,
            dims({tokens, vocab, channels}), [=](Backend& be) {
              Inputs in(be, ab, kSeed + 10);
              Tensor x = in.normal_as({tokens, channels}, ab, 1.0), w = in.normal_as({vocab, channels}, ab, 0.02);
              Tensor logits = in.normal_as({tokens, vocab}, c_dtype, 1.0);
              be.gemm(false, true, tokens, vocab, channels, 1.0, x, channels, w, channels, 0.0, logits, vocab,
                      gemm_accumulate_dtype(ab));
              return std::vector<Output>{output(be, "logits", logits)};
            });
  cases.add(std::string("gemm NN ") + dtype_name(ab) + "->" + dtype_name(c_dtype) + " lm-head-dx odd-vocab", c_dtype,
            dims({tokens, channels, vocab}), [=](Backend& be) {
              Inputs in(be, ab, kSeed + 11);
              Tensor dlogits = in.normal_as({tokens, vocab}, ab, 1.0), w = in.normal_as({vocab, channels}, ab, 0.02);
              Tensor dx = in.normal_as({tokens, channels}, c_dtype, 1.0);
              be.gemm(false, false, tokens, channels, vocab, 1.0, dlogits, vocab, w, channels, 0.0, dx, channels,
                      gemm_accumulate_dtype(ab));
              return std::vector<Output>{output(be, "dx", dx)};
            });
}

// fp32 GEMMs under the bf16-mixed policy (Fp32Matmul::Bf16Operands): the CPU rounds the operands
// and multiplies exactly in fp32, a GPU runs a bf16 tensor-core GEMM; both sum in fp32.
void add_bf16_operand_cases(CaseList& cases) {
  // Aligned sizes, and odd ones as GPT-2's LM head has (vocabulary 50257): every size odd, so a GPU
  // zero-pads the operands' copies and computes C in an aligned scratch (with beta = 0 too, where
  // C's old contents must not be read); and only k odd (the head's input gradient), where C is
  // written in place but the product runs over the padded k; and only n odd with C's rows padded
  // to an aligned ldc (the model's padded logits), where a GPU writes n's aligned part in place and
  // its last columns through a small scratch, and must leave C's padding columns as they were.
  struct Shape {
    int64_t m, n, k;
    const char* tag;
    int64_t ldc = 0;  // 0: n
  };
  for (const Shape& sh : {Shape{96, 80, 768, ""}, Shape{97, 257, 131, " odd-ld"}, Shape{64, 80, 131, " odd-k"},
                          Shape{96, 257, 131, " ragged", 264}})
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      const double beta = sh.tag[0] != 0 && t == 0 ? 0.0 : 1.0;
      const std::string name = std::string("gemm ") + (ta ? "T" : "N") + (tb ? "T" : "N") + " fp32 bf16-operands" +
                               sh.tag + (beta == 0.0 ? " beta0" : "");
      cases.add(name, DType::F32, dims({sh.m, sh.n, sh.k}), [=](Backend& be) {
        Inputs in(be, DType::F32, kSeed + 20 + t);
        const int64_t m = sh.m, n = sh.n, k = sh.k, ldc = sh.ldc ? sh.ldc : n;
        Tensor a = in.normal({ta ? k : m, ta ? m : k}, 1.0), b = in.normal({tb ? n : k, tb ? k : n}, 0.02);
        Tensor c = in.normal({m, ldc}, 1.0);
        with_bf16_operands(be, [&] {
          be.gemm(ta, tb, m, n, k, 1.0, a, ta ? m : k, b, tb ? k : n, beta, c, ldc, DType::F32);
        });
        return std::vector<Output>{output(be, "c", c)};
      });
    }
}

// The linear layer's product and bias under the policy: fused on a GPU where C needs no padding
// (n = 768), added separately where it does (n = 257, C computed in a padded scratch).
void add_bf16_operand_bias_cases(CaseList& cases) {
  for (int64_t n : {768, 257})
    cases.add("gemm_bias NT fp32 bf16-operands" + std::string(n % 8 ? " odd-n" : ""), DType::F32,
              dims({64, n, 768}), [=](Backend& be) {
                Inputs in(be, DType::F32, kSeed + 30 + n);
                Tensor x = in.normal({64, 768}, 1.0), w = in.normal({n, 768}, 0.02), bias = in.normal({n}, 1.0);
                Tensor out = in.normal({64, n}, 1.0);
                with_bf16_operands(be, [&] {
                  be.gemm_bias(false, true, 64, n, 768, x, 768, w, 768, out, bias, DType::F32);
                });
                return std::vector<Output>{output(be, "out", out)};
              });
  // Into a bf16 C with the fp32 bias (Backend::gemm_bias's rounding of the fp32 sum: the model's
  // bf16 qkv under flash-mma), from bf16 operands as the trainer passes them: on a GPU from
  // cuBLASLt's epilogue where the bias is 16-byte aligned (c_attn's width, 2304), the fp32 result
  // and its conversion where it is not (bias+1) or cuBLASLt declines.
  for (int64_t offset : {0, 1})
    cases.add("gemm_bias NT bf16->bf16, fp32 bias" + std::string(offset ? " bias+1" : ""), DType::BF16,
              dims({64, 2304, 768}), [=](Backend& be) {
                Inputs in(be, DType::BF16, kSeed + 50 + offset);
                Tensor x = in.normal_as({64, 768}, DType::BF16, 1.0), w = in.normal_as({2304, 768}, DType::BF16, 0.02);
                Tensor bias = in.normal_as({2304 + 1}, DType::F32, 1.0).view(offset, {2304});
                Tensor out = in.normal_as({64, 2304}, DType::BF16, 1.0);
                be.gemm_bias(false, true, 64, 2304, 768, x, 768, w, 768, out, bias, DType::F32);
                return std::vector<Output>{output(be, "out", out)};
              });
  // With the residual: in the epilogue on a GPU where C is computed in place (n = 768), the
  // separate passes where C is padded (n = 257).
  for (int64_t n : {768, 257})
    cases.add("gemm_bias_residual NT fp32 bf16-operands" + std::string(n % 8 ? " odd-n" : ""), DType::F32,
              dims({64, n, 768}), [=](Backend& be) {
                Inputs in(be, DType::F32, kSeed + 40 + n);
                Tensor x = in.normal({64, 768}, 1.0), w = in.normal({n, 768}, 0.02), bias = in.normal({n}, 1.0);
                Tensor out = in.normal({64, n}, 1.0), residual = in.normal({64, n}, 1.0);
                with_bf16_operands(be, [&] {
                  be.gemm_bias_residual(false, true, 64, n, 768, x, 768, w, 768, out, bias, residual, DType::F32);
                });
                return std::vector<Output>{output(be, "out", out)};
              });
}

// A linear layer's backward from shared operands (gemm_operands) under the policy, taken as
// backend.h states them: each prepared copy's last dimension as its leading dimension, each
// reduction over the extent its operands share (a device's copies are zero-padded), the bias
// gradient added with the output gradient's copy. O = 257 is padded on a GPU (an odd vocabulary)
// and takes two passes; O = 64 and 40 are not, and a GPU sums the bias in the copy's pass, over
// one chunk of rows (N = 96) and three (N = 1040).
void add_shared_operand_cases(CaseList& cases) {
  for (const auto& [tokens, outputs] : std::vector<std::pair<int64_t, int64_t>>{{96, 64}, {96, 257}, {1040, 40}})
    cases.add("gemm_operands: dX, dW, db bf16" + std::string(outputs % 8 ? " odd" : ""), DType::F32,
              dims({tokens, outputs, 72}), [=](Backend& be) {
                const int64_t N = tokens, O = outputs, I = 72;
                Inputs in(be, DType::F32, kSeed + 40 + O);
                Tensor dout = in.normal({N, O}, 1.0), w = in.normal({O, I}, 0.02), x = in.normal({N, I}, 1.0);
                Tensor dx = in.normal({N, I}, 1.0), dw = in.normal({O, I}, 1.0), db = in.normal({O}, 1.0);
                with_bf16_operands(be, [&] {
                  const std::vector<Tensor> ops = be.gemm_operands({dout, w, x}, db);
                  const int64_t ld_dy = ops[0].dim(-1);
                  be.gemm(false, false, N, I, ld_dy, 1.0, ops[0], ld_dy, ops[1], ops[1].dim(-1), 0.0, dx, I,
                          DType::F32);
                  be.gemm(true, false, O, I, ops[0].numel() / ld_dy, 1.0, ops[0], ld_dy, ops[2], ops[2].dim(-1), 1.0,
                          dw, I, DType::F32);
                });
                return std::vector<Output>{output(be, "dx", dx), output(be, "dw", dw), output(be, "db", db)};
              });
}

// The conversions of a case group: F32's between fp64 and fp32, BF16's to and from bf16.
void add_conversion_cases(CaseList& cases, DType group) {
  const std::vector<std::pair<DType, DType>> pairs =
      group == DType::BF16 ? std::vector<std::pair<DType, DType>>{{DType::F32, DType::BF16}, {DType::F64, DType::BF16},
                                                                   {DType::BF16, DType::F32}, {DType::BF16, DType::F64}}
                           : std::vector<std::pair<DType, DType>>{{DType::F64, DType::F32}, {DType::F32, DType::F64}};
  for (const auto& [from, to] : pairs)
    cases.add("convert " + dtype_name(from) + "->" + dtype_name(to), to, "1037 + specials", [=](Backend& be) {
      // Halfway and near-halfway values for the roundings, and infinities, NaN and zeros.
      std::vector<double> v;
      for (int i = 0; i < 1037; ++i) v.push_back(std::ldexp(1.0 + i / 1037.0, (i % 60) - 30) * (i % 2 ? -1 : 1));
      for (double s : {1.0 + 1.0 / 256, 1.0 + 3.0 / 256, 1.0 + 1.0 / 256 + 1e-9, 1.0 + 1.0 / 256 - 1e-9, 0.0, -0.0,
                       1e-40, std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                       std::numeric_limits<double>::quiet_NaN(), 3.4e38, 1e39})
        v.push_back(s);
      Inputs in(be, from, kSeed);
      Tensor src = in.values({static_cast<int64_t>(v.size())}, v, from);
      Tensor dst = be.alloc({static_cast<int64_t>(v.size())}, to);
      be.convert(src, dst);
      return std::vector<Output>{output(be, "dst", dst)};
    });
}

void add_elementwise_cases(CaseList& cases, DType t) {
  const int64_t n = 100'003;  // not a multiple of any block size
  cases.add("fill", t, std::to_string(n), [=](Backend& be) {
    Tensor x = be.alloc({n}, t);
    be.fill(x, -1.25);
    return std::vector<Output>{output(be, "x", x)};
  });
  cases.add("copy", t, std::to_string(n), [=](Backend& be) {
    Inputs in(be, t, kSeed);
    Tensor src = in.normal({n}), dst = in.normal({n});
    be.copy(src, dst);
    return std::vector<Output>{output(be, "dst", dst)};
  });
  cases.add("add, add_inplace, scale", t, std::to_string(n), [=](Backend& be) {
    Inputs in(be, t, kSeed);
    Tensor a = in.normal({n}), b = in.normal({n}), out = in.normal({n});
    be.add(out, a, b);
    be.add_inplace(a, out);
    be.scale(b, -0.37);
    return std::vector<Output>{output(be, "out", out), output(be, "a", a), output(be, "b", b)};
  });
  // The fp32 kernels take four elements a thread where every pointer is 16-byte aligned and a
  // thread an element elsewhere: views one element in take the second path, and n leaves a
  // partial last group on the first.
  cases.add("add/gelu/fill/scale at offsets 0, 1", t, std::to_string(n), [=](Backend& be) {
    Inputs in(be, t, kSeed);
    Tensor a = in.normal({n + 1}), b = in.normal({n + 1}, 2.0), out = in.normal({n + 1});
    Tensor g = in.normal({n + 1}), dg = in.normal({n + 1}), filled = in.normal({n + 1});
    for (int64_t offset : {0, 1}) {
      const int64_t m = n + 1 - offset;
      auto at = [&](const Tensor& x) { return x.view(offset, {m}); };
      be.add(at(out), at(a), at(b));
      be.gelu_forward(at(g), at(out));
      be.gelu_backward(at(dg), at(out), at(b));
      be.scale(at(out), offset ? 1.5 : -0.75);
      be.fill(filled.view(offset, {m - 2}), offset ? 2.5 : -1.0);  // the last two elements keep their values
    }
    return std::vector<Output>{output(be, "out", out), output(be, "gelu", g), output(be, "dgelu", dg),
                               output(be, "filled", filled)};
  });
  cases.add("gather_rows, scatter_add_rows", t, "1031 x 77, 300 ids", [=](Backend& be) {
    // Distinct ids in a scattered order, the last row of the table among them.
    std::vector<int32_t> ids;
    for (int32_t r = 0; r < 300; ++r) ids.push_back(static_cast<int32_t>((r * 337 + 1030) % 1031));
    Tensor rows = be.alloc({300}, DType::I32);
    be.upload(ids.data(), rows);
    Inputs in(be, t, kSeed);
    Tensor table = in.normal({1031, 77}), packed = in.normal({300, 77});
    Tensor gathered = be.alloc({300, 77}, t);
    be.gather_rows(gathered, table, rows);
    be.scatter_add_rows(table, packed, rows);
    return std::vector<Output>{output(be, "gathered", gathered), output(be, "table", table)};
  });
  cases.add("sum_squares, count_nonfinite", t, std::to_string(n), [=](Backend& be) {
    Inputs in(be, t, kSeed);
    Tensor x = in.normal({n});
    Tensor sum = alloc_scalar(be), count = alloc_scalar(be), specials = alloc_scalar(be);
    be.sum_squares(sum, x);
    be.sum_squares(sum, x);  // accumulates
    be.count_nonfinite(count, x);
    const double inf = std::numeric_limits<double>::infinity();
    Tensor odd = in.values({5}, {1.0, inf, -inf, std::numeric_limits<double>::quiet_NaN(), 2.0}, t);
    be.count_nonfinite(specials, odd);
    return std::vector<Output>{output(be, "sum", sum), output(be, "count", count), output(be, "specials", specials)};
  });
  cases.add("sum_valid_losses", t, "4099", [=](Backend& be) {
    Inputs in(be, t, kSeed);
    Tensor losses = in.positive({4099}, 0.0, 11.0), targets = in.ids({4099}, 0, 97, 0.125);
    Tensor sum = alloc_scalar(be);
    be.sum_valid_losses(sum, losses, targets);
    return std::vector<Output>{output(be, "sum", sum)};
  });
}

}  // namespace

void add_memory_cases(CaseList& cases, const std::vector<DType>& dtypes) {
  for (DType t : dtypes) {
    if (t == DType::BF16) {  // the cases of bf16 tensors (backend_check.h)
      add_gemm_cases(cases, DType::BF16, DType::F32);
      add_gemm_cases(cases, DType::BF16, DType::BF16);
      add_bf16_operand_cases(cases);
      add_bf16_operand_bias_cases(cases);
      add_shared_operand_cases(cases);
      add_operand_producer_cases(cases);
      add_conversion_cases(cases, DType::BF16);
      continue;
    }
    add_elementwise_cases(cases, t);
    add_gemm_cases(cases, t, t);
    if (t == DType::F32) add_conversion_cases(cases, DType::F32);
  }
}

}  // namespace tripod::backend_check
