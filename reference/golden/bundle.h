// A golden bundle: everything another framework needs to reproduce a short Tripod run exactly
// (reports/FORMATS.md section 1): bundle.json, the initial weights in the Hugging Face GPT-2
// layout, the token batches of every step as .npy, and Tripod's reference results in fp32 and
// fp64. This file names the files and reads a bundle back, for Tripod's own replay (golden_replay.h);
// golden_writer.h makes one.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/batch_loader.h"
#include "golden/npy.h"
#include "model/param_set.h"
#include "train/run_config.h"
#include "train/training_engine.h"

namespace tripod::golden {

inline constexpr int kBundleVersion = 1;
inline constexpr const char* kBundleJson = "bundle.json";
inline constexpr const char* kModelFile = "model.safetensors";
inline constexpr const char* kTokensFile = "tokens.npy";
inline constexpr const char* kTargetsFile = "targets.npy";
inline constexpr const char* kReferenceDir = "reference";

// The tolerance a peer of each precision is held to against the fp64 reference (bundle.json
// "tolerances"; the justification and measurements are in reports/golden/check.py and the README).
// fp32's holds for K <= kFp32StepsWithinTolerance: beyond that, rounding drift amplified by Adam
// outgrows it (measured: the grad norm of a float32 peer is 8e-4 off at step 16 of the tiny preset).
inline constexpr double kRtolFp64 = 1e-10;
inline constexpr double kRtolFp32 = 1e-4;
inline constexpr int64_t kFp32StepsWithinTolerance = 8;

struct Bundle {
  std::filesystem::path dir;
  nlohmann::json meta;    // bundle.json
  RunConfig config;       // the Tripod run the bundle was cut from (bundle.json source.config)
  int64_t steps = 0;      // K
  Int32Array tokens, targets;  // [K, B, T]

  // The global batch of step k (from 0).
  data::Batch batch(int64_t k) const;
};

// Reads and validates a bundle: format and version, the config against the model block, array
// shapes [K, B, T] against the batch block, token ranges against the vocabulary, the learning
// rates against the config's schedule. Throws tripod::Error naming the file at fault.
Bundle read_bundle(const std::filesystem::path& dir);

// bundle.json's "files": every other file of the bundle (paths relative to `dir`, '/'-separated)
// with its size and XXH64, so that a bundle damaged on its way to a peer's machine (a partial copy,
// an edited batch, a flipped bit) is refused naming the file, where it made a correct peer DIFFER.
nlohmann::json describe_bundle_files(const std::filesystem::path& dir);
// Checks every file bundle.json's "files" lists (a bundle written before it lists none: nothing is
// checked); throws tripod::Error naming the file that is missing or has another size or XXH64.
void verify_bundle_files(const std::filesystem::path& dir, const nlohmann::json& meta);

// `config` with train.dtype = precision ("fp32" or "fp64": the bundle's reference precisions).
RunConfig with_precision(const RunConfig& config, const std::string& precision);

// Every parameter of `specs` in Tripod's layout, read from an HF-layout safetensors file (F32 or
// F64); throws naming the file and tensor when one is missing, misshapen or extra.
std::vector<std::vector<double>> read_hf_params(const std::filesystem::path& file, const std::vector<ParamSpec>& specs);
// The same values written as HF-layout tensors in `dtype` (F32 or F64).
void write_hf_params(const std::filesystem::path& file, const std::vector<ParamSpec>& specs,
                     const std::vector<std::vector<double>>& values, DType dtype);

// Sets every parameter an engine holds (its "param" state regions, any layout) from full logical
// tensors in spec order; the optimizer state is left as it is (zero after initialise()).
void load_params(TrainingEngine& engine, const std::vector<ParamSpec>& specs,
                 const std::vector<std::vector<double>>& values, Backend& backend);

}  // namespace tripod::golden
