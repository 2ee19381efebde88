#include "model/weight_copies.h"

#include "core/error.h"

namespace tripod {

Tensor SharedWeightCopies::find(std::size_t index) const {
  const auto it = entries_.find(index);
  return it == entries_.end() ? Tensor() : it->second.copy;
}

void SharedWeightCopies::hold(std::size_t index, const Tensor& copy) {
  check(copy.defined(), "SharedWeightCopies::hold: no copy of weight ", index);
  Entry& entry = entries_[index];
  // A second copy of a weight already held would mean a forward skipped find(): two copies in
  // memory where one was meant, and a holder count that no longer says which one it counts.
  TRIPOD_CHECK(entry.holders == 0 || entry.copy.address() == copy.address(), "SharedWeightCopies::hold: weight ", index,
               " already has a copy in flight (", entry.copy.describe(), "), and another was made (", copy.describe(),
               ")");
  entry.copy = copy;
  ++entry.holders;
}

void SharedWeightCopies::release(std::size_t index) {
  const auto it = entries_.find(index);
  check(it != entries_.end(), "SharedWeightCopies::release: weight ", index, " has no copy in flight");
  if (--it->second.holders == 0) entries_.erase(it);
}

std::size_t SharedWeightCopies::bytes() const {
  std::size_t total = 0;
  for (const auto& [index, entry] : entries_) total += entry.copy.bytes();
  return total;
}

}  // namespace tripod
