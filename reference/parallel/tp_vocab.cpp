#include "parallel/tp_vocab.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "parallel/tp_regions.h"

namespace tripod::tp {
namespace {

constexpr int64_t kColumnBlock = 64;  // embedding backward: columns per OpenMP task, as in the CPU kernel

void check_cpu(const char* what, std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors)
    check(!t->defined() || t->device() == Device::CPU, what, ": runs on CPU tensors only (for now)");
}

void check_shape(const char* what, const char* arg, const Tensor& t, int64_t expected, const char* shape) {
  check(t.defined() && t.numel() == expected, what, ": ", arg, " ",
        t.defined() ? shape_str(t.shape()) : std::string("(undefined)"), " should hold ", shape, " = ", expected,
        " elements");
}

void check_ids(const char* what, const Tensor& ids, int64_t vocab, bool allow_ignored) {
  check(ids.defined() && ids.dtype() == DType::I32, what, ": token ids must be an int32 tensor");
  const int32_t* id = ids.data<int32_t>();
  for (int64_t n = 0; n < ids.numel(); ++n)
    check(id[n] < vocab && (allow_ignored || id[n] >= 0), what, ": ", allow_ignored ? "target" : "token", " id ", id[n],
          " at position ", n, " is outside the vocabulary of ", vocab);
}

void check_shard(const char* what, const VocabShard& shard, const Communicator& tp) {
  const VocabShard expected = vocab_shard(shard.vocab, tp.size(), tp.rank());
  check(shard.rows == expected.rows && shard.start == expected.start, what,
        ": the vocab shard was made for another tensor-parallel size or rank than the group ", tp.name());
}

// Calls f(T{}) with T = float or double, the dtype of `t`.
template <typename F>
void dispatch_float(const char* what, const Tensor& t, F&& f) {
  if (t.dtype() == DType::F32) return f(float{});
  if (t.dtype() == DType::F64) return f(double{});
  fail(what, ": dtype ", dtype_name(t.dtype()), " is not supported (fp32 and fp64 only)");
}

}  // namespace

int64_t VocabShard::valid() const { return std::clamp<int64_t>(vocab - start, 0, rows); }

int64_t padded_vocab(int64_t vocab, int tp) {
  check(tp >= 1, "tensor parallel size must be >= 1 (got ", tp, ")");
  return (vocab + tp - 1) / tp * tp;
}

VocabShard vocab_shard(int64_t vocab, int tp, int rank) {
  check(vocab >= 1, "vocabulary size must be >= 1 (got ", vocab, ")");
  check(rank >= 0 && rank < tp, "tensor parallel rank ", rank, " is outside a group of ", tp);
  const int64_t rows = padded_vocab(vocab, tp) / tp;
  return VocabShard{vocab, rows, rank * rows};
}

void vocab_parallel_embedding_forward(Backend& be, const TpGroup& tp, const VocabShard& shard, const Tensor& out,
                                      const Tensor& out_partial, const Tensor& tokens, const Tensor& wte,
                                      const Tensor& wpe, int64_t seq_len) {
  const char* what = "vocab_parallel_embedding_forward";
  check_cpu(what, {&out, &out_partial, &tokens, &wte, &wpe});
  check_shard(what, shard, tp.comm);
  check(wte.defined() && wte.rank() == 2 && wte.dim(0) == shard.rows, what, ": the wte shard must be [", shard.rows,
        ", C]");
  const int64_t C = wte.dim(1), N = tokens.numel();
  check(wpe.defined() && wpe.rank() == 2 && wpe.dim(1) == C && seq_len >= 1 && seq_len <= wpe.dim(0), what,
        ": wpe must be [context >= seq_len = ", seq_len, ", ", C, "]");
  const Tensor& partial = tp.sequence_parallel ? out_partial : out;  // [N, C]
  if (tp.sequence_parallel) check_sequence_shapes(what, tp.size(), out, out_partial);
  check_shape(what, tp.sequence_parallel ? "out_partial" : "out", partial, N * C, "[N, C]");
  check_ids(what, tokens, shard.vocab, false);

  dispatch_float(what, wte, [&](auto tag) {
    using T = decltype(tag);
    const int32_t* tok = tokens.data<int32_t>();
    const T* w = wte.data<T>();
    T* p = partial.data<T>();
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const int64_t row = tok[n] - shard.start;
      T* o = p + n * C;
      if (row >= 0 && row < shard.valid())
        std::copy(w + row * C, w + (row + 1) * C, o);
      else
        std::fill(o, o + C, T(0));  // another rank's token: it contributes the row
    }
  });
  int64_t first = 0;  // token index of out's first row
  if (tp.sequence_parallel) {
    reduce_scatter_to_sequence_region_forward(tp.comm, out_partial, out);
    first = tp.rank() * (N / tp.size());
  } else {
    reduce_from_tp_region_forward(tp.comm, out);
  }
  dispatch_float(what, wte, [&](auto tag) {
    using T = decltype(tag);
    const T* pos = wpe.data<T>();
    T* o = out.data<T>();
    const int64_t rows = out.numel() / std::max<int64_t>(C, 1);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < rows; ++i) {
      const T* pe = pos + ((first + i) % seq_len) * C;
      for (int64_t c = 0; c < C; ++c) o[i * C + c] += pe[c];  // wte + wpe, as the unsplit kernel adds them
    }
  });
  (void)be;
}

void vocab_parallel_embedding_backward(Backend& be, const TpGroup& tp, const VocabShard& shard, const Tensor& dwte,
                                       const Tensor& dwpe, const Tensor& dout, const Tensor& dout_gathered,
                                       const Tensor& tokens, int64_t seq_len) {
  const char* what = "vocab_parallel_embedding_backward";
  check_cpu(what, {&dwte, &dwpe, &dout, &dout_gathered, &tokens});
  check_shard(what, shard, tp.comm);
  check(dwte.defined() && dwte.rank() == 2 && dwte.dim(0) == shard.rows, what, ": the wte gradient shard must be [",
        shard.rows, ", C]");
  const int64_t C = dwte.dim(1), N = tokens.numel();
  check(dwpe.defined() && dwpe.rank() == 2 && dwpe.dim(1) == C && seq_len >= 1 && seq_len <= dwpe.dim(0), what,
        ": the wpe gradient must be [context >= seq_len = ", seq_len, ", ", C, "]");
  const Tensor& g = tp.sequence_parallel ? dout_gathered : dout;  // [N, C], the same on every rank
  if (tp.sequence_parallel) check_sequence_shapes(what, tp.size(), dout, dout_gathered);
  check_shape(what, tp.sequence_parallel ? "dout_gathered" : "dout", g, N * C, "[N, C]");
  check_ids(what, tokens, shard.vocab, false);

  if (tp.sequence_parallel) reduce_scatter_to_sequence_region_backward(tp.comm, dout, dout_gathered);
  dispatch_float(what, dwte, [&](auto tag) {
    using T = decltype(tag);
    const int32_t* tok = tokens.data<int32_t>();
    const T* d = g.data<T>();
    T* w = dwte.data<T>();
    T* p = dwpe.data<T>();
    // Parallel over column blocks, tokens in order inside each: every element accumulates its
    // tokens in the same order as the unsplit kernel, whatever the thread count.
#pragma omp parallel for schedule(static)
    for (int64_t c0 = 0; c0 < C; c0 += kColumnBlock) {
      const int64_t c1 = std::min(C, c0 + kColumnBlock);
      for (int64_t n = 0; n < N; ++n) {
        const T* dn = d + n * C;
        const int64_t row = tok[n] - shard.start;
        T* pn = p + (n % seq_len) * C;
        if (row >= 0 && row < shard.valid()) {
          T* wn = w + row * C;
          for (int64_t c = c0; c < c1; ++c) wn[c] += dn[c];
        }
        for (int64_t c = c0; c < c1; ++c) pn[c] += dn[c];
      }
    }
  });
  (void)be;
}

void vocab_parallel_cross_entropy_forward(Backend& be, Communicator& tp, const VocabShard& shard, const Tensor& losses,
                                          const Tensor& logsumexp, const Tensor& logits, const Tensor& targets) {
  const char* what = "vocab_parallel_cross_entropy_forward";
  check_cpu(what, {&losses, &logsumexp, &logits, &targets});
  check_shard(what, shard, tp);
  const int64_t N = targets.numel(), V = shard.rows, valid = shard.valid();
  check_shape(what, "logits", logits, N * V, "[N, ceil(V/tp)]");
  check_shape(what, "losses", losses, N, "[N]");
  check_shape(what, "logsumexp", logsumexp, N, "[N]");
  check_ids(what, targets, shard.vocab, true);

  dispatch_float(what, logits, [&](auto tag) {
    using T = decltype(tag);
    const DType dt = dtype_of<T>();
    Tensor row_max = be.alloc({N}, dt), sums = be.alloc({2, N}, dt);  // sums: [sum of exp | target logit]
    const T* x = logits.data<T>();
    const int32_t* tgt = targets.data<int32_t>();
    T* m = row_max.data<T>();
    T* s = sums.data<T>();
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n)
      m[n] = valid ? *std::max_element(x + n * V, x + n * V + valid) : -std::numeric_limits<T>::infinity();
    tp.all_reduce(row_max, row_max, ReduceOp::Max);  // the max is exact in any order
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const T* xn = x + n * V;
      T sum = 0;
      for (int64_t j = 0; j < valid; ++j) sum += std::exp(xn[j] - m[n]);
      s[n] = sum;
      const int64_t j = static_cast<int64_t>(tgt[n]) - shard.start;
      s[N + n] = tgt[n] >= 0 && j >= 0 && j < valid ? xn[j] : T(0);  // exact once summed: one rank holds it
    }
    tp.all_reduce(sums, sums, ReduceOp::Sum);
    T* loss = losses.data<T>();
    T* lse = logsumexp.data<T>();
    for (int64_t n = 0; n < N; ++n) {
      lse[n] = m[n] + std::log(s[n]);  // as the unsplit kernel: row_max + log(sum)
      loss[n] = tgt[n] < 0 ? T(0) : lse[n] - s[N + n];
    }
  });
}

void vocab_parallel_cross_entropy_backward(Backend& be, const VocabShard& shard, const Tensor& logits,
                                           const Tensor& logsumexp, const Tensor& targets, double grad_scale) {
  const char* what = "vocab_parallel_cross_entropy_backward";
  check_cpu(what, {&logits, &logsumexp, &targets});
  const int64_t N = targets.numel(), V = shard.rows, valid = shard.valid();
  check_shape(what, "logits", logits, N * V, "[N, ceil(V/tp)]");
  check_shape(what, "logsumexp", logsumexp, N, "[N]");
  check_ids(what, targets, shard.vocab, true);

  dispatch_float(what, logits, [&](auto tag) {
    using T = decltype(tag);
    const T g = static_cast<T>(grad_scale);
    T* x = logits.data<T>();
    const T* lse = logsumexp.data<T>();
    const int32_t* tgt = targets.data<int32_t>();
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      T* xn = x + n * V;
      if (tgt[n] < 0) {
        std::fill(xn, xn + V, T(0));
        continue;
      }
      for (int64_t j = 0; j < valid; ++j) xn[j] = std::exp(xn[j] - lse[n]) * g;
      std::fill(xn + valid, xn + V, T(0));  // padding: no logit, no gradient
      const int64_t j = static_cast<int64_t>(tgt[n]) - shard.start;
      if (j >= 0 && j < valid) xn[j] -= g;
    }
  });
  (void)be;
}

}  // namespace tripod::tp
