#include "model/param_spec.h"

#include <cmath>

#include "core/counter_rng.h"

namespace tripod {

bool is_block_role(ParamRole role) { return block_position(role) >= 0; }

int block_position(ParamRole role) {
  const int k = static_cast<int>(role) - static_cast<int>(ParamRole::Ln1Weight);
  return k >= 0 && k < kBlockRoles ? k : -1;
}

bool is_gemm_operand_only(ParamRole role) {
  switch (role) {
    case ParamRole::QkvWeight:
    case ParamRole::AttnProjWeight:
    case ParamRole::FcWeight:
    case ParamRole::FcProjWeight:
    case ParamRole::LmHead: return true;
    default: return false;
  }
}

std::vector<bool> gemm_operand_only_flags(const std::vector<ParamSpec>& specs) {
  std::vector<bool> flags;
  for (const ParamSpec& spec : specs) flags.push_back(is_gemm_operand_only(spec.role));
  return flags;
}

const char* role_suffix(ParamRole role) {
  switch (role) {
    case ParamRole::TokenEmbedding: return "wte.weight";
    case ParamRole::PositionEmbedding: return "wpe.weight";
    case ParamRole::Ln1Weight: return "ln_1.weight";
    case ParamRole::Ln1Bias: return "ln_1.bias";
    case ParamRole::QkvWeight: return "attn.c_attn.weight";
    case ParamRole::QkvBias: return "attn.c_attn.bias";
    case ParamRole::AttnProjWeight: return "attn.c_proj.weight";
    case ParamRole::AttnProjBias: return "attn.c_proj.bias";
    case ParamRole::Ln2Weight: return "ln_2.weight";
    case ParamRole::Ln2Bias: return "ln_2.bias";
    case ParamRole::FcWeight: return "mlp.c_fc.weight";
    case ParamRole::FcBias: return "mlp.c_fc.bias";
    case ParamRole::FcProjWeight: return "mlp.c_proj.weight";
    case ParamRole::FcProjBias: return "mlp.c_proj.bias";
    case ParamRole::LnFWeight: return "ln_f.weight";
    case ParamRole::LnFBias: return "ln_f.bias";
    case ParamRole::LmHead: return "lm_head.weight";
  }
  return "?";
}

std::vector<ParamSpec> gpt_param_specs(const ModelConfig& c) {
  // GPT-2 init: N(0, 0.02) for matrices and embeddings; residual projections scaled by 1/sqrt(2L)
  // so the residual stream's variance does not grow with depth; LayerNorm gain 1, biases 0.
  const double std_base = 0.02;
  const double std_residual = 0.02 / std::sqrt(2.0 * static_cast<double>(c.n_layer));
  const int64_t C = c.d_model, F = c.d_ff;
  std::vector<ParamSpec> specs;
  // The role names the tensor; the layer (-1 outside the blocks) fixes its group and name prefix.
  auto add = [&](ParamRole role, int64_t layer, Shape shape, InitKind init, double std) {
    const int group = layer >= 0 ? block_group(layer) : role == ParamRole::TokenEmbedding ||
                                                                 role == ParamRole::PositionEmbedding
                                                             ? embedding_group()
                                                             : head_group(c.n_layer);
    std::string name = layer >= 0 ? "h." + std::to_string(layer) + "." + role_suffix(role) : role_suffix(role);
    specs.push_back({std::move(name), std::move(shape), init, std, init == InitKind::Normal, role, layer, group});
  };
  auto matrix = [&](ParamRole r, int64_t l, Shape shape, double std) { add(r, l, std::move(shape), InitKind::Normal, std); };
  auto bias = [&](ParamRole r, int64_t l, int64_t n) { add(r, l, {n}, InitKind::Zeros, 0); };
  auto gain = [&](ParamRole r, int64_t l, int64_t n) { add(r, l, {n}, InitKind::Ones, 0); };

  matrix(ParamRole::TokenEmbedding, -1, {c.vocab_size, C}, std_base);
  matrix(ParamRole::PositionEmbedding, -1, {c.context, C}, std_base);
  for (int64_t l = 0; l < c.n_layer; ++l) {  // in block_position order
    gain(ParamRole::Ln1Weight, l, C);
    bias(ParamRole::Ln1Bias, l, C);
    matrix(ParamRole::QkvWeight, l, {3 * C, C}, std_base);
    bias(ParamRole::QkvBias, l, 3 * C);
    matrix(ParamRole::AttnProjWeight, l, {C, C}, std_residual);
    bias(ParamRole::AttnProjBias, l, C);
    gain(ParamRole::Ln2Weight, l, C);
    bias(ParamRole::Ln2Bias, l, C);
    matrix(ParamRole::FcWeight, l, {F, C}, std_base);
    bias(ParamRole::FcBias, l, F);
    matrix(ParamRole::FcProjWeight, l, {C, F}, std_residual);
    bias(ParamRole::FcProjBias, l, C);
  }
  gain(ParamRole::LnFWeight, -1, C);
  bias(ParamRole::LnFBias, -1, C);
  if (!c.tie_embeddings) matrix(ParamRole::LmHead, -1, {c.vocab_size, C}, std_base);
  return specs;
}

int64_t count_params(const std::vector<ParamSpec>& specs) {
  int64_t n = 0;
  for (const auto& s : specs) n += shape_numel(s.shape);
  return n;
}

const ParamSpec& find_spec(const std::vector<ParamSpec>& specs, const std::string& name) {
  for (const ParamSpec& spec : specs)
    if (spec.name == name) return spec;
  fail("no parameter tensor named '", name, "'");
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
