// Whether a checkpoint's values are all numbers. A state holding an infinity or a NaN (a
// divergence inside the update: fp32 overflowing at a learning rate near 1e39) trains into NaN
// from the first step after it, so it is never written, and a reader refuses one an earlier
// Tripod wrote, naming the tensor, rather than a resume reporting "training diverged".
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "ckpt/manifest.h"
#include "core/dtype.h"

namespace tripod::ckpt {

struct NonFiniteValues {
  int64_t count = 0;   // infinite or NaN elements
  int64_t first = -1;  // index of the first of them (-1: none)
  double first_value = 0;
};

// Counts the infinite or NaN elements among `n` elements of `data` (fp32, fp64 or bf16; int32
// holds no such value).
NonFiniteValues find_nonfinite(const std::byte* data, int64_t n, DType dtype);

// The logical element of `block`'s tensor that the block's `index`-th element holds.
int64_t block_logical_element(const Block& block, int64_t index);

// "tensor 'wte.weight' (param) holds 3 infinite or NaN values (the first: element 17, nan)"
std::string describe_nonfinite(const std::string& tensor, const std::string& kind, const NonFiniteValues& found,
                               int64_t first_logical);

}  // namespace tripod::ckpt
