#include "export/hf_gpt2.h"

#include <fstream>
#include <set>
#include <string>
#include <utility>

#include "backend/backend.h"
#include "ckpt/checkpoint_reader.h"
#include "ckpt/checkpoint_root.h"
#include "ckpt/durable_file.h"
#include "core/error.h"
#include "core/folder_writer_lock.h"
#include "data/token_dataset.h"
#include "data/tokenizer.h"
#include "train/run_config.h"

namespace tripod {
namespace fs = std::filesystem;

bool is_conv1d_weight(ParamRole role) {
  return role == ParamRole::QkvWeight || role == ParamRole::AttnProjWeight || role == ParamRole::FcWeight ||
         role == ParamRole::FcProjWeight;
}

ckpt::HostTensor to_hf_tensor(const ParamSpec& spec, std::vector<double> values, const std::string& prefix, DType out) {
  check(static_cast<int64_t>(values.size()) == shape_numel(spec.shape), "HF export: ", spec.name, " has ",
        values.size(), " values, its shape needs ", shape_numel(spec.shape));
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

ckpt::HostTensor to_hf_tensor(Backend& backend, const ParamSpec& spec, const Tensor& t, const std::string& prefix,
                              DType out) {
  return to_hf_tensor(spec, to_host_f64(backend, t), prefix, out);
}

std::vector<double> from_hf_tensor(const ParamSpec& spec, const ckpt::HostTensor& hf, const std::string& origin) {
  Shape expected = spec.shape;
  if (is_conv1d_weight(spec.role)) std::swap(expected[0], expected[1]);
  TRIPOD_CHECK(hf.shape == expected, origin, ": ", hf.name, " has shape ", shape_str(hf.shape), ", the model needs ",
               shape_str(expected), " (Hugging Face layout)");
  std::vector<double> values(static_cast<std::size_t>(hf.numel()));
  if (hf.dtype == DType::F32) {
    const float* v = hf.as<float>();
    std::copy(v, v + hf.numel(), values.begin());
  } else {
    check(hf.dtype == DType::F64, origin, ": ", hf.name, " is ", dtype_name(hf.dtype), ", expected F32 or F64");
    const double* v = hf.as<double>();
    std::copy(v, v + hf.numel(), values.begin());
  }
  if (!is_conv1d_weight(spec.role)) return values;
  // [in, out] -> [out, in]
  const int64_t rows = expected[0], cols = expected[1];
  std::vector<double> transposed(values.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) transposed[static_cast<std::size_t>(c * rows + r)] = values[static_cast<std::size_t>(r * cols + c)];
  return transposed;
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

namespace {

// What an export writes; the folder inside --out it writes them into first (StagingFolder); and the
// staging names an earlier version's export killed mid-write left in --out itself, which made the
// next export refuse the folder as holding other files.
const std::set<std::string> kExportFiles = {"model.safetensors", "config.json", "tokenizer.model"};
constexpr const char* kStagingFolder = ".export-staging";
const std::set<std::string> kStagedExportFiles = {"model.safetensors.tmp", "config.json.tmp", "tokenizer.model.tmp"};

// The export's files are written whole into this folder before any of them replaces the previous
// export's: a failure midway (a full disk) replaced the model and left the previous export's
// tokenizer beside it, or half a tokenizer. Made empty at the start (a killed export's is left
// over), and gone at the end however the export ends.
struct StagingFolder {
  fs::path dir;
  explicit StagingFolder(fs::path folder) : dir(std::move(folder)) {
    fs::remove_all(dir);
    fs::create_directory(dir);
  }
  ~StagingFolder() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  StagingFolder(const StagingFolder&) = delete;
  StagingFolder& operator=(const StagingFolder&) = delete;
};

// An export replaces a previous export whole, and refuses to mix its files into anything else.
void check_export_target(const fs::path& out_dir) {
  std::error_code ec;
  if (!fs::exists(out_dir, ec)) return;
  TRIPOD_CHECK(fs::is_directory(out_dir), "export target ", out_dir.string(), " is a file; refusing to replace it");
  for (const auto& entry : fs::directory_iterator(out_dir)) {
    const std::string name = entry.path().filename().string();
    const bool ours = ((kExportFiles.count(name) || kStagedExportFiles.count(name)) && entry.is_regular_file()) ||
                      (name == kStagingFolder && entry.is_directory());
    TRIPOD_CHECK(ours,
                 "export target ", out_dir.string(), " holds other files (", name,
                 "); refusing to mix a new export into it (choose an empty ", "or new folder)");
  }
}

// Under the folder's lock, a staged file is a previous export's, cut short.
void remove_staged_files(const fs::path& out_dir) {
  for (const std::string& name : kStagedExportFiles) fs::remove(out_dir / name);
}

// The tokenizer of the checkpoint's run, found through its data directory as it is now.
struct RunTokenizer {
  fs::path file;        // empty: none
  std::string why_none;
  bool lost = false;    // the data had (or may have had) one that cannot be vouched for
};

RunTokenizer run_tokenizer(const RunConfig& run, const std::string& saved_tokens_xxh64) {
  const fs::path dir = run.data.dir;
  RunTokenizer none;
  none.lost = true;
  nlohmann::json meta;
  try {
    meta = data::TokenDataset::read_meta(dir);
  } catch (const Error& e) {
    none.why_none = str_cat("the run's data directory cannot be read now: ", e.what());
    return none;
  }
  const bool has_tokenizer = meta.value("tokenizer", nlohmann::json()).is_string();
  if (!saved_tokens_xxh64.empty()) {
    std::string now;
    try {
      now = data::split_tokens_xxh64(dir, "train");
    } catch (const Error& e) {
      none.why_none = str_cat("the run's training tokens in ", dir.string(), " cannot be read now: ", e.what());
      return none;
    }
    if (now != saved_tokens_xxh64) {
      none.why_none = str_cat(dir.string(), " holds another corpus now (its training tokens' XXH64 is ", now,
                              ", the checkpoint's ", saved_tokens_xxh64, "), so its tokenizer may not be this model's");
      return none;
    }
  }
  if (!has_tokenizer) {
    // A synthetic corpus: its ids are the tokens; there is nothing to ship. (A tokenizer.model lying in
    // such a folder belongs to another corpus, and was shipped as this model's.)
    return {{}, str_cat("the run's data (", dir.string(), ") has no tokenizer: its meta.json names none"), false};
  }
  const fs::path file = dir / meta["tokenizer"].get<std::string>();
  try {
    const int pieces = data::Tokenizer::load(file).vocab_size();
    const auto data_vocab = meta["vocab_size"].get<int64_t>();
    if (pieces != data_vocab || pieces > run.model.vocab_size) {
      none.why_none = str_cat(file.string(), " has ", pieces, " pieces; the data's vocabulary is ", data_vocab,
                              " and the model's ", run.model.vocab_size);
      return none;
    }
    data::check_tokenizer_identity(file, meta);  // same size, another preparation's
  } catch (const Error& e) {
    none.why_none = e.what();
    return none;
  }
  return {file, "", false};
}

}  // namespace

ExportReport export_hf_checkpoint(const fs::path& checkpoint, const fs::path& out_dir, DType out_dtype,
                                  Backend& backend) {
  ckpt::CheckpointReader reader(ckpt::resolve_checkpoint(checkpoint));
  const RunConfig run = parse_run_config(reader.manifest().config);
  TRIPOD_CHECK(run.model.vocab_size > 0, reader.dir().string(), ": checkpoint config has no resolved vocab_size");
  ParamSet params(gpt_param_specs(run.model), backend, reader.manifest().dtype);
  for (std::size_t i = 0; i < params.size(); ++i) {
    const ParamSpec& spec = params.specs()[i];
    reader.load({spec.name, spec.shape, "param", params.at(i), {{0, 0, shape_numel(spec.shape)}}, false}, backend);
  }

  check_export_target(out_dir);
  // Converted before the folder is made: a refused dtype used to leave an empty folder behind.
  // GPT2LMHeadModel's own names, as its save_pretrained writes them: the body under "transformer.",
  // an untied head as "lm_head.weight". Bare body names loaded only while the head was tied: beside
  // "lm_head.weight" transformers took the file for a base model's and refused it (4.40: "The state
  // dictionary of the model you are trying to load is corrupted") or loaded the body and left the
  // head random with a warning (later versions).
  auto tensors = to_hf_tensors(backend, params, "transformer.", out_dtype);
  for (std::size_t i = 0; i < tensors.size(); ++i)
    if (params.specs()[i].role == ParamRole::LmHead) tensors[i].name = params.specs()[i].name;
  // Locked on the folder itself: a lock file would ship with the model (a Hub upload of the folder).
  const FolderWriterLock lock(out_dir, "",
                              str_cat("export hf --out ", out_dir.string(), ": another `tripod export hf` is writing "
                                      "this folder, and two at once write through the same staging file (one "
                                      "can end with the other's weights); wait for it to end, or give another "
                                      "--out"));
  remove_staged_files(out_dir);
  ExportReport report;
  report.checkpoint_dir = reader.dir();
  report.model_file = out_dir / "model.safetensors";
  report.tensors = static_cast<int64_t>(tensors.size());
  report.parameters = count_params(params.specs());
  const StagingFolder staging(out_dir / kStagingFolder);
  ckpt::write_safetensors(staging.dir / "model.safetensors", tensors, {{"format", "pt"}, {"source", "tripod"}});
  const RunTokenizer tokenizer = run_tokenizer(run, reader.manifest().data.train_tokens_xxh64);
  report.no_tokenizer = tokenizer.why_none;
  report.tokenizer_lost = tokenizer.lost;
  if (!tokenizer.file.empty())  // a copy, staged and fsynced as the others are (a killed copy left half a one)
    ckpt::write_text_durably(staging.dir / "tokenizer.model", ckpt::read_text(tokenizer.file));
  ckpt::write_text_durably(staging.dir / "config.json", hf_gpt2_config(run.model).dump(2) + "\n");

  // Every file is whole: into place, config.json (what a loader reads first) last. The previous
  // config.json goes first, durably: a kill between two renames left the new model beside the
  // previous export's config (of another shape, perhaps) and tokenizer, a folder a loader took
  // whole; now such a folder has no config.json, which loaders refuse, until an export completes it.
  fs::remove(out_dir / "config.json");
  ckpt::fsync_directory(out_dir);
  fs::rename(staging.dir / "model.safetensors", report.model_file);
  if (!tokenizer.file.empty()) {
    report.tokenizer_file = out_dir / "tokenizer.model";
    fs::rename(staging.dir / "tokenizer.model", report.tokenizer_file);
  } else {
    fs::remove(out_dir / "tokenizer.model");  // a previous export's, of another run
  }
  fs::rename(staging.dir / "config.json", out_dir / "config.json");
  ckpt::fsync_directory(out_dir);
  return report;
}

}  // namespace tripod
