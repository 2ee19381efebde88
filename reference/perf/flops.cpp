#include "perf/flops.h"

#include "model/param_spec.h"

namespace tripod {

FlopCount count_flops(const ModelConfig& c, int64_t seq_len) {
  FlopCount f;
  f.n_params_total = count_params(gpt_param_specs(c));
  const int64_t C = c.d_model, F = c.d_ff;
  const int64_t per_layer = 3 * C * C + C * C + F * C + C * F;
  f.n_params_matmul = c.n_layer * per_layer + c.vocab_size * C;
  f.attention_flops_per_token = 12.0 * static_cast<double>(c.n_layer * C * seq_len);
  f.model_flops_per_token = 6.0 * static_cast<double>(f.n_params_matmul) + f.attention_flops_per_token;
  return f;
}

}  // namespace tripod
