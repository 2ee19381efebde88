#include "model/recompute.h"

#include "core/error.h"

namespace tripod {

Recompute parse_recompute(const std::string& name) {
  if (name == "none") return Recompute::None;
  if (name == "selective") return Recompute::Selective;
  if (name == "full") return Recompute::Full;
  fail("train.recompute: none, selective or full (activation recomputation), not '", name, "'");
}

std::string recompute_name(Recompute recompute) {
  switch (recompute) {
    case Recompute::None: return "none";
    case Recompute::Selective: return "selective";
    case Recompute::Full: return "full";
  }
  return "?";
}

BlockActivationElements block_activation_elements(Recompute recompute, int64_t n, int64_t c, int64_t f, int64_t heads,
                                                  int64_t t) {
  // A block's forward writes, per token: ln1 (c) and its mean and rstd (2), qkv (3c), the attention
  // output (c), res2 (c), ln2 (c) and its statistics (2), fc and gelu(fc) (2f), res3 (c); and per
  // sequence the probabilities, heads x t x t.
  const int64_t probs = n * heads * t;  // B*H*T*T, with B = n/t
  const int64_t gelu = n * f;
  const int64_t all = n * (8 * c + 4 + 2 * f) + probs;
  switch (recompute) {
    case Recompute::None: return {all, 0};
    case Recompute::Selective: return {all - probs - gelu, probs + gelu};
    case Recompute::Full: return {n * c, all - n * c};  // res3 kept; the rest shared
  }
  return {};
}

}  // namespace tripod
