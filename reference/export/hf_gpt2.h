// Export to the Hugging Face GPT-2 layout (transformers' GPT2Model / GPT2LMHeadModel): the same
// tensor names Tripod uses, but GPT-2's Conv1D weights (c_attn, attn.c_proj, c_fc, mlp.c_proj)
// are stored [in, out], the transpose of Tripod's [out, in]; embeddings and LayerNorms unchanged.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/safetensors.h"
#include "model/param_set.h"

namespace tripod {

// True for the weights GPT-2 stores as Conv1D [in, out].
bool is_conv1d_weight(ParamRole role);

// Host copy of one parameter (or gradient) in the HF layout, named prefix + name, in dtype `out`
// (F32 or F64).
ckpt::HostTensor to_hf_tensor(Backend& backend, const ParamSpec& spec, const Tensor& t, const std::string& prefix,
                              DType out);
// The same from host values in Tripod's layout.
ckpt::HostTensor to_hf_tensor(const ParamSpec& spec, std::vector<double> values, const std::string& prefix, DType out);
// The inverse: an HF-layout tensor (F32 or F64) as values in Tripod's layout; throws naming
// `origin` and the tensor when its shape is not the HF shape of `spec`.
std::vector<double> from_hf_tensor(const ParamSpec& spec, const ckpt::HostTensor& hf, const std::string& origin);
std::vector<ckpt::HostTensor> to_hf_tensors(Backend& backend, const ParamSet& set, const std::string& prefix,
                                            DType out);

// transformers' GPT2Config for this model.
nlohmann::json hf_gpt2_config(const ModelConfig& config);

// Reads a Tripod checkpoint (a step directory, or a checkpoint root's latest; any layout) and
// writes DIR/model.safetensors and DIR/config.json, each durably, and the run's SentencePiece
// tokenizer: the one its data directory's meta.json names, when that directory still holds the
// corpus the checkpoint was trained on (its training tokens' XXH64, where the checkpoint records
// it) and the tokenizer's vocabulary is the data's and fits the model's. Otherwise no
// tokenizer.model (a previous export's is removed) and the report says why. DIR must be new,
// empty or a previous export.
struct ExportReport {
  int64_t tensors = 0, parameters = 0;
  std::filesystem::path model_file;
  std::filesystem::path checkpoint_dir;  // the step directory read (a root resolves to its latest)
  std::filesystem::path tokenizer_file;  // the tokenizer.model written; empty: none
  std::string no_tokenizer;              // why none was written (empty when one was)
  bool tokenizer_lost = false;           // ...although the run's data had one: a warning, not a fact
};
ExportReport export_hf_checkpoint(const std::filesystem::path& checkpoint, const std::filesystem::path& out_dir,
                                  DType out_dtype, Backend& backend);

}  // namespace tripod
