#include "microbench/gemm_shapes.h"

#include "core/error.h"

namespace tripod::microbench {

std::string GemmShape::dims() const { return std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k); }

std::vector<GemmShape> transformer_layer_gemms(const ModelConfig& model, int64_t tp, int64_t tokens) {
  check(tp >= 1, "tensor-parallel size must be at least 1 (got ", tp, ")");
  const int64_t C = model.d_model, F = model.d_ff, V = model.vocab_size;
  struct Linear {
    const char* name;
    int64_t out, in;
  };
  const Linear linears[] = {
      {"qkv", 3 * C / tp, C},             // column-parallel: heads split over ranks
      {"attn_proj", C, C / tp},           // row-parallel
      {"fc", F / tp, C},                  // column-parallel
      {"fc_proj", C, F / tp},             // row-parallel
      {"lm_head", (V + tp - 1) / tp, C},  // vocab-parallel (the last rank's shard padded)
  };
  const int64_t N = tokens;
  std::vector<GemmShape> shapes;
  for (const Linear& l : linears) {
    const std::string name = l.name;
    shapes.push_back({name + ".fwd", false, true, N, l.out, l.in, 0.0});
    shapes.push_back({name + ".bwd_input", false, false, N, l.in, l.out, 0.0});
    shapes.push_back({name + ".bwd_weight", true, false, l.out, l.in, N, 1.0});
  }
  return shapes;
}

}  // namespace tripod::microbench
