#include "model/config.h"

#include <utility>

#include "core/error.h"

namespace tripod {

void ModelConfig::validate() const {
  check(n_layer >= 1, "model.n_layer must be >= 1 (got ", n_layer, ")");
  check(n_head >= 1, "model.n_head must be >= 1 (got ", n_head, ")");
  check(d_model >= 1, "model.d_model must be >= 1 (got ", d_model, ")");
  check(d_ff >= 1, "model.d_ff must be >= 1 (got ", d_ff, ")");
  check(vocab_size >= 2, "model.vocab_size must be >= 2 (got ", vocab_size, ")");
  check(context >= 1, "model.context must be >= 1 (got ", context, ")");
  // Upper bounds keep every product of sizes (parameters, offsets, token ids as int32) in range:
  // d_ff = 2^63 - 1 once reached a view at a negative offset instead of an error naming it.
  constexpr int64_t kMaxSize = (int64_t{1} << 31) - 1;
  for (const auto& [name, value] : {std::pair<const char*, int64_t>{"n_layer", n_layer}, {"n_head", n_head},
                                    {"d_model", d_model}, {"d_ff", d_ff}, {"vocab_size", vocab_size},
                                    {"context", context}})
    check(value <= kMaxSize, "model.", name, " (", value, ") is more than 2^31 - 1");
  const double C = static_cast<double>(d_model);
  const double parameters = static_cast<double>(n_layer) * (4 * C * C + 2 * C * static_cast<double>(d_ff)) +
                            C * static_cast<double>(vocab_size + context);
  check(parameters <= 0x1p48, "the model has about ", parameters, " parameters (model.n_layer x (4 d_model^2 + 2 "
        "d_model d_ff) + d_model x (vocab_size + context)), more than 2^48");
  check(d_model % n_head == 0, "model.n_head (", n_head, ") does not divide model.d_model (", d_model, ")");
  check(layernorm_eps > 0, "model.layernorm_eps must be > 0");
}

}  // namespace tripod
