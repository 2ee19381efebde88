#include "model/config.h"

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace tripod {

void ModelConfig::validate() const {
  check(n_layer >= 1, "model.n_layer must be >= 1 (got ", n_layer, ")");
  check(n_head >= 1, "model.n_head must be >= 1 (got ", n_head, ")");
  check(d_model >= 1, "model.d_model must be >= 1 (got ", d_model, ")");
  check(d_ff >= 1, "model.d_ff must be >= 1 (got ", d_ff, ")");
  check(vocab_size >= 2, "model.vocab_size must be >= 2 (got ", vocab_size, ")");
  check(context >= 1, "model.context must be >= 1 (got ", context, ")");
  check(d_model % n_head == 0, "model.n_head (", n_head, ") does not divide model.d_model (", d_model, ")");
  check(layernorm_eps > 0, "model.layernorm_eps must be > 0");
}

ModelConfig ModelConfig::from_json(const nlohmann::json& j) {
  ModelConfig c;
  c.n_layer = j.at("n_layer").get<int64_t>();
  c.n_head = j.at("n_head").get<int64_t>();
  c.d_model = j.at("d_model").get<int64_t>();
  c.d_ff = j.at("d_ff").get<int64_t>();
  c.vocab_size = j.at("vocab_size").get<int64_t>();
  c.context = j.at("context").get<int64_t>();
  c.tie_embeddings = j.at("tie_embeddings").get<bool>();
  c.layernorm_eps = j.at("layernorm_eps").get<double>();
  c.validate();
  return c;
}

nlohmann::json ModelConfig::to_json() const {
  return {{"n_layer", n_layer}, {"n_head", n_head},       {"d_model", d_model},
          {"d_ff", d_ff},       {"vocab_size", vocab_size}, {"context", context},
          {"tie_embeddings", tie_embeddings}, {"layernorm_eps", layernorm_eps}};
}

}  // namespace tripod
