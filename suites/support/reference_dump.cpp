// tripod_reference_dump: writes a tiny model, batches and Tripod's results (logits, loss, every
// gradient, K optimizer steps) in the Hugging Face GPT-2 layout, for the independent PyTorch
// implementation in suites/python/test_torch_reference.py to recompute and compare.
//
//   tripod_reference_dump --dtype fp64|fp32 --steps K --tied 1|0 --out DIR [--seed S]
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "support/test_backend.h"
#include "ckpt/safetensors.h"
#include "data/random_batch.h"
#include "export/hf_gpt2.h"
#include "train/trainer.h"

namespace fs = std::filesystem;
using namespace tripod;
using nlohmann::json;

namespace {

int run(const std::string& dtype_name_arg, int64_t steps, bool tied, uint64_t seed, const fs::path& out) {
  json cfg = default_config_json();
  cfg["model"] = {{"n_layer", 2}, {"n_head", 2}, {"d_model", 16}, {"d_ff", 48}, {"vocab_size", 37},
                  {"context", 12}, {"tie_embeddings", tied}, {"layernorm_eps", 1e-5}};
  cfg["train"]["dtype"] = dtype_name_arg;
  cfg["train"]["batch_size"] = 3;
  cfg["train"]["seq_len"] = 10;
  cfg["train"]["micro_batches"] = 1;
  cfg["train"]["steps"] = steps;
  cfg["train"]["seed"] = seed;
  cfg["optim"] = {{"lr", 1e-2}, {"min_lr", 1e-3}, {"warmup_steps", 2}, {"decay", "cosine"}, {"beta1", 0.9},
                  {"beta2", 0.95}, {"eps", 1e-8}, {"weight_decay", 0.1}, {"decay_tensors", "matrices"},
                  {"grad_clip", 0.5}};
  RunConfig config = parse_run_config(cfg);
  const DType dtype = config.train.dtype;
  const int64_t B = config.train.batch_size, T = config.train.seq_len, V = config.model.vocab_size;

  auto backend = testing::make_test_backend();
  Trainer trainer(config, *backend);
  trainer.initialise();
  fs::create_directories(out);

  json hf = hf_gpt2_config(config.model);
  json lrs = json::array(), decay = json::array();
  for (int64_t k = 0; k < steps; ++k) lrs.push_back(config.schedule.at(k));
  for (const auto& spec : trainer.params().specs())
    if (decays(spec, config.adamw.decay_policy)) decay.push_back(spec.name);
  hf["tripod"] = {{"dtype", dtype_name(dtype)}, {"steps", steps}, {"lrs", lrs}, {"beta1", config.adamw.beta1},
                  {"beta2", config.adamw.beta2}, {"eps", config.adamw.eps},
                  {"weight_decay", config.adamw.weight_decay}, {"decay", decay}, {"grad_clip", config.grad_clip}};
  std::ofstream(out / "config.json") << hf.dump(2) << "\n";
  ckpt::write_safetensors(out / "model.safetensors", to_hf_tensors(*backend, trainer.params(), "", dtype));

  std::vector<data::Batch> batches;
  std::vector<int32_t> all_tokens, all_targets;
  for (int64_t k = 0; k < steps; ++k) {
    // about one target in eight ignored, to exercise the valid-token normalisation
    batches.push_back(data::random_token_batch(B, T, V, seed, "reference_dump.batch." + std::to_string(k), 0.125));
    all_tokens.insert(all_tokens.end(), batches.back().tokens.begin(), batches.back().tokens.end());
    all_targets.insert(all_targets.end(), batches.back().targets.begin(), batches.back().targets.end());
  }
  ckpt::write_safetensors(out / "batch.safetensors",
                          {ckpt::make_host_tensor<int32_t>("tokens", {steps, B, T}, all_tokens),
                           ckpt::make_host_tensor<int32_t>("targets", {steps, B, T}, all_targets)});

  // Step 0's forward/backward with the initial weights: logits, loss and gradients.
  std::vector<ckpt::HostTensor> results;
  LossSum first = trainer.model().forward(trainer.params(), batches[0].tokens.data(), batches[0].targets.data(), B, T);
  // The logits' rows may be padded past V (Backend::gemm_row_multiple: the emulated device, CUDA):
  // the dump holds the V real columns of each.
  const std::vector<double> padded = to_host_f64(*backend, trainer.model().logits());
  const auto row_length = static_cast<std::size_t>(trainer.model().logits().numel() / (B * T));
  std::vector<double> logits;
  for (std::size_t row = 0; row < static_cast<std::size_t>(B * T); ++row)
    logits.insert(logits.end(), padded.begin() + row * row_length, padded.begin() + row * row_length + V);
  backend->fill(trainer.grads().flat(), 0.0);
  trainer.model().backward(trainer.params(), trainer.grads(), 1.0 / static_cast<double>(first.n_valid));
  results.push_back(ckpt::make_host_tensor<double>("logits", {B, T, V}, logits));
  results.push_back(ckpt::make_host_tensor<double>("loss", {1}, std::vector<double>{read_scalar(*backend, first.sum) / first.n_valid}));
  for (auto& t : to_hf_tensors(*backend, trainer.grads(), "grad.", DType::F64)) results.push_back(std::move(t));

  // K full optimizer steps (clip + AdamW), recording losses and pre-clip gradient norms.
  std::vector<double> losses, norms;
  for (int64_t k = 0; k < steps; ++k) {
    StepResult r = trainer.train_step(batches[static_cast<std::size_t>(k)]);
    losses.push_back(r.loss);
    norms.push_back(r.grad_norm);
  }
  results.push_back(ckpt::make_host_tensor<double>("losses", {steps}, losses));
  results.push_back(ckpt::make_host_tensor<double>("grad_norms", {steps}, norms));
  for (auto& t : to_hf_tensors(*backend, trainer.params(), "final.", DType::F64)) results.push_back(std::move(t));
  ckpt::write_safetensors(out / "results.safetensors", results);
  std::printf("wrote %s (dtype %s, %lld steps, %s embeddings)\n", out.string().c_str(), dtype_name(dtype).c_str(),
              static_cast<long long>(steps), tied ? "tied" : "untied");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dump a tiny Tripod GPT and its results for the PyTorch cross-check"};
  std::string dtype = "fp64", out;
  int64_t steps = 3;
  int tied = 1;
  uint64_t seed = 1234;
  app.add_option("--dtype", dtype);
  app.add_option("--steps", steps);
  app.add_option("--tied", tied);
  app.add_option("--seed", seed);
  app.add_option("--out", out)->required();
  CLI11_PARSE(app, argc, argv);
  try {
    return run(dtype, steps, tied != 0, seed, out);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tripod_reference_dump: error: %s\n", e.what());
    return 1;
  }
}
