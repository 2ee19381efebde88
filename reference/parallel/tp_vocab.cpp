#include "parallel/tp_vocab.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "parallel/tp_regions.h"

namespace tripod::tp {
namespace {

void check_shape(const char* what, const char* arg, const Tensor& t, int64_t expected, const char* shape) {
  TRIPOD_CHECK(t.defined() && t.numel() == expected, what, ": ", arg, " ",
               t.defined() ? shape_str(t.shape()) : std::string("(undefined)"), " should hold ", shape, " = ", expected,
               " elements");
}

void check_shard(const char* what, const VocabShard& shard, const Communicator& tp) {
  const VocabShard expected = vocab_shard(shard.vocab, tp.size(), tp.rank(), shard.multiple);
  check(shard.rows == expected.rows && shard.start == expected.start, what,
        ": the vocab shard was made for another tensor-parallel size or rank than the group ", tp.name());
}

}  // namespace

int64_t VocabShard::valid() const { return std::clamp<int64_t>(vocab - start, 0, rows); }

int64_t padded_vocab(int64_t vocab, int tp, int multiple) {
  check(tp >= 1, "tensor parallel size must be >= 1 (got ", tp, ")");
  check(multiple >= 1, "the vocabulary padding multiple must be >= 1 (got ", multiple, ")");
  const int64_t rows = (vocab + tp - 1) / tp;
  return (rows + multiple - 1) / multiple * multiple * tp;
}

VocabShard vocab_shard(int64_t vocab, int tp, int rank, int multiple) {
  check(vocab >= 1, "vocabulary size must be >= 1 (got ", vocab, ")");
  check(rank >= 0 && rank < tp, "tensor parallel rank ", rank, " is outside a group of ", tp);
  const int64_t rows = padded_vocab(vocab, tp, multiple) / tp;
  return VocabShard{vocab, rows, rank * rows, multiple};
}

VocabWindow VocabShard::window() const { return {start, valid(), vocab}; }

void vocab_parallel_embedding_forward(Backend& be, const TpGroup& tp, const VocabShard& shard, const Tensor& out,
                                      const Tensor& out_partial, const Tensor& tokens, const Tensor& wte,
                                      const Tensor& wpe, int64_t seq_len) {
  const char* what = "vocab_parallel_embedding_forward";
  check_shard(what, shard, tp.comm);
  check(wte.defined() && wte.rank() == 2 && wte.dim(0) == shard.rows, what, ": the wte shard must be [", shard.rows,
        ", C]");
  const int64_t C = wte.dim(1), N = tokens.numel();
  check(wpe.defined() && wpe.rank() == 2 && wpe.dim(1) == C && seq_len >= 1 && seq_len <= wpe.dim(0), what,
        ": wpe must be [context >= seq_len = ", seq_len, ", ", C, "]");
  const Tensor& partial = tp.sequence_parallel ? out_partial : out;  // [N, C]
  if (tp.sequence_parallel) check_sequence_shapes(what, tp.size(), out, out_partial);
  check_shape(what, tp.sequence_parallel ? "out_partial" : "out", partial, N * C, "[N, C]");

  // partial[n] = this rank's row of token n, or zeros: another rank contributes it (ids checked here,
  // before any communication).
  be.embedding_lookup_window(partial, tokens, wte, shard.window());
  int64_t first = 0;  // token index of out's first row
  if (tp.sequence_parallel) {
    reduce_scatter_to_sequence_region_forward(tp.comm, out_partial, out);
    first = tp.rank() * (N / tp.size());
  } else {
    reduce_from_tp_region_forward(tp.comm, out);
  }
  be.position_add(out, wpe, first, seq_len);  // wte + wpe, after the sum, as the unsplit kernel adds them
}

void vocab_parallel_embedding_backward(Backend& be, const TpGroup& tp, const VocabShard& shard, const Tensor& dwte,
                                       const Tensor& dwpe, const Tensor& dout, const Tensor& dout_gathered,
                                       const Tensor& tokens, int64_t seq_len) {
  const char* what = "vocab_parallel_embedding_backward";
  check_shard(what, shard, tp.comm);
  check(dwte.defined() && dwte.rank() == 2 && dwte.dim(0) == shard.rows, what, ": the wte gradient shard must be [",
        shard.rows, ", C]");
  const int64_t C = dwte.dim(1), N = tokens.numel();
  check(dwpe.defined() && dwpe.rank() == 2 && dwpe.dim(1) == C && seq_len >= 1 && seq_len <= dwpe.dim(0), what,
        ": the wpe gradient must be [context >= seq_len = ", seq_len, ", ", C, "]");
  const Tensor& g = tp.sequence_parallel ? dout_gathered : dout;  // [N, C], the same on every rank
  if (tp.sequence_parallel) check_sequence_shapes(what, tp.size(), dout, dout_gathered);
  check_shape(what, tp.sequence_parallel ? "dout_gathered" : "dout", g, N * C, "[N, C]");

  if (tp.sequence_parallel) reduce_scatter_to_sequence_region_backward(tp.comm, dout, dout_gathered);
  // Every element accumulates its tokens in the unsplit kernel's order.
  be.embedding_backward_window(dwte, dwpe, g, tokens, shard.window(), seq_len);
}

namespace {
bool has(const FaultPlan* faults, Fault f) { return faults != nullptr && faults->has(f); }

// The window the softmax covers: the real vocabulary, or (the planted bug) the padding too.
VocabWindow softmax_window(const VocabShard& shard, const FaultPlan* faults) {
  VocabWindow w = shard.window();
  if (has(faults, Fault::PaddedVocabSoftmax)) w.valid = shard.rows;
  return w;
}
}  // namespace

void vocab_parallel_cross_entropy_forward(Backend& be, Communicator& tp, const VocabShard& shard, const Tensor& losses,
                                          const Tensor& logsumexp, const Tensor& logits, const Tensor& targets,
                                          const FaultPlan* faults) {
  const char* what = "vocab_parallel_cross_entropy_forward";
  check_shard(what, shard, tp);
  const int64_t N = targets.numel(), V = shard.rows;
  check_shape(what, "logits", logits, N * V, "[N, ceil(V/tp)]");
  check_shape(what, "losses", losses, N, "[N]");
  check_shape(what, "logsumexp", logsumexp, N, "[N]");
  const DType dt = losses.dtype();  // the statistics': fp32 for bf16-mixed's bf16 logits
  check((logits.dtype() == dt || (logits.dtype() == DType::BF16 && dt == DType::F32)) && logsumexp.dtype() == dt, what,
        ": logits, losses and logsumexp must share a dtype (or bf16 logits with fp32 losses)");

  Tensor row_max = be.alloc({N}, dt), sums = be.alloc({2, N}, dt);  // sums: [sum of exp | target logit]
  const VocabWindow window = softmax_window(shard, faults);
  // Targets are checked before communicating: by the model on the host, and again by the CPU backend.
  be.logits_row_max(row_max, logits, targets, window);
  // The max is exact in any order; any other shift is exact in real arithmetic but overflows or
  // underflows exp() once the logits are large (the MAX->SUM fault).
  tp.all_reduce(row_max, row_max, has(faults, Fault::MaxToSumShift) ? ReduceOp::Sum : ReduceOp::Max);
  be.logits_exp_sums(sums, logits, row_max, targets, window);
  tp.all_reduce(sums, sums, ReduceOp::Sum);  // the target logit is exact once summed: one rank holds it
  be.cross_entropy_from_sums(losses, logsumexp, row_max, sums, targets);
}

void vocab_parallel_cross_entropy_backward(Backend& be, const VocabShard& shard, const Tensor& logits,
                                           const Tensor& logsumexp, const Tensor& targets, double grad_scale,
                                           const FaultPlan* faults) {
  const char* what = "vocab_parallel_cross_entropy_backward";
  const int64_t N = targets.numel(), V = shard.rows;
  check_shape(what, "logits", logits, N * V, "[N, ceil(V/tp)]");
  check_shape(what, "logsumexp", logsumexp, N, "[N]");
  be.cross_entropy_backward_window(logits, logsumexp, targets, softmax_window(shard, faults), grad_scale);
}

Tensor vocab_parallel_cross_entropy_backward_operand(Backend& be, const VocabShard& shard, const Tensor& logits,
                                                     const Tensor& logsumexp, const Tensor& targets,
                                                     double grad_scale, const FaultPlan* faults) {
  const char* what = "vocab_parallel_cross_entropy_backward_operand";
  const int64_t N = targets.numel(), V = shard.rows;
  check_shape(what, "logits", logits, N * V, "[N, ceil(V/tp)]");
  check_shape(what, "logsumexp", logsumexp, N, "[N]");
  return be.cross_entropy_backward_window_operand(logits, logsumexp, targets, softmax_window(shard, faults),
                                                  grad_scale);
}

}  // namespace tripod::tp
