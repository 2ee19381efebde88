// Operator checks that tripod conform runs before the layouts, for what a short training run of a
// small model cannot stress: the vocab-parallel cross-entropy (forward and backward) on every TP
// size the layouts use, with logits of magnitude 1000 (fp64) or 100 (fp32) - large enough that
// exp() overflows or underflows unless the logsumexp shift is the row maximum - over a vocabulary
// the TP size does not divide, whose padding columns hold large values that must never count.
// Compared with the unsplit kernels on the whole logits, with the layouts' tolerances.
#pragma once
#include <vector>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "conform/conformance.h"
#include "parallel/fault_plan.h"

namespace tripod::conform {

// `tp` is a tensor-parallel group (any size >= 1); every member must call. Errors report the
// losses as loss_* and the logit gradients as param_* ("dlogits").
Errors check_vocab_parallel_loss(Communicator& tp, Backend& backend, DType dtype, int64_t vocab,
                                 const FaultPlan& faults);

// The largest |got - ref| (into `worst_abs`) over the largest finite |ref|. An infinity or NaN on
// either side is infinitely far: the reference is the backend's own unsplit kernel, which on a
// new device is as untried as the split one, and a NaN of the reference once passed.
double worst_relative(const std::vector<double>& got, const std::vector<double>& ref, double& worst_abs);

}  // namespace tripod::conform
