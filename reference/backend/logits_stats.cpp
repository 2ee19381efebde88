// Backend::logits_stats: a row's max and sum of exponentials for the single-device loss. Two
// passes here (the CPU backends: the bits of the vocabulary-parallel path's two calls); a device
// backend overrides it with one pass over the logits (an online max and sum).
#include "backend/backend.h"

namespace tripod {

void Backend::logits_stats(const Tensor& row_max, const Tensor& sums, const Tensor& logits, const Tensor& targets,
                           VocabWindow window) {
  logits_row_max(row_max, logits, targets, window);
  logits_exp_sums(sums, logits, row_max, targets, window);
}

}  // namespace tripod
