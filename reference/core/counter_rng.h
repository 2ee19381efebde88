// Counter-based random numbers (Philox4x32-10, Salmon et al. 2011). A value depends only on
// (seed, stream name, element index), never on how many values were drawn before, so any shard of
// any tensor can be initialised on its own, on any rank, and match the full tensor bit for bit.
#pragma once
#include <array>
#include <cstdint>
#include <string_view>

namespace tripod {

class CounterRng {
 public:
  // The stream key is derived from the seed and a name (e.g. "h.3.attn.c_attn.weight").
  CounterRng(uint64_t seed, std::string_view stream_name);

  std::array<uint32_t, 4> block(uint64_t index) const;  // raw Philox output for counter `index`
  double uniform(uint64_t index) const;                 // in (0, 1), 53-bit resolution
  double normal(uint64_t index) const;                  // standard normal (Box-Muller)
  uint64_t key() const { return key_; }

 private:
  uint64_t key_;
};

}  // namespace tripod
