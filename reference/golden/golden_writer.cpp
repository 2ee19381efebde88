#include "golden/golden_writer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "backend/transfer.h"
#include "ckpt/durable_file.h"
#include "core/error.h"
#include "core/folder_writer_lock.h"
#include "data/token_dataset.h"
#include "export/hf_gpt2.h"
#include "golden/bundle.h"
#include "train/train_loop.h"
#include "train/trainer.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace tripod::golden {
namespace {

using Tensors = std::vector<std::vector<double>>;

// How far AdamW may move each element in one update when every gradient so far is off by up to
// grad_error (in units of lr). The derivation is gpt2_torch.adam_drift_bound's (suites/python):
// m_hat and sqrt(v_hat) are weighted averages of the gradients and move by at most ~grad_error, so
// |du| <= (1 + u_max) * grad_error / (sqrt(v_hat) + eps); where sqrt(v_hat) is below the error
// (a gradient that is zero in exact arithmetic, e.g. the attention key bias) the update is noise
// normalised to O(1), capped at twice the largest |u|, which Cauchy-Schwarz bounds by u_max.
double adam_u_max(double beta1, double beta2, int64_t step) {
  const double r = beta1 * beta1 / beta2;
  double sum = 0;
  for (int64_t j = 0; j < step; ++j) sum += std::pow(r, static_cast<double>(j));
  return (1 - beta1) / std::sqrt(1 - beta2) * std::sqrt(sum) * std::sqrt(1 - std::pow(beta2, step)) /
         (1 - std::pow(beta1, step));
}

struct Trajectory {
  std::vector<double> losses, norms;
  std::map<int64_t, Tensors> params;  // after step s (from 1)
  std::map<int64_t, Tensors> slack32, slack64;  // fp64 run only
};

// K steps of the single-device trainer from `init`; with `drift`, also the drift allowances for
// fp32 and fp64 peers (accumulated over steps, kept at the recorded steps).
Trajectory run_reference(const RunConfig& config, const Tensors& init, const std::vector<data::Batch>& batches,
                         const std::vector<int64_t>& record, bool drift, Backend& backend) {
  Trainer trainer(config, backend);
  trainer.initialise();
  const std::vector<ParamSpec>& specs = trainer.params().specs();
  load_params(trainer, specs, init, backend);
  Trajectory t;
  Tensors slack32, slack64;
  for (const ParamSpec& spec : specs) {
    slack32.emplace_back(static_cast<std::size_t>(shape_numel(spec.shape)), 0.0);
    slack64.emplace_back(static_cast<std::size_t>(shape_numel(spec.shape)), 0.0);
  }
  const AdamWConfig& adam = trainer.optimizer().config();
  for (std::size_t k = 0; k < batches.size(); ++k) {
    const StepResult r = trainer.train_step(batches[k]);
    t.losses.push_back(r.loss);
    t.norms.push_back(r.grad_norm);
    const int64_t step = static_cast<int64_t>(k) + 1;
    if (drift) {
      const double coef = clip_coefficient(r.grad_norm, config.grad_clip);  // Adam saw the clipped gradients
      const double u_max = adam_u_max(adam.beta1, adam.beta2, step);
      const double bias = 1 - std::pow(adam.beta2, static_cast<double>(step));
      for (std::size_t i = 0; i < specs.size(); ++i) {
        const std::vector<double> g = to_host_f64(backend, trainer.grads().at(i));
        const std::vector<double> v = to_host_f64(backend, trainer.optimizer().v().at(i));
        double g_max = 0;
        for (double x : g) g_max = std::max(g_max, std::fabs(x));
        for (std::size_t e = 0; e < v.size(); ++e) {
          const double denominator = std::sqrt(v[e] / bias) + adam.eps;
          slack32[i][e] += r.lr * std::min((1 + u_max) * kRtolFp32 * coef * g_max / denominator, 2 * u_max);
          slack64[i][e] += r.lr * std::min((1 + u_max) * kRtolFp64 * coef * g_max / denominator, 2 * u_max);
        }
      }
    }
    if (std::find(record.begin(), record.end(), step) != record.end()) {
      t.params[step] = host_values(backend, trainer.params());
      if (drift) {
        t.slack32[step] = slack32;
        t.slack64[step] = slack64;
      }
    }
  }
  return t;
}

// reference/<precision>.json and its tensors.
void write_reference(const fs::path& dir, const std::string& precision, const Trajectory& t,
                     const std::map<int64_t, Tensors>& slack, const std::vector<ParamSpec>& specs) {
  const DType dtype = precision == "fp64" ? DType::F64 : DType::F32;
  json params = json::object(), slacks = json::object();
  for (const auto& [step, values] : t.params) {
    const std::string name = precision + "-step" + std::to_string(step) + ".safetensors";
    write_hf_params(dir / name, specs, values, dtype);
    params[std::to_string(step)] = name;
  }
  for (const auto& [step, values] : slack) {
    const std::string name = "slack-" + precision + "-step" + std::to_string(step) + ".safetensors";
    write_hf_params(dir / name, specs, values, DType::F64);
    slacks[std::to_string(step)] = name;
  }
  const json reference = {{"precision", precision}, {"steps", t.losses.size()}, {"losses", t.losses},
                          {"grad_norms", t.norms}, {"params", params}, {"slack", slacks}};
  ckpt::write_text_durably(dir / (precision + ".json"), reference.dump(1) + "\n");
}

json bundle_json(const RunConfig& config, int64_t steps, const std::vector<ParamSpec>& specs) {
  json lrs = json::array(), decay = json::array();
  for (int64_t k = 0; k < steps; ++k) lrs.push_back(config.schedule.at(k));
  for (const ParamSpec& spec : specs)
    if (decays(spec, config.adamw.decay_policy)) decay.push_back(spec.name);
  return {
      {"format", "tripod-golden"},
      {"version", kBundleVersion},
      {"model", hf_gpt2_config(config.model)},
      {"batch", {{"steps", steps}, {"batch_size", config.train.batch_size}, {"seq_len", config.train.seq_len}}},
      {"loss", "mean cross-entropy over the targets != -1 of the whole global batch"},
      {"data_parallel",
       "a data-parallel rank r of R trains on rows [r*B/R, (r+1)*B/R) of each step's batch; the loss and gradients "
       "are those of the whole batch (sum over ranks of the per-rank sums, divided by the global count of counted "
       "targets)"},
      {"optimizer",
       {{"name", "adamw"}, {"lrs", lrs}, {"beta1", config.adamw.beta1}, {"beta2", config.adamw.beta2},
        {"eps", config.adamw.eps}, {"weight_decay", config.adamw.weight_decay}, {"decay", decay},
        {"grad_clip", config.grad_clip},
        {"clip_rule", "torch.nn.utils.clip_grad_norm_: global L2 norm over all gradients, multiplied by min(1, "
                      "grad_clip / (norm + 1e-6)); 0 means no clipping"},
        {"adamw_rule", "torch.optim.AdamW: decoupled weight decay p -= lr*wd*p, then bias-corrected Adam"}}},
      {"tolerances",
       {{"fp64", {{"rtol", kRtolFp64}}},
        {"fp32", {{"rtol", kRtolFp32}}},
        {"rule", "a peer of precision P is compared with the fp64 reference: per step |loss/ref - 1| <= rtol_P and "
                 "|grad_norm/ref - 1| <= rtol_P; per parameter tensor after a recorded step s, elementwise "
                 "|p - ref| <= rtol_P * max|ref| + slack_P(s) (reference/slack-P-step<s>.safetensors)"}}},
      {"source", {{"config", config.json}, {"first_sample", 0}, {"data_dir", config.data.dir}}}};
}

}  // namespace

GoldenWriteSummary write_golden_bundle(const RunConfig& given, int64_t steps, const fs::path& out, Backend& backend) {
  RunConfig config = given;
  check(steps >= 1, "golden: --steps must be at least 1, got ", steps);
  check(steps <= config.train.steps, "golden: --steps ", steps, " is beyond the run's train.steps ",
        config.train.steps, " (its learning-rate schedule ends there)");
  const auto check_new_or_empty = [&] {
    if (fs::exists(out))
      TRIPOD_CHECK(fs::is_directory(out) && fs::is_empty(out), "golden: ", out.string(),
                   " exists and is not an empty folder; refusing to mix a bundle into it");
  };
  check_new_or_empty();
  // Held from here to the last file: two cuts into one empty --out both passed the check above,
  // trained, then wrote through the same staging files. On the folder itself,
  // since bundle.json lists every file in it.
  const FolderWriterLock lock(out, "",
                              str_cat("golden --out ", out.string(), ": another `tripod golden` is writing a bundle "
                                      "into this folder; wait for it to end, or give another --out"));
  check_new_or_empty();  // again under the lock: one that ended just before it took the lock has filled it
  const data::TokenDataset train = data::TokenDataset::open(config.data.dir, "train");
  resolve_vocab(config, train.vocab_size(), config.data.dir);
  const int64_t B = config.train.batch_size, T = config.train.seq_len;

  // The batches `tripod train` would read at steps 0..K-1 (data/batch_loader.h).
  const data::BatchLoader loader(train, T, config.train.seed);
  std::vector<data::Batch> batches;
  Int32Array tokens{{steps, B, T}, {}}, targets{{steps, B, T}, {}};
  for (int64_t k = 0; k < steps; ++k) {
    batches.push_back(loader.samples(k * B, B));
    tokens.values.insert(tokens.values.end(), batches.back().tokens.begin(), batches.back().tokens.end());
    targets.values.insert(targets.values.end(), batches.back().targets.begin(), batches.back().targets.end());
  }

  // The run's initialisation in fp32: the values both references start from.
  const RunConfig fp32 = with_precision(config, "fp32"), fp64 = with_precision(config, "fp64");
  Tensors init;
  std::vector<ParamSpec> specs;
  {
    Trainer trainer(fp32, backend);
    trainer.initialise();
    init = host_values(backend, trainer.params());
    specs = trainer.params().specs();
  }
  std::vector<int64_t> record = {1, steps};
  record.erase(std::unique(record.begin(), record.end()), record.end());
  const Trajectory t64 = run_reference(fp64, init, batches, record, true, backend);
  const Trajectory t32 = run_reference(fp32, init, batches, record, false, backend);

  try {
    fs::create_directories(out / kReferenceDir);
    write_hf_params(out / kModelFile, specs, init, DType::F32);
    write_npy_int32(out / kTokensFile, tokens);
    write_npy_int32(out / kTargetsFile, targets);
    write_reference(out / kReferenceDir, "fp64", t64, t64.slack64, specs);
    write_reference(out / kReferenceDir, "fp32", t32, t64.slack32, specs);
    // Last, so that a bundle with bundle.json is complete; it lists every other file's size and XXH64.
    json meta = bundle_json(config, steps, specs);
    meta["files"] = describe_bundle_files(out);
    ckpt::write_text_durably(out / kBundleJson, meta.dump(1) + "\n");
  } catch (...) {
    // A cut that fails while writing (a full disk) leaves the folder as it found it, empty (or not
    // there): everything in it is this cut's, under the lock. Its part of a bundle made the next cut
    // refuse the folder as not empty.
    std::error_code ec;
    std::vector<fs::path> written;
    for (fs::directory_iterator entry(out, ec); !ec && entry != fs::directory_iterator(); entry.increment(ec))
      written.push_back(entry->path());
    for (const fs::path& path : written) fs::remove_all(path, ec);
    throw;
  }

  GoldenWriteSummary s{steps, count_params(specs), B * T, t64.losses.front(), t64.losses.back(), 0.0};
  for (std::size_t k = 0; k < t64.losses.size(); ++k)
    s.fp32_worst_loss_rel_error =
        std::max(s.fp32_worst_loss_rel_error, std::fabs(t32.losses[k] / t64.losses[k] - 1));
  return s;
}

}  // namespace tripod::golden
