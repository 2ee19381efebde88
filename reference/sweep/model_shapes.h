// Model shapes of a sweep and how their size and compute are counted under the spec's conventions.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "sweep/sweep_spec.h"

namespace tripod::sweep {

struct ModelShape {
  int64_t n_layer = 0, d_model = 0, n_head = 0, d_ff = 0;
  bool operator==(const ModelShape&) const = default;
};

// A shape's size and per-token training compute for a given vocabulary and context.
struct ShapeCost {
  int64_t n_total = 0;          // every parameter (embeddings, position table, biases, gains)
  int64_t n_non_embedding = 0;  // minus the token/position embeddings (and an untied LM head)
  double model_flops_per_token = 0;  // perf/flops.h: 6 N_matmul (LM head included) + 12 L d T
};

ModelConfig model_config(const ModelShape& shape, int64_t vocab, int64_t context);
ShapeCost shape_cost(const ModelShape& shape, int64_t vocab, int64_t context);

// N and FLOPs per token as the spec counts them.
int64_t counted_params(const ShapeCost& cost, ParamCount convention);
double counted_flops_per_token(const ShapeCost& cost, ParamCount count, FlopConvention flops);

// The rule's shape whose counted N is nearest `target_n` in log (see ShapeRule).
ModelShape shape_for_target(double target_n, const ShapeRule& rule, int64_t vocab, int64_t context,
                            ParamCount convention);

// "L2-d64": how a shape appears in run names.
std::string shape_label(const ModelShape& shape);

}  // namespace tripod::sweep
