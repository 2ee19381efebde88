// The bf16 copies of a span's weights that its forwards make under the bf16-operand policy, shared
// by every micro-batch in flight. A linear layer's forward rounds its weight to a bf16 GEMM operand
// (Backend::gemm_operands) and its backward's dX product takes the same copy again. The weights do
// not change while any micro-batch is between its forward and its backward (the update comes after
// the step's last backward), so the micro-batches in flight at once - up to p in a 1F1B
// pipeline's warm-up, all m under all-forward-all-backward - need one copy a weight, not one each:
// the first forward makes it, the others take it, and it is dropped with its last holder's
// backward. Megatron-LM keeps one bf16 copy of the model's weights for the same reason.
#pragma once
#include <cstddef>
#include <map>

#include "core/tensor.h"

namespace tripod {

class SharedWeightCopies {
 public:
  // The copy of weight `index` that a micro-batch in flight holds, or an undefined tensor.
  Tensor find(std::size_t index) const;
  // One more holder of `copy`: find(index)'s tensor, or a new copy where find had none.
  void hold(std::size_t index, const Tensor& copy);
  // One holder fewer; the copy is dropped with its last (the holders' own handles keep the
  // storage until they are cleared too).
  void release(std::size_t index);
  std::size_t held() const { return entries_.size(); }  // weights with a copy in flight
  std::size_t bytes() const;                            // of those copies

 private:
  struct Entry {
    Tensor copy;
    int holders = 0;
  };
  std::map<std::size_t, Entry> entries_;  // by the weight's index in the span's specs
};

}  // namespace tripod
