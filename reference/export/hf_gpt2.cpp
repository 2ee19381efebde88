#include "export/hf_gpt2.h"

#include <fstream>

#include "backend/backend.h"
#include "ckpt/checkpoint.h"
#include "train/run_config.h"

namespace tripod {
namespace fs = std::filesystem;

bool is_conv1d_weight(ParamRole role) {
  return role == ParamRole::QkvWeight || role == ParamRole::AttnProjWeight || role == ParamRole::FcWeight ||
         role == ParamRole::FcProjWeight;
}

ckpt::HostTensor to_hf_tensor(Backend& backend, const ParamSpec& spec, const Tensor& t, const std::string& prefix,
                              DType out) {
  std::vector<double> values = to_host_f64(backend, t);
  Shape shape = spec.shape;
  if (is_conv1d_weight(spec.role)) {
    // [out, in] -> [in, out]
    const int64_t rows = shape[0], cols = shape[1];
    std::vector<double> transposed(values.size());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) transposed[static_cast<std::size_t>(c * rows + r)] = values[static_cast<std::size_t>(r * cols + c)];
    values.swap(transposed);
    shape = {cols, rows};
  }
  if (out == DType::F64) return ckpt::make_host_tensor<double>(prefix + spec.name, shape, values);
  check(out == DType::F32, "HF export supports fp32 and fp64, not ", dtype_name(out));
  return ckpt::make_host_tensor<float>(prefix + spec.name, shape, std::vector<float>(values.begin(), values.end()));
}

std::vector<ckpt::HostTensor> to_hf_tensors(Backend& backend, const ParamSet& set, const std::string& prefix,
                                            DType out) {
  std::vector<ckpt::HostTensor> tensors;
  for (std::size_t i = 0; i < set.size(); ++i) tensors.push_back(to_hf_tensor(backend, set.specs()[i], set.at(i), prefix, out));
  return tensors;
}

nlohmann::json hf_gpt2_config(const ModelConfig& c) {
  return {{"architectures", {"GPT2LMHeadModel"}},
          {"model_type", "gpt2"},
          {"vocab_size", c.vocab_size},
          {"n_positions", c.context},
          {"n_ctx", c.context},
          {"n_embd", c.d_model},
          {"n_layer", c.n_layer},
          {"n_head", c.n_head},
          {"n_inner", c.d_ff},
          {"activation_function", "gelu_new"},
          {"layer_norm_epsilon", c.layernorm_eps},
          {"resid_pdrop", 0.0},
          {"embd_pdrop", 0.0},
          {"attn_pdrop", 0.0},
          {"initializer_range", 0.02},
          {"tie_word_embeddings", c.tie_embeddings},
          {"bos_token_id", nullptr},
          {"eos_token_id", nullptr}};
}

ExportReport export_hf_checkpoint(const fs::path& checkpoint_dir, const fs::path& out_dir, DType out_dtype,
                                  Backend& backend) {
  ckpt::CheckpointState state = ckpt::read_checkpoint_state(checkpoint_dir);
  RunConfig run = parse_run_config(state.config);
  check(run.model.vocab_size > 0, checkpoint_dir.string(), ": checkpoint config has no resolved vocab_size");
  ParamSet params(gpt_param_specs(run.model), backend, state.dtype);
  ckpt::load_checkpoint(checkpoint_dir, backend, params, nullptr);

  fs::create_directories(out_dir);
  ExportReport report;
  report.model_file = out_dir / "model.safetensors";
  auto tensors = to_hf_tensors(backend, params, "", out_dtype);
  report.tensors = static_cast<int64_t>(tensors.size());
  report.parameters = count_params(params.specs());
  ckpt::write_safetensors(report.model_file, tensors, {{"format", "pt"}, {"source", "tripod"}});
  std::ofstream(out_dir / "config.json") << hf_gpt2_config(run.model).dump(2) << "\n";
  const fs::path tokenizer = fs::path(run.data.dir) / "tokenizer.model";
  if (fs::exists(tokenizer)) fs::copy_file(tokenizer, out_dir / "tokenizer.model", fs::copy_options::overwrite_existing);
  return report;
}

}  // namespace tripod
