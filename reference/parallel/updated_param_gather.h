// ZeRO-1/2's all-gather after the optimizer step: every rank updated its slice of each bucket in
// its full fp32 parameters (the slice is the master copy of those elements) and gathers the others'
// slices back in place.
//
// Under the bf16-operand policy a bucket travels as parallel/bucket_gather_plan.h plans: as bf16,
// widened back into the other ranks' slices of [exact, end), its exact head [0, exact) broadcast
// in fp32, in place, by the ranks whose slices hold it. A rank's own slice is never
// overwritten, so the masters stay exact; the other slices hold the bf16 values widened, which the
// model rounds to the bf16 it would have rounded the exact values to: the same bits, for about half
// the bytes (Megatron's distributed optimizer gathers its bf16 parameters likewise).
//
// So the full parameters are exact only in this rank's slices and the heads. Whoever needs every
// exact value (reports, golden fingerprints) gathers them anew (ZeroEngine::gather_params);
// checkpoints write each piece from its owner's slice.
#pragma once
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "parallel/bucket_gather_plan.h"
#include "parallel/shard_layout.h"
#include "parallel/zero_policy.h"

namespace tripod {

// Gathers every bucket of `full_params` (fp32 [layout.total()]) from its ranks' slices, in place, as
// planned; at most two buckets' bf16 buffers exist at once (counted in `memory`). Collective over
// `dp`. Returns the bytes the gathers wrote on this rank (their whole outputs, as ZeRO-3's
// ParamGatherer::received_bytes counts them). `round_own_slices`: the rounded-masters fault
// (parallel/fault_plan.h), never otherwise.
int64_t gather_updated_params(const ShardLayout& layout, const Tensor& full_params, Communicator& dp,
                              Backend& backend, TransientMemory& memory, bool bf16_operand_gathers,
                              bool round_own_slices = false);

}  // namespace tripod
