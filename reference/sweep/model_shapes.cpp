#include "sweep/model_shapes.h"

#include <cmath>
#include <limits>

#include "core/error.h"
#include "model/param_spec.h"
#include "perf/flops.h"

namespace tripod::sweep {

ModelConfig model_config(const ModelShape& shape, int64_t vocab, int64_t context) {
  ModelConfig c;
  c.n_layer = shape.n_layer;
  c.n_head = shape.n_head;
  c.d_model = shape.d_model;
  c.d_ff = shape.d_ff;
  c.vocab_size = vocab;
  c.context = context;
  c.tie_embeddings = true;
  return c;
}

ShapeCost shape_cost(const ModelShape& shape, int64_t vocab, int64_t context) {
  const ModelConfig config = model_config(shape, vocab, context);
  ShapeCost cost;
  const FlopCount flops = count_flops(config, context);
  cost.n_total = flops.n_params_total;
  cost.model_flops_per_token = flops.model_flops_per_token;
  int64_t embedding = 0;
  for (const ParamSpec& spec : gpt_param_specs(config)) {
    const bool is_embedding = spec.role == ParamRole::TokenEmbedding || spec.role == ParamRole::PositionEmbedding ||
                              spec.role == ParamRole::LmHead;
    if (is_embedding) embedding += count_params({spec});
  }
  cost.n_non_embedding = cost.n_total - embedding;
  return cost;
}

int64_t counted_params(const ShapeCost& cost, ParamCount convention) {
  return convention == ParamCount::Total ? cost.n_total : cost.n_non_embedding;
}

double counted_flops_per_token(const ShapeCost& cost, ParamCount count, FlopConvention flops) {
  return flops == FlopConvention::SixN ? 6.0 * static_cast<double>(counted_params(cost, count))
                                       : cost.model_flops_per_token;
}

ModelShape shape_for_target(double target_n, const ShapeRule& rule, int64_t vocab, int64_t context,
                            ParamCount convention) {
  ModelShape best;
  double best_distance = std::numeric_limits<double>::infinity();
  // Every width step of one head and every depth within the aspect band; a few thousand
  // candidates at most, each counted exactly (so embeddings and biases are never approximated).
  for (int64_t d = rule.head_dim; d <= rule.max_d_model; d += rule.head_dim) {
    for (int64_t layers = 1; layers <= rule.max_layers; ++layers) {
      const double aspect = static_cast<double>(d) / static_cast<double>(layers);
      const bool in_band = aspect <= rule.aspect_ratio * rule.aspect_tolerance &&
                           aspect >= rule.aspect_ratio / rule.aspect_tolerance;
      // A single layer is always allowed: below aspect_ratio / tolerance there is no shallower choice.
      if (!in_band && !(layers == 1 && aspect < rule.aspect_ratio)) continue;
      const ModelShape shape{layers, d, d / rule.head_dim, rule.d_ff_ratio * d};
      const double n = static_cast<double>(counted_params(shape_cost(shape, vocab, context), convention));
      // Nearest in log N; among near-ties prefer the aspect ratio closest to the rule's.
      const double distance = std::abs(std::log(n / target_n)) + 1e-3 * std::abs(std::log(aspect / rule.aspect_ratio));
      if (n > 0 && distance < best_distance) {
        best_distance = distance;
        best = shape;
      }
    }
  }
  check(best.n_layer > 0, "no model shape fits the rule for a target of ", target_n, " parameters");
  return best;
}

std::string shape_label(const ModelShape& shape) {
  return str_cat("L", shape.n_layer, "-d", shape.d_model);
}

}  // namespace tripod::sweep
