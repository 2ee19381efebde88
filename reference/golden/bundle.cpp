#include "golden/bundle.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <set>

#include "backend/transfer.h"
#include "ckpt/safetensors.h"
#include "core/digest.h"
#include "core/error.h"
#include "export/hf_gpt2.h"
#include "model/param_spec.h"
#include "optim/adamw.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace tripod::golden {

data::Batch Bundle::batch(int64_t k) const {
  const int64_t B = tokens.shape[1], T = tokens.shape[2];
  const auto first = tokens.values.begin() + k * B * T;
  const auto first_target = targets.values.begin() + k * B * T;
  return {B, T, {first, first + B * T}, {first_target, first_target + B * T}};
}

namespace {

json read_json(const fs::path& path) {
  std::ifstream in(path);
  TRIPOD_CHECK(in.good(), path.string(),
               ": cannot open (is this a golden bundle? `tripod golden --out DIR` writes one)");
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    fail(path.string(), ": not valid JSON (", e.what(), ")");
  }
}

void check_tokens(const Int32Array& a, const fs::path& file, int64_t steps, int64_t B, int64_t T, int32_t lowest,
                  int64_t vocab) {
  if (a.shape != std::vector<int64_t>{steps, B, T})
    fail(file.string(), ": shape ", shape_str(a.shape), ", bundle.json says [", steps, ", ", B, ", ", T, "]");
  for (std::size_t i = 0; i < a.values.size(); ++i)
    if (a.values[i] < lowest || a.values[i] >= vocab)
      fail(file.string(), ": element ", i, " (step ", i / static_cast<std::size_t>(B * T) + 1, ") is ", a.values[i],
           ", outside [", lowest, ", ", vocab, ")");
}

}  // namespace

json describe_bundle_files(const fs::path& dir) {
  json files = json::object();
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (!entry.is_regular_file() || entry.path().filename() == kBundleJson) continue;
    files[entry.path().lexically_relative(dir).generic_string()] = {{"bytes", entry.file_size()},
                                                                     {"xxh64", file_xxh64(entry.path())}};
  }
  return files;
}

void verify_bundle_files(const fs::path& dir, const json& meta) {
  if (!meta.contains("files")) return;
  const fs::path meta_file = dir / kBundleJson;
  const json& files = meta.at("files");
  TRIPOD_CHECK(files.is_object(), meta_file.string(), ": files is not an object");
  for (const auto& [name, entry] : files.items()) {
    // A name is a file inside the bundle, as describe_bundle_files writes it: a bundle from another
    // machine must not make its reader hash files elsewhere ("../..", "/etc/...").
    const fs::path relative(name);
    TRIPOD_CHECK(!name.empty() && relative.is_relative() && name != kBundleJson &&
                     std::none_of(relative.begin(), relative.end(), [](const fs::path& part) { return part == ".."; }),
                 meta_file.string(), ": files lists \"", name, "\", which is not a file inside the bundle");
    const fs::path file = dir / name;
    TRIPOD_CHECK(entry.is_object() && entry.contains("bytes") && entry.contains("xxh64"), meta_file.string(),
                 ": files.", name, " lacks its bytes or xxh64");
    TRIPOD_CHECK(fs::is_regular_file(file), file.string(), ": missing (bundle.json lists it): the bundle is incomplete");
    const uintmax_t bytes = fs::file_size(file);
    TRIPOD_CHECK(entry.at("bytes") == bytes, file.string(), ": ", bytes, " bytes, bundle.json records ",
                 entry.at("bytes").dump(), " (truncated, or damaged on its way here)");
    const std::string digest = file_xxh64(file);
    TRIPOD_CHECK(entry.at("xxh64") == digest, file.string(), ": XXH64 ", digest, ", bundle.json records ",
                 entry.at("xxh64").dump(), ": the file was changed or damaged since the bundle was written");
  }
}

Bundle read_bundle(const fs::path& dir) {
  Bundle b;
  b.dir = dir;
  const fs::path meta_file = dir / kBundleJson;
  b.meta = read_json(meta_file);
  try {
    TRIPOD_CHECK(b.meta.value("format", "") == "tripod-golden", meta_file.string(), ": format is not tripod-golden");
    TRIPOD_CHECK(b.meta.at("version").get<int>() == kBundleVersion, meta_file.string(), ": version ",
                 b.meta.at("version"), ", this Tripod reads version ", kBundleVersion);
    b.config = parse_run_config(b.meta.at("source").at("config"));
    b.steps = b.meta.at("batch").at("steps").get<int64_t>();
    const json& model = b.meta.at("model");
    const ModelConfig& m = b.config.model;
    TRIPOD_CHECK(model.at("n_layer") == m.n_layer && model.at("n_head") == m.n_head &&
                     model.at("n_embd") == m.d_model && model.at("vocab_size") == m.vocab_size &&
                     model.at("tie_word_embeddings") == m.tie_embeddings,
                 meta_file.string(), ": the model block disagrees with source.config");
    // A peer trains from these blocks and Tripod from source.config: every number they share must
    // agree, or the two would train different runs (an edited beta1 = 5 ran with Tripod's 0.9).
    const json& optimizer = b.meta.at("optimizer");
    const auto agree = [&](const json& block, const std::string& where, const char* key, const json& expected) {
      TRIPOD_CHECK(block.at(key) == expected, meta_file.string(), ": ", where, ".", key, " is ", block.at(key).dump(),
                   " but source.config says ", expected.dump());
    };
    agree(model, "model", "n_positions", m.context);
    agree(model, "model", "n_inner", m.d_ff);
    agree(model, "model", "layer_norm_epsilon", m.layernorm_eps);
    agree(b.meta.at("batch"), "batch", "batch_size", b.config.train.batch_size);
    agree(b.meta.at("batch"), "batch", "seq_len", b.config.train.seq_len);
    agree(optimizer, "optimizer", "beta1", b.config.adamw.beta1);
    agree(optimizer, "optimizer", "beta2", b.config.adamw.beta2);
    agree(optimizer, "optimizer", "eps", b.config.adamw.eps);
    agree(optimizer, "optimizer", "weight_decay", b.config.adamw.weight_decay);
    agree(optimizer, "optimizer", "grad_clip", b.config.grad_clip);
    // Which tensors take weight decay, and the GELU: the peers read them from these blocks (an
    // edited decay list of [] gave Tripod a MATCH and the PyTorch peer a DIFFERS at step 1).
    json decay = json::array();
    for (const ParamSpec& spec : gpt_param_specs(m))
      if (decays(spec, b.config.adamw.decay_policy)) decay.push_back(spec.name);
    agree(optimizer, "optimizer", "decay", decay);
    agree(model, "model", "activation_function", "gelu_new");
    const json& lrs = optimizer.at("lrs");
    TRIPOD_CHECK(static_cast<int64_t>(lrs.size()) == b.steps, meta_file.string(), ": ", lrs.size(),
                 " learning rates for ", b.steps, " steps");
    for (int64_t k = 0; k < b.steps; ++k)
      TRIPOD_CHECK(lrs[static_cast<std::size_t>(k)].get<double>() == b.config.schedule.at(k), meta_file.string(),
                   ": optimizer.lrs[", k, "] differs from the schedule of source.config");
  } catch (const json::exception& e) {
    fail(meta_file.string(), ": ", e.what());
  }
  verify_bundle_files(dir, b.meta);
  const int64_t B = b.config.train.batch_size, T = b.config.train.seq_len, V = b.config.model.vocab_size;
  b.tokens = read_npy_int32(dir / kTokensFile);
  b.targets = read_npy_int32(dir / kTargetsFile);
  check_tokens(b.tokens, dir / kTokensFile, b.steps, B, T, 0, V);
  check_tokens(b.targets, dir / kTargetsFile, b.steps, B, T, -1, V);
  return b;
}

RunConfig with_precision(const RunConfig& config, const std::string& precision) {
  check(precision == "fp32" || precision == "fp64", "golden: precision '", precision,
        "': a bundle holds fp32 and fp64 references");
  json j = config.json;
  j["train"]["dtype"] = precision;
  return parse_run_config(j);
}

std::vector<std::vector<double>> read_hf_params(const fs::path& file, const std::vector<ParamSpec>& specs) {
  const ckpt::SafetensorsFile st = ckpt::SafetensorsFile::read(file);
  std::vector<std::vector<double>> values;
  std::set<std::string> names;
  for (const ParamSpec& spec : specs) {
    values.push_back(from_hf_tensor(spec, st.get(spec.name), file.string()));
    names.insert(spec.name);
  }
  for (const auto& t : st.tensors())
    TRIPOD_CHECK(names.count(t.name) != 0, file.string(), ": tensor ", t.name, " is not a parameter of this model");
  return values;
}

void write_hf_params(const fs::path& file, const std::vector<ParamSpec>& specs,
                     const std::vector<std::vector<double>>& values, DType dtype) {
  std::vector<ckpt::HostTensor> tensors;
  for (std::size_t i = 0; i < specs.size(); ++i) tensors.push_back(to_hf_tensor(specs[i], values[i], "", dtype));
  ckpt::write_safetensors(file, tensors, {{"format", "pt"}, {"source", "tripod"}});
}

void load_params(TrainingEngine& engine, const std::vector<ParamSpec>& specs,
                 const std::vector<std::vector<double>>& values, Backend& backend) {
  std::map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < specs.size(); ++i) index[specs[i].name] = i;
  for (const StateRegion& region : engine.state_regions()) {
    if (region.kind != "param") continue;
    const auto found = index.find(region.tensor);
    check(found != index.end(), "golden: the engine holds ", region.tensor, ", which the model's specs do not name");
    const std::vector<double>& full = values[found->second];
    std::vector<double> local = to_host_f64(backend, region.local);  // keeps the padding as it is
    for (const LogicalRun& run : region.runs)
      std::copy_n(full.begin() + run.logical, run.length, local.begin() + run.local);
    from_host_f64(backend, local, region.local);
  }
}

}  // namespace tripod::golden
