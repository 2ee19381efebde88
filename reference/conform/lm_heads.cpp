#include "conform/lm_heads.h"

#include <bit>
#include <cstdint>

#include "core/error.h"

namespace tripod::conform {

bool runs_tied_head(const std::string& heads, const ParallelLayout& l) {
  if (heads != "alternate") return heads == "tied";
  const auto product = static_cast<std::uint64_t>(l.tp) * static_cast<std::uint64_t>(l.dp) *
                       static_cast<std::uint64_t>(l.micro_batches);
  const int floor_log2 = std::bit_width(product) - 1;
  return floor_log2 % 2 == 0;
}

bool is_heads_choice(const std::string& heads) {
  return heads == "alternate" || heads == "tied" || heads == "untied";
}

void check_heads_choice(const std::string& heads) {
  TRIPOD_CHECK(is_heads_choice(heads), "--heads must be alternate, tied or untied (got '", heads, "')");
}

}  // namespace tripod::conform
