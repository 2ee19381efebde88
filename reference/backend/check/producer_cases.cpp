// Backend checks of the operand producers (backend.h): the functions that write a GEMM operand's
// bf16 copy in the pass that computes it under the bf16-mixed policy, and the GELU of bf16-mixed's
// bf16 pre-activation.
#include <string>
#include <utility>
#include <vector>

#include "backend/check/backend_check.h"
#include "backend/check/case_list.h"

namespace tripod::backend_check {
namespace {

constexpr uint64_t kSeed = 20261201;  // memory_cases.cpp's: these cases were its

}  // namespace

// Backend::gelu_operand under the policy: gelu(x) straight into its bf16 copy (one pass on a GPU),
// against the CPU's gelu then rounding. Compared with the bf16 bound: a device's tanh may differ
// from the CPU's in the last fp32 place, which can move a rounding by one bf16 place. An aligned
// x takes the four-wide kernel; a view one element in, the one-element one. (Sizes a device pads
// take gelu_forward then the padded copy, checked by the conversion cases.) x fp32, and bf16:
// bf16-mixed's pre-activation (Gpt::rounded_activation_dtype), read as its fp32 values; the GELU
// and its backward from it into fp32 too (the fp32 bound).
void add_operand_producer_cases(CaseList& cases) {
  for (DType pre : {DType::F32, DType::BF16})
    for (int64_t offset : {0, 1})
      cases.add("gelu_operand " + dtype_name(pre) + "->bf16" + std::string(offset ? " x+1" : ""), DType::BF16,
                dims({64, 3072}), [=](Backend& be) {
                  Inputs in(be, DType::F32, kSeed + 50 + offset);
                  const Tensor x = in.normal_as({64 * 3072 + 1}, pre, 2.0).view(offset, {64, 3072});
                  Tensor op;
                  with_bf16_operands(be, [&] { op = be.gelu_operand(x); });
                  return std::vector<Output>{output(be, "gelu(x) bf16", op)};
                });
  for (int64_t offset : {0, 1})
    cases.add("gelu, gelu_backward bf16->fp32" + std::string(offset ? " x+1" : ""), DType::F32,
              dims({64, 3072}), [=](Backend& be) {
                Inputs in(be, DType::F32, kSeed + 57 + offset);
                const int64_t n = 64 * 3072;
                const Tensor x = in.normal_as({n + 1}, DType::BF16, 2.0).view(offset, {64, 3072});
                const Tensor dout = in.normal({n + 1}, 1.0).view(offset, {64, 3072});
                const Tensor dout16 = in.normal_as({n + 1}, DType::BF16, 1.0).view(offset, {64, 3072});
                auto fresh = [&] { return in.normal({n + 1}).view(offset, {64, 3072}); };
                Tensor g = fresh(), dx = fresh(), dx16 = fresh();
                be.gelu_forward(g, x);
                be.gelu_backward(dx, x, dout);
                be.gelu_backward(dx16, x, dout16);  // bf16-mixed's bf16 gradient of gelu(fc)
                return std::vector<Output>{output(be, "gelu", g), output(be, "dgelu", dx),
                                           output(be, "dgelu, bf16 dout", dx16)};
              });
  // Backend::layernorm_operand: the normalised rows rounded to bf16 as they are written (bf16's
  // bound, as gelu_operand's), and the statistics (fp32's, as the layer cases' LayerNorm); four
  // channels a lane where aligned, one from a view one element in.
  for (int64_t offset : {0, 1})
    cases.add("layernorm_operand fp32->bf16" + std::string(offset ? " x+1" : ""), DType::F32, dims({64, 768}),
              [=](Backend& be) {
                Inputs in(be, DType::F32, kSeed + 54 + offset);
                const Tensor x = in.normal({64 * 768 + 1}, 2.0).view(offset, {64, 768});
                const Tensor w = in.normal({768}, 1.0), b = in.normal({768}, 1.0);
                Tensor mean = be.alloc({64}, DType::F32), rstd = be.alloc({64}, DType::F32), op;
                with_bf16_operands(be, [&] { op = be.layernorm_operand(mean, rstd, x, w, b, 1e-5); });
                return std::vector<Output>{output(be, "ln(x) bf16", op), output(be, "mean", mean),
                                           output(be, "rstd", rstd)};
              });
  // Backend::cross_entropy_backward_window_operand: the loss gradient written straight to its bf16
  // copy, over rows padded past the vocabulary (264 columns, 257 valid) with about one target in
  // eight ignored (a zero row); the logsumexp from each backend's own forward on the same logits.
  cases.add("cross_entropy_backward_window_operand", DType::BF16, dims({96, 264}), [=](Backend& be) {
    const int64_t N = 96, cols = 264, V = 257;
    const VocabWindow whole{0, V, V};
    Inputs in(be, DType::F32, kSeed + 56);
    const Tensor logits = in.normal({N, cols}, 3.0);
    const Tensor targets = in.ids({N}, 0, V, 0.125);
    Tensor lse = be.alloc({N}, DType::F32), losses = be.alloc({N}, DType::F32), row_max = be.alloc({N}, DType::F32);
    Tensor sums = be.alloc({2, N}, DType::F32), op;
    be.logits_row_max(row_max, logits, targets, whole);
    be.logits_exp_sums(sums, logits, row_max, targets, whole);
    be.cross_entropy_from_sums(losses, lse, row_max, sums, targets);
    with_bf16_operands(be, [&] { op = be.cross_entropy_backward_window_operand(logits, lse, targets, whole, 0.5); });
    return std::vector<Output>{output(be, "dlogits bf16", op)};
  });
  // Backend::gelu_backward_operand: the GELU's input gradient rounded to bf16 with its bias gradient
  // (one pass over inp and dout on a GPU, the column sums of bias_grad), over one chunk of rows
  // (N = 96) and three (N = 1040).
  // An fp32 inp and dout, and bf16-mixed's bf16 pre-activation with an fp32 and a bf16 dout.
  for (const auto& [pre, grad] : std::vector<std::pair<DType, DType>>{
           {DType::F32, DType::F32}, {DType::BF16, DType::F32}, {DType::BF16, DType::BF16}})
    for (const auto& [tokens, channels] : std::vector<std::pair<int64_t, int64_t>>{{96, 64}, {1040, 40}})
      cases.add("gelu_backward_operand " + (grad == DType::BF16 ? std::string("bf16 x2") : dtype_name(pre)) +
                    "->bf16, db",
                DType::F32, dims({tokens, channels}), [=](Backend& be) {
                  Inputs in(be, DType::F32, kSeed + 52 + tokens);
                  const Tensor inp = in.normal_as({tokens, channels}, pre, 2.0);
                  const Tensor dout = in.normal_as({tokens, channels}, grad, 1.0), db = in.normal({channels}, 1.0);
                  Tensor op;
                  with_bf16_operands(be, [&] { op = be.gelu_backward_operand(inp, dout, db); });
                  return std::vector<Output>{output(be, "d bf16", op), output(be, "db", db)};
                });
}

}  // namespace tripod::backend_check
