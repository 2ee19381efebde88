#include "conform/op_checks.h"

#include <algorithm>
#include <cmath>

#include "backend/transfer.h"
#include "core/counter_rng.h"
#include "parallel/tp_vocab.h"

namespace tripod::conform {
namespace {

constexpr int64_t kRows = 24;

struct Case {
  std::vector<double> logits;  // [rows, vocab]
  std::vector<int32_t> targets;
};

Case make_case(int64_t vocab, double scale) {
  const CounterRng rng(20, "conform.op.vocab_loss");
  Case c;
  for (int64_t i = 0; i < kRows * vocab; ++i)
    c.logits.push_back(scale * (2 * rng.uniform(static_cast<uint64_t>(i)) - 1));
  for (int64_t n = 0; n < kRows; ++n) {
    const double u = rng.uniform(static_cast<uint64_t>(kRows * vocab + n));
    c.targets.push_back(n % 7 == 3 ? -1 : static_cast<int32_t>(u * static_cast<double>(vocab)));  // some ignored
  }
  return c;
}

Tensor upload_ids(Backend& be, const std::vector<int32_t>& ids) {
  Tensor t = be.alloc({static_cast<int64_t>(ids.size())}, DType::I32);
  be.upload(ids.data(), t);
  return t;
}

}  // namespace

double worst_relative(const std::vector<double>& got, const std::vector<double>& ref, double& worst_abs) {
  double scale = 1e-300;
  worst_abs = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    if (std::isfinite(ref[i])) scale = std::max(scale, std::fabs(ref[i]));
    worst_abs = std::max(worst_abs, distance(got[i], ref[i]));  // infinite where either side is not finite
  }
  return worst_abs / scale;
}

Errors check_vocab_parallel_loss(Communicator& tp, Backend& be, DType dtype, int64_t vocab, const FaultPlan& faults) {
  const bool fp64 = dtype == DType::F64;
  const double scale = fp64 ? 1000.0 : 100.0, tolerance = fp64 ? 1e-10 : 1e-5, grad_scale = 1.0 / kRows;
  const Case c = make_case(vocab, scale);
  const Tensor targets = upload_ids(be, c.targets);

  // The unsplit reference on the whole logits.
  Tensor full = be.alloc({kRows, vocab}, dtype), ref_losses = be.alloc({kRows}, dtype);
  from_host_f64(be, c.logits, full);
  be.cross_entropy_forward(ref_losses, full, targets);
  be.cross_entropy_backward(full, targets, grad_scale);
  const std::vector<double> want_losses = to_host_f64(be, ref_losses), want_grads = to_host_f64(be, full);

  // This rank's columns; its padding columns hold the largest logit there is.
  const tp::VocabShard shard = tp::vocab_shard(vocab, tp.size(), tp.rank());
  std::vector<double> mine(static_cast<std::size_t>(kRows * shard.rows), scale);
  for (int64_t n = 0; n < kRows; ++n)
    for (int64_t j = 0; j < shard.valid(); ++j)
      mine[static_cast<std::size_t>(n * shard.rows + j)] = c.logits[static_cast<std::size_t>(n * vocab + shard.start + j)];
  Tensor logits = be.alloc({kRows, shard.rows}, dtype), losses = be.alloc({kRows}, dtype), lse = be.alloc({kRows}, dtype);
  from_host_f64(be, mine, logits);
  tp::vocab_parallel_cross_entropy_forward(be, tp, shard, losses, lse, logits, targets, &faults);
  tp::vocab_parallel_cross_entropy_backward(be, shard, logits, lse, targets, grad_scale, &faults);
  const std::vector<double> got_losses = to_host_f64(be, losses), got_shard = to_host_f64(be, logits);

  Errors e;
  e.loss_rel = worst_relative(got_losses, want_losses, e.loss_abs);
  std::vector<double> got_grads, ref_grads;  // this rank's real columns
  for (int64_t n = 0; n < kRows; ++n)
    for (int64_t j = 0; j < shard.valid(); ++j) {
      got_grads.push_back(got_shard[static_cast<std::size_t>(n * shard.rows + j)]);
      ref_grads.push_back(want_grads[static_cast<std::size_t>(n * vocab + shard.start + j)]);
    }
  e.param_rel = worst_relative(got_grads, ref_grads, e.param_abs);
  e.worst_param = "dlogits";
  for (int64_t n = 0; n < kRows; ++n)  // padding gets no gradient
    for (int64_t j = shard.valid(); j < shard.rows; ++j)
      if (got_shard[static_cast<std::size_t>(n * shard.rows + j)] != 0) e.param_rel = e.param_abs = INFINITY;
  if (!(e.loss_rel <= tolerance)) {
    e.pass = false;
    e.failure = "losses";
  } else if (!(e.param_rel <= tolerance)) {
    e.pass = false;
    e.failure = "logit gradients";
  }
  return e;
}

}  // namespace tripod::conform
