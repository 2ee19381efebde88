#include "train/run_config.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>

#include "core/bounded_json.h"
#include "core/error.h"
#include "core/preset_file.h"

namespace tripod {
namespace fs = std::filesystem;
using nlohmann::json;

json default_config_json() {
  return {
      {"model", {{"n_layer", 2}, {"n_head", 4}, {"d_model", 64}, {"d_ff", 256}, {"vocab_size", 0},
                 {"context", 64}, {"tie_embeddings", true}, {"layernorm_eps", 1e-5}}},
      {"train", {{"dtype", "fp32"}, {"batch_size", 8}, {"seq_len", 64}, {"micro_batches", 1}, {"recompute", "none"}, {"steps", 100},
                 {"seed", 1234}, {"log_every", 1}, {"eval_every", 0}, {"eval_batches", 4}, {"peak_tflops", 0.0},
                 {"metrics", ""}, {"save_every", 0}, {"keep_checkpoints", 2}, {"local_save_every", 0}, {"async_save", false}, {"split_tied_grad", true}, {"pipeline_split", json::array()}, {"rank_stats_every", 10}}},
      {"optim", {{"lr", 1e-3}, {"min_lr", 1e-4}, {"warmup_steps", 10}, {"decay", "cosine"}, {"beta1", 0.9},
                 {"beta2", 0.95}, {"eps", 1e-8}, {"weight_decay", 0.1}, {"decay_tensors", "matrices"},
                 {"grad_clip", 1.0}}},
      {"data", {{"dir", "data/kjv"}}},
      {"anomaly", {{"policy", "stop"}, {"spike_factor", 0.0}, {"spike_window", 32}, {"skip_batches", 0}, {"max", 10}}},
  };
}

std::string resolve_config_path(const std::string& name_or_path) {
  return resolve_preset_file(name_or_path, "reference/configs", "config").string();
}

namespace {

bool same_kind(const json& a, const json& b) {
  if (a.is_number() && b.is_number()) return !(a.is_number_integer() && b.is_number_float());
  return a.type() == b.type();
}

// What a key expects, in words: json's own type names call integers and reals both "number",
// which made "should be a number, got number (2.5)" out of an integer key given 2.5.
std::string kind_in_words(const json& value) {
  if (value.is_number_integer()) return "an integer";
  if (value.is_number()) return "a number";
  if (value.is_boolean()) return "true or false";
  if (value.is_string()) return "a string";
  if (value.is_array()) return "a list";
  if (value.is_null()) return "null";
  return "an object";
}

// An object's keys, comma-separated (in nlohmann::json's order: sorted).
std::string keys_of(const json& object) {
  std::string keys;
  for (auto it = object.begin(); it != object.end(); ++it) keys += (keys.empty() ? "" : ", ") + it.key();
  return keys;
}

// Overlays `update` on `base`, rejecting keys that the defaults do not have and wrong types.
void merge_checked(json& base, const json& update, const std::string& where, const std::string& origin) {
  check(update.is_object(), origin, ": '", where.empty() ? "<top level>" : where, "' must be an object");
  for (auto it = update.begin(); it != update.end(); ++it) {
    const std::string key = where.empty() ? it.key() : where + "." + it.key();
    check(base.contains(it.key()), origin, ": unknown config key '", key, "' (", where.empty() ? "the top level" : where,
          " takes ", keys_of(base), ")");
    json& target = base[it.key()];
    if (target.is_object()) {
      merge_checked(target, it.value(), key, origin);
    } else {
      check(same_kind(target, it.value()), origin, ": config key '", key, "' should be ", kind_in_words(target),
            ", got ", kind_in_words(it.value()), " (", it.value().dump(), ")");
      // Integers past int64 are read as unsigned and wrapped when taken as int64: train.steps
      // 2^63 said "must be >= 1", n_layer 2^64-1 "-1 layers". train.seed alone is unsigned.
      TRIPOD_CHECK(!it.value().is_number_unsigned() ||
                       it.value().get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
                       key == "train.seed",
                   origin, ": config key '", key, "' is ", it.value().dump(), ", past the largest integer (2^63 - 1)");
      target = it.value().is_number_integer() && target.is_number_float() ? json(it.value().get<double>())
                                                                          : it.value();
    }
  }
}

// "train.steps=10" -> {"train": {"steps": 10}}; the value is JSON if it parses, else a string.
json override_to_json(const std::string& assignment) {
  auto eq = assignment.find('=');
  check(eq != std::string::npos && eq > 0, "--set expects key=value, got '", assignment, "'");
  std::string key = assignment.substr(0, eq), text = assignment.substr(eq + 1);
  json value = json::parse(text, nullptr, false);
  if (value.is_discarded()) value = text;
  // Split at every dot; an empty part (".steps", "train.", "a..b") is malformed. (Searching back
  // from the end looped forever on a leading dot: rfind from position npos wrapped to the whole key.)
  std::vector<std::string> parts;
  for (std::size_t start = 0;;) {
    const std::size_t dot = key.find('.', start);
    parts.push_back(key.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    check(!parts.back().empty(), "--set: malformed key '", key, "'");
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  json nested = value;
  for (auto part = parts.rbegin(); part != parts.rend(); ++part) nested = json{{*part, nested}};
  return nested;
}

ModelConfig parse_model_section(const json& m) {
  ModelConfig model;
  model.n_layer = m.at("n_layer");
  model.n_head = m.at("n_head");
  model.d_model = m.at("d_model");
  model.d_ff = m.at("d_ff");
  model.vocab_size = m.at("vocab_size");
  model.context = m.at("context");
  model.tie_embeddings = m.at("tie_embeddings");
  model.layernorm_eps = m.at("layernorm_eps");
  // vocab_size 0 is resolved from the data and validated then; the other keys are checked now, with a
  // stand-in vocabulary (skipped, n_head 0 surfaced as "tensor parallel size 1 exceeds model.n_head").
  ModelConfig checked = model;
  if (checked.vocab_size == 0) checked.vocab_size = 2;
  checked.validate();
  return model;
}

// `context` bounds the sequence length: positions past the model's table have no embedding.
TrainSettings parse_train_section(const json& t, int64_t context) {
  TrainSettings train;
  const std::string precision = t.at("dtype").get<std::string>();
  train.bf16_mixed = precision == "bf16-mixed";
  train.tf32 = precision == "tf32";
  const bool plain = precision == "fp32" || precision == "float32" || precision == "fp64" || precision == "float64";
  check(train.bf16_mixed || train.tf32 || plain, "train.dtype: fp64, fp32, tf32 or bf16-mixed (the precision policy), "
        "not '", precision, "'");
  train.dtype = train.bf16_mixed || train.tf32 ? DType::F32 : parse_dtype(precision);
  train.batch_size = t.at("batch_size");
  train.seq_len = t.at("seq_len");
  train.micro_batches = t.at("micro_batches");
  train.recompute = parse_recompute(t.at("recompute").get<std::string>());
  train.steps = t.at("steps");
  const json& seed = t.at("seed");  // unsigned: a negative one wrapped to 2^64 minus it, silently
  check(seed.is_number_unsigned() || seed.get<int64_t>() >= 0, "train.seed must be >= 0 (got ", seed.dump(), ")");
  train.seed = seed;
  train.log_every = t.at("log_every");
  train.eval_every = t.at("eval_every");
  train.eval_batches = t.at("eval_batches");
  train.peak_tflops = t.at("peak_tflops");
  // A negative one was taken as 0 (the device table's or the CPU's nominal peak), silently.
  check(train.peak_tflops >= 0, "train.peak_tflops must be >= 0 (0: the device's peak from its table, or the CPU's ",
        "nominal peak; got ", train.peak_tflops, ")");
  train.metrics = t.at("metrics").get<std::string>();
  train.save_every = t.at("save_every");
  train.keep_checkpoints = t.at("keep_checkpoints");
  train.async_save = t.at("async_save");
  train.split_tied_grad = t.at("split_tied_grad");
  train.local_save_every = t.at("local_save_every");
  check(train.local_save_every >= 0, "train.local_save_every must be >= 0 (0: no saves to --save-local)");
  check(train.save_every >= 0, "train.save_every must be >= 0 (0: save only at the end)");
  check(train.keep_checkpoints >= 1, "train.keep_checkpoints must be >= 1 (the latest is always kept)");
  train.rank_stats_every = t.at("rank_stats_every");
  check(train.rank_stats_every >= 0, "train.rank_stats_every must be >= 0 (0: never gather per-rank step times)");
  check(t.at("pipeline_split").is_array(), "train.pipeline_split must be a list of layer counts, e.g. [3, 1]");
  for (const json& n : t.at("pipeline_split")) {
    check(n.is_number_integer() && n.get<int64_t>() >= 1, "train.pipeline_split: ", n.dump(),
          " is not a positive layer count");
    train.pipeline_split.push_back(n.get<int64_t>());
  }
  check(train.batch_size >= 1, "train.batch_size must be >= 1");
  check(train.seq_len >= 1, "train.seq_len must be >= 1");
  check(train.seq_len <= context, "train.seq_len (", train.seq_len,
        ") is longer than the position table model.context (", context, ")");
  // Token counts (batch x sequence, and their products with d_model) must not overflow int64.
  check(train.batch_size <= (int64_t{1} << 40) / train.seq_len, "train.batch_size x train.seq_len (", train.batch_size,
        " x ", train.seq_len, ") is more than 2^40 tokens a step");
  // Bounded here, before any int takes it: 4294967298 passed as 2 micro-batches of a 2^32 batch.
  check(train.micro_batches >= 1 && train.micro_batches <= 1 << 20, "train.micro_batches must be in [1, 2^20] (got ",
        train.micro_batches, ")");
  check(train.batch_size % train.micro_batches == 0, "train.micro_batches (", train.micro_batches,
        ") must divide train.batch_size (", train.batch_size, ")");
  check(train.steps >= 1, "train.steps must be >= 1");
  check(train.log_every >= 1, "train.log_every must be >= 1");
  check(train.eval_every >= 0 && train.eval_batches >= 0, "train.eval_every and train.eval_batches must be >= 0");
  // As for training's tokens: 2^62 batches ran an evaluation that would never end.
  check(train.eval_batches <= (int64_t{1} << 40) / (train.batch_size * train.seq_len), "train.eval_batches x ",
        "train.batch_size x train.seq_len (", train.eval_batches, " x ", train.batch_size, " x ", train.seq_len,
        ") is more than 2^40 tokens an evaluation");
  return train;
}

// The optimiser and its LR schedule, which spans the run's train.steps (parsed before).
void parse_optim_section(const json& o, RunConfig& c) {
  c.schedule.max_lr = o.at("lr");
  c.schedule.min_lr = o.at("min_lr");
  c.schedule.warmup_steps = o.at("warmup_steps");
  c.schedule.decay = parse_lr_decay(o.at("decay").get<std::string>());
  c.schedule.total_steps = c.train.steps;
  c.adamw.beta1 = o.at("beta1");
  c.adamw.beta2 = o.at("beta2");
  c.adamw.eps = o.at("eps");
  c.adamw.weight_decay = o.at("weight_decay");
  c.adamw.decay_policy = parse_decay_policy(o.at("decay_tensors").get<std::string>());
  c.grad_clip = o.at("grad_clip");
  check(c.schedule.max_lr > 0 && c.schedule.min_lr >= 0 && c.schedule.min_lr <= c.schedule.max_lr,
        "optim.lr must be > 0 and 0 <= optim.min_lr <= optim.lr");
  check(c.schedule.warmup_steps >= 0, "optim.warmup_steps must be >= 0");
  check(c.adamw.beta1 >= 0 && c.adamw.beta1 < 1 && c.adamw.beta2 >= 0 && c.adamw.beta2 < 1,
        "optim.beta1 and optim.beta2 must be in [0, 1)");
  check(c.grad_clip >= 0, "optim.grad_clip must be >= 0 (0 disables clipping)");
  // As PyTorch's AdamW: a negative eps or weight decay is refused, not trained with.
  // PyTorch takes 0, but then an element whose gradients have all been 0 (an embedding row of a
  // token no batch has held yet) divides 0 by 0 at its first update and trains into NaN.
  check(c.adamw.eps > 0, "optim.eps must be > 0 (got ", c.adamw.eps,
        "): with 0, a weight whose gradients have all been 0 so far (the embedding row of a token not yet seen) "
        "becomes 0/0 = NaN at its update");
  check(c.adamw.weight_decay >= 0, "optim.weight_decay must be >= 0 (got ", c.adamw.weight_decay, ")");
}

}  // namespace

json load_config_json(const std::string& name_or_path, const std::vector<std::string>& overrides) {
  return load_config_json(default_config_json(), name_or_path, overrides);
}

json load_config_json(json resolved, const std::string& name_or_path, const std::vector<std::string>& overrides) {
  if (!name_or_path.empty()) {
    const std::string path = resolve_config_path(name_or_path);
    std::ifstream in(path);
    check(in.good(), "cannot read config file ", path);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    // First: it names the line and column of a syntax error, and a key given twice.
    check_no_repeated_keys(text, "config file " + path, /*comments=*/true);
    json file = json::parse(text, nullptr, false, /*ignore_comments=*/true);
    check(!file.is_discarded(), "config file ", path, " is not valid JSON");
    merge_checked(resolved, file, "", path);
  }
  for (const auto& assignment : overrides) merge_checked(resolved, override_to_json(assignment), "", "--set " + assignment);
  return resolved;
}

RunConfig parse_run_config(const json& j) {
  RunConfig c;
  c.json = j;
  c.model = parse_model_section(j.at("model"));
  c.train = parse_train_section(j.at("train"), c.model.context);
  parse_optim_section(j.at("optim"), c);
  c.data.dir = j.at("data").at("dir").get<std::string>();
  // Configurations saved in checkpoints before the section existed have none: the default policy.
  if (j.contains("anomaly")) c.anomaly = parse_anomaly_settings(j.at("anomaly"));
  return c;
}

void apply_precision_policy(const TrainSettings& train, Backend& backend) {
  backend.set_fp32_matmul(train.bf16_mixed ? Fp32Matmul::Bf16Operands
                          : train.tf32     ? Fp32Matmul::Tf32Operands
                                           : Fp32Matmul::Exact);
}

PeakPrecision gemm_peak_precision(const TrainSettings& train) {
  if (train.bf16_mixed) return PeakPrecision::BF16;
  if (train.tf32) return PeakPrecision::TF32;
  return train.dtype == DType::F64 ? PeakPrecision::FP64 : PeakPrecision::FP32;
}

std::string precision_name(const TrainSettings& train) {
  return train.bf16_mixed ? "bf16-mixed" : train.tf32 ? "tf32" : dtype_name(train.dtype);
}

}  // namespace tripod
