// A piece of the training state one rank holds, described in the logical coordinates a checkpoint
// uses, so that a checkpoint written under one parallel layout can be read under another.
//
// `local` is a contiguous run of elements in memory (a parameter's TP shard, a ZeRO slice of it, an
// AdamW moment); `runs` say which logical elements it holds: local [local, local+length) holds
// logical [logical, logical+length) of the tensor flattened row-major. Local elements in no run are
// padding (a vocabulary shard's rows past the vocabulary). The model engine builds these; the
// checkpoint code reads and writes them knowing nothing of tensor, pipeline or data parallelism.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace tripod {

struct LogicalRun {
  int64_t local = 0, logical = 0, length = 0;
};

struct StateRegion {
  std::string tensor;       // logical parameter name, e.g. "h.3.attn.c_attn.weight"
  Shape logical_shape;      // the whole tensor's shape
  std::string kind;         // "param", "adam_m" or "adam_v"
  Tensor local;             // contiguous, on the backend's device
  std::vector<LogicalRun> runs;
  // Whether this rank writes the region. Every logical element is written by exactly one rank (a
  // replica - over DP, over TP, the pipeline's tied copy - is read on load but written once).
  bool saves = true;
};

// The runs of `runs` that fall in local elements [begin, begin + count), shifted so that `begin`
// becomes local 0 (a ZeRO slice of a tensor-parallel shard).
inline std::vector<LogicalRun> runs_within(const std::vector<LogicalRun>& runs, int64_t begin, int64_t count) {
  std::vector<LogicalRun> out;
  for (const LogicalRun& r : runs) {
    const int64_t lo = std::max(r.local, begin), hi = std::min(r.local + r.length, begin + count);
    if (lo < hi) out.push_back({lo - begin, r.logical + (lo - r.local), hi - lo});
  }
  return out;
}

}  // namespace tripod
