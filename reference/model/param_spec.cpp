#include "model/param_spec.h"

#include <cmath>

#include "core/counter_rng.h"

namespace tripod {

std::vector<ParamSpec> gpt_param_specs(const ModelConfig& c) {
  // GPT-2 init: N(0, 0.02) for matrices and embeddings; residual projections scaled by 1/sqrt(2L)
  // so the residual stream's variance does not grow with depth; LayerNorm gain 1, biases 0.
  const double std_base = 0.02;
  const double std_residual = 0.02 / std::sqrt(2.0 * static_cast<double>(c.n_layer));
  auto matrix = [](std::string name, Shape shape, double std) {
    return ParamSpec{std::move(name), std::move(shape), InitKind::Normal, std, true};
  };
  auto bias = [](std::string name, int64_t n) { return ParamSpec{std::move(name), {n}, InitKind::Zeros, 0, false}; };
  auto gain = [](std::string name, int64_t n) { return ParamSpec{std::move(name), {n}, InitKind::Ones, 0, false}; };

  const int64_t C = c.d_model, F = c.d_ff;
  std::vector<ParamSpec> specs;
  specs.push_back(matrix("wte.weight", {c.vocab_size, C}, std_base));
  specs.push_back(matrix("wpe.weight", {c.context, C}, std_base));
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    specs.push_back(gain(p + "ln_1.weight", C));
    specs.push_back(bias(p + "ln_1.bias", C));
    specs.push_back(matrix(p + "attn.c_attn.weight", {3 * C, C}, std_base));
    specs.push_back(bias(p + "attn.c_attn.bias", 3 * C));
    specs.push_back(matrix(p + "attn.c_proj.weight", {C, C}, std_residual));
    specs.push_back(bias(p + "attn.c_proj.bias", C));
    specs.push_back(gain(p + "ln_2.weight", C));
    specs.push_back(bias(p + "ln_2.bias", C));
    specs.push_back(matrix(p + "mlp.c_fc.weight", {F, C}, std_base));
    specs.push_back(bias(p + "mlp.c_fc.bias", F));
    specs.push_back(matrix(p + "mlp.c_proj.weight", {C, F}, std_residual));
    specs.push_back(bias(p + "mlp.c_proj.bias", C));
  }
  specs.push_back(gain("ln_f.weight", C));
  specs.push_back(bias("ln_f.bias", C));
  if (!c.tie_embeddings) specs.push_back(matrix("lm_head.weight", {c.vocab_size, C}, std_base));
  return specs;
}

int64_t count_params(const std::vector<ParamSpec>& specs) {
  int64_t n = 0;
  for (const auto& s : specs) n += shape_numel(s.shape);
  return n;
}

void initial_values(const ParamSpec& spec, uint64_t seed, int64_t first, int64_t count, double* out) {
  switch (spec.init) {
    case InitKind::Zeros:
      for (int64_t i = 0; i < count; ++i) out[i] = 0.0;
      return;
    case InitKind::Ones:
      for (int64_t i = 0; i < count; ++i) out[i] = 1.0;
      return;
    case InitKind::Normal: {
      const CounterRng rng(seed, spec.name);
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < count; ++i) out[i] = spec.init_std * rng.normal(static_cast<uint64_t>(first + i));
      return;
    }
  }
}

}  // namespace tripod
