#include "model/config.h"

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

}  // namespace tripod
