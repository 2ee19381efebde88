// Logical parameter tensors of the GPT model: a layout-independent name, a global shape, how it is
// initialised and whether AdamW decays it. Parallel layouts shard these; checkpoints, export and
// conformance checks name tensors by these names. Linear weights are stored [out, in] (row i is
// output feature i), as torch.nn.Linear does; export transposes them to GPT-2's Conv1D [in, out].
#pragma once
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/config.h"

namespace tripod {

enum class InitKind { Normal, Zeros, Ones };

struct ParamSpec {
  std::string name;  // e.g. "h.3.attn.c_attn.weight" (GPT-2 naming)
  Shape shape;
  InitKind init = InitKind::Zeros;
  double init_std = 0.0;  // for InitKind::Normal
  bool decay = false;     // weight decay applies (matrices and embeddings by default)
};

// In the order of the flat parameter buffer: wte, wpe, h.0.*, ..., h.{L-1}.*, ln_f.*, [lm_head].
std::vector<ParamSpec> gpt_param_specs(const ModelConfig& config);
int64_t count_params(const std::vector<ParamSpec>& specs);

// Initial value of elements [first, first + count) of a tensor, flattened row-major, written to
// out[0..count). Depends only on (seed, spec.name, element index): any shard initialises alone.
void initial_values(const ParamSpec& spec, uint64_t seed, int64_t first, int64_t count, double* out);

}  // namespace tripod
