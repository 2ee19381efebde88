// Logical parameter tensors of the GPT model: a layout-independent name, a global shape, how it is
// initialised, whether AdamW decays it, and its identity - role, layer, group - set here, once.
// Parallel layouts shard these (by role); checkpoints, export and conformance reports name tensors
// by their names, and nobody parses a name to learn what a tensor is. Linear weights are stored
// [out, in] (row i is output feature i), as torch.nn.Linear does; export transposes them to
// GPT-2's Conv1D [in, out].
#pragma once
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/config.h"

namespace tripod {

enum class InitKind { Normal, Zeros, Ones };

// What a tensor is in the model. The twelve block roles come in this order in every block.
enum class ParamRole {
  TokenEmbedding,     // wte.weight [V, C]; also the LM head when the embeddings are tied
  PositionEmbedding,  // wpe.weight [context, C]
  Ln1Weight, Ln1Bias, QkvWeight, QkvBias, AttnProjWeight, AttnProjBias,
  Ln2Weight, Ln2Bias, FcWeight, FcBias, FcProjWeight, FcProjBias,
  LnFWeight, LnFBias,
  LmHead,  // lm_head.weight [V, C], untied heads only
};
constexpr int kBlockRoles = 12;  // Ln1Weight .. FcProjBias
constexpr int kParamRoles = 17;  // all of them
bool is_block_role(ParamRole role);
// 0..11 for a block role (its position inside a block), -1 otherwise.
int block_position(ParamRole role);
// A GPT-2 role's name inside its block or model: "attn.c_attn.weight", "wte.weight", ...
const char* role_suffix(ParamRole role);
// Whether the model reads a tensor of this role only as a GEMM operand (the linear layers'
// weights and an untied LM head), never in its own arithmetic: under the bf16-operand policy only
// its bf16 rounding reaches the result, so a ZeRO-3 gather may carry it as bf16 alone. Not the
// embeddings (looked up), the LayerNorms or the biases.
bool is_gemm_operand_only(ParamRole role);

// Parameter groups: the units that are gathered, released and reported ready together.
inline int embedding_group() { return 0; }
inline int block_group(int64_t layer) { return static_cast<int>(layer) + 1; }
inline int head_group(int64_t n_layer) { return static_cast<int>(n_layer) + 1; }

struct ParamSpec {
  std::string name;  // e.g. "h.3.attn.c_attn.weight" (GPT-2 naming): for files, reports and humans
  Shape shape;
  InitKind init = InitKind::Zeros;
  double init_std = 0.0;  // for InitKind::Normal
  bool decay = false;     // weight decay applies (matrices and embeddings by default)
  ParamRole role = ParamRole::TokenEmbedding;
  int64_t layer = -1;  // the block, or -1 outside the blocks
  int group = 0;       // embedding_group(), block_group(layer) or head_group(n_layer)
};

// In the order of the flat parameter buffer: wte, wpe, h.0.*, ..., h.{L-1}.*, ln_f.*, [lm_head].
std::vector<ParamSpec> gpt_param_specs(const ModelConfig& config);
int64_t count_params(const std::vector<ParamSpec>& specs);
// is_gemm_operand_only of every spec's role, in spec order.
std::vector<bool> gemm_operand_only_flags(const std::vector<ParamSpec>& specs);
// The spec named `name` (a checkpoint's or a user's name for a tensor); throws naming it if absent.
const ParamSpec& find_spec(const std::vector<ParamSpec>& specs, const std::string& name);

// Initial value of elements [first, first + count) of a tensor, flattened row-major, written to
// out[0..count). Depends only on (seed, spec.name, element index): any shard initialises alone.
void initial_values(const ParamSpec& spec, uint64_t seed, int64_t first, int64_t count, double* out);

}  // namespace tripod
