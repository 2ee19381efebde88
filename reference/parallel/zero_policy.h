// What a ZeRO stage (Rajbhandari et al. 2020) shards and when it reduces, computed once from the
// stage so that no engine compares stage numbers:
//
//   stage | parameters         | gradients                               | AdamW m, v | after the step
//   0     | full               | full; buckets all-reduced in backward   | full       | (all ranks equal)
//   1     | full               | full; buckets reduce-scattered          | shard      | all-gather params
//   2     | full               | bucket-sized while in flight, shard     | shard      | all-gather params
//   3     | shard; a bucket    | as stage 2                              | shard      | (stays sharded)
//         | gathered on use    |                                         |            |
//
// Stages 0 and 1 reduce once per optimizer step (after the last micro-batch, on the accumulated
// gradients); stages 2 and 3 reduce every micro-batch and accumulate into the gradient shard.
#pragma once
#include <cstddef>

#include "backend/backend.h"
#include "core/error.h"
#include "parallel/shard_layout.h"

namespace tripod {

struct ZeroPolicy {
  int stage = 0;
  bool full_params = true;                 // every rank holds every parameter (0-2)
  bool full_grads = true;                  // every rank holds every gradient (0-1)
  bool shard_optimizer = false;            // m, v and the update cover this rank's shard only (1-3)
  bool reduce_scatter = false;             // buckets are reduce-scattered (1-3), else all-reduced (0)
  bool reduce_every_microbatch = false;    // (2-3), else once after the last micro-batch (0-1)
  bool gather_params_after_step = false;   // the updated shards are all-gathered (1-2)
  bool gather_params_on_use = false;       // a bucket's parameters are gathered for each use (3)

  static ZeroPolicy for_stage(int stage) {
    check(stage >= 0 && stage <= 3, "ZeRO stage must be 0, 1, 2 or 3 (got ", stage, ")");
    ZeroPolicy p;
    p.stage = stage;
    p.full_params = stage <= 2;
    p.full_grads = stage <= 1;
    p.shard_optimizer = stage >= 1;
    p.reduce_scatter = stage >= 1;
    p.reduce_every_microbatch = stage >= 2;
    p.gather_params_after_step = stage == 1 || stage == 2;
    p.gather_params_on_use = stage == 3;
    return p;
  }
};

// The persistent buffers a stage keeps (undefined where the policy has none), laid out as the
// ShardLayout says: the padded flat buffers and this rank's shards of them.
struct ZeroBuffers {
  Tensor full_params;  // stages 0-2
  Tensor full_grads;   // stages 0-1
  Tensor param_shard;  // stage 3
  Tensor grad_shard;   // stages 1-3

  static ZeroBuffers allocate(const ShardLayout& layout, const ZeroPolicy& policy, Backend& backend, DType dtype) {
    ZeroBuffers z;
    if (policy.full_params) z.full_params = backend.alloc({layout.total()}, dtype);
    if (policy.full_grads) z.full_grads = backend.alloc({layout.total()}, dtype);
    if (!policy.full_params) z.param_shard = backend.alloc({layout.shard_elements()}, dtype);
    if (policy.shard_optimizer) z.grad_shard = backend.alloc({layout.shard_elements()}, dtype);
    return z;
  }
};

// Bytes held by buffers that come and go (gathered parameters, gradient buckets in flight).
struct TransientMemory {
  std::size_t current = 0, peak = 0;
  void add(std::ptrdiff_t delta) {
    current = static_cast<std::size_t>(static_cast<std::ptrdiff_t>(current) + delta);
    if (current > peak) peak = current;
  }
};

}  // namespace tripod
