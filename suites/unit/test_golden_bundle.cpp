// Golden bundles (golden/): the .npy arrays round-trip and every malformed one is refused naming
// the file; a bundle written from a run reads back, replays on the single-device trainer to its own
// reference bit for bit, and a bundle tampered with (learning rates, tokens, model) is refused.
// Peers and the golden check are tested in suites/python/test_golden*.py.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <functional>

#include "backend/transfer.h"
#include "data/synthetic_corpus.h"
#include "golden/bundle.h"
#include "golden/golden_writer.h"
#include "support/error_text.h"
#include "support/test_backend.h"
#include "train/trainer.h"

namespace tripod::golden {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class GoldenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("tripod_golden_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A Markov corpus and a two-layer model on it, 3 steps of the schedule used.
  RunConfig small_run() {
    data::SyntheticOptions corpus;
    corpus.tokens = 20000;
    corpus.out_dir = dir_ / "corpus";
    data::write_synthetic_corpus(corpus);
    json cfg = default_config_json();
    cfg["model"] = {{"n_layer", 2}, {"n_head", 2}, {"d_model", 16}, {"d_ff", 48}, {"vocab_size", 0},
                    {"context", 16}, {"tie_embeddings", false}, {"layernorm_eps", 1e-5}};
    cfg["train"]["batch_size"] = 4;
    cfg["train"]["seq_len"] = 12;
    cfg["train"]["micro_batches"] = 2;
    cfg["train"]["steps"] = 10;
    cfg["optim"]["warmup_steps"] = 2;
    cfg["optim"]["grad_clip"] = 0.5;
    cfg["data"]["dir"] = corpus.out_dir.string();
    return parse_run_config(cfg);
  }

  fs::path dir_;
};

void write_bytes(const fs::path& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST_F(GoldenTest, NpyRoundTripsAndAlignsItsData) {
  const Int32Array a{{2, 3, 4}, {}};
  Int32Array filled = a;
  for (int i = 0; i < 24; ++i) filled.values.push_back(i * 7 - 30);
  write_npy_int32(dir_ / "a.npy", filled);
  const Int32Array back = read_npy_int32(dir_ / "a.npy");
  EXPECT_EQ(back.shape, filled.shape);
  EXPECT_EQ(back.values, filled.values);
  EXPECT_EQ((read_bytes(dir_ / "a.npy").size() - 24 * 4) % 64, 0u) << "numpy aligns the data to 64 bytes";
  write_npy_int32(dir_ / "one.npy", {{5}, {1, 2, 3, 4, 5}});  // a 1-D shape is written "(5, )"
  EXPECT_EQ(read_npy_int32(dir_ / "one.npy").values.size(), 5u);
}

// An npy file of no data whose header gives `shape`.
std::string npy_with_shape(const std::string& shape) {
  std::string header = "{'descr': '<i4', 'fortran_order': False, 'shape': " + shape + ", }";
  header += std::string(63 - (10 + header.size()) % 64, ' ') + "\n";
  const std::string length{static_cast<char>(header.size() & 0xff), static_cast<char>(header.size() >> 8)};
  return std::string("\x93NUMPY\x01\x00", 8) + length + header;
}

TEST_F(GoldenTest, NpyRefusesWhatItCannotRead) {
  write_npy_int32(dir_ / "good.npy", {{2, 2}, {1, 2, 3, 4}});
  const std::string good = read_bytes(dir_ / "good.npy");
  struct Case {
    std::string name, bytes, expected;
  };
  std::string fortran = good, float64 = good;
  fortran.replace(fortran.find("False"), 5, "True ");
  float64.replace(float64.find("<i4"), 3, "<f8");
  const std::vector<Case> cases = {
      {"magic", "PK\x03\x04" + good.substr(4), "no \\x93NUMPY magic"},
      {"truncated", good.substr(0, good.size() - 3), "(truncated)"},
      {"trailing", good + "xx", "(trailing bytes)"},
      {"fortran", fortran, "Fortran order"},
      {"dtype", float64, "dtype <f8, expected int32"},
      {"header", good.substr(0, 20), "truncated header"},
      // A dimension past int64 was "internal error: stoll" naming no file; a product past it wrapped
      // (to 0 for (2^62, 4): an empty payload passed).
      {"huge-dimension", npy_with_shape("(99999999999999999999999, 2)"), "holds more elements than any file can"},
      {"wrapping-shape", npy_with_shape("(4611686018427387904, 4)"), "holds more elements than any file can"},
  };
  for (const Case& c : cases) {
    const fs::path path = dir_ / (c.name + ".npy");
    write_bytes(path, c.bytes);
    const std::string error = error_of([&] { read_npy_int32(path); });
    EXPECT_NE(error.find(path.string()), std::string::npos) << c.name << ": " << error;
    EXPECT_NE(error.find(c.expected), std::string::npos) << c.name << ": " << error;
  }
}

TEST_F(GoldenTest, BundleReplaysToItsReferenceBitForBit) {
  const RunConfig config = small_run();
  auto backend = testing::make_test_backend();
  const GoldenWriteSummary s = write_golden_bundle(config, 3, dir_ / "bundle", *backend);
  EXPECT_EQ(s.steps, 3);
  EXPECT_LT(s.fp32_worst_loss_rel_error, 1e-5);
  const Bundle bundle = read_bundle(dir_ / "bundle");
  ASSERT_EQ(bundle.steps, 3);
  EXPECT_EQ(bundle.batch(2).tokens.size(), 4u * 12u);

  std::ifstream ref_file(dir_ / "bundle" / kReferenceDir / "fp64.json");
  const json reference = json::parse(ref_file);
  EXPECT_EQ(reference["params"].size(), 2u);  // after step 1 and step K
  // The single-device trainer from the bundle's weights and batches gives the stored losses exactly.
  const RunConfig fp64 = with_precision(bundle.config, "fp64");
  Trainer trainer(fp64, *backend);
  trainer.initialise();
  const std::vector<ParamSpec> specs = trainer.params().specs();
  load_params(trainer, specs, read_hf_params(bundle.dir / kModelFile, specs), *backend);
  for (int64_t k = 0; k < 3; ++k)
    EXPECT_EQ(trainer.train_step(bundle.batch(k)).loss, reference["losses"][static_cast<std::size_t>(k)].get<double>())
        << "step " << k + 1;
  const auto final_params = read_hf_params(dir_ / "bundle" / kReferenceDir / "fp64-step3.safetensors", specs);
  for (std::size_t i = 0; i < specs.size(); ++i)
    EXPECT_EQ(to_host_f64(*backend, trainer.params().at(i)), final_params[i]) << specs[i].name;
  // The drift allowance is tight where gradients carry signal: for most elements far below its cap
  // (2 u_max lr per step, about 6 lr over 3 steps), where the gradient is noise.
  const auto slack = read_hf_params(dir_ / "bundle" / kReferenceDir / "slack-fp32-step3.safetensors", specs);
  std::vector<double> all;
  for (const auto& t : slack) all.insert(all.end(), t.begin(), t.end());
  std::nth_element(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(all.size() / 2), all.end());
  EXPECT_LT(all[all.size() / 2], 1e-2 * config.schedule.max_lr);
}

TEST_F(GoldenTest, TamperedBundlesAreRefusedNamingTheFile) {
  const RunConfig config = small_run();
  auto backend = testing::make_test_backend();
  EXPECT_NE(error_of([&] { write_golden_bundle(config, 11, dir_ / "b0", *backend); }).find("beyond the run's train.steps"),
            std::string::npos);
  fs::create_directories(dir_ / "busy");
  write_bytes(dir_ / "busy" / "x", "x");
  EXPECT_NE(error_of([&] { write_golden_bundle(config, 2, dir_ / "busy", *backend); }).find("not an empty folder"),
            std::string::npos);

  const fs::path b = dir_ / "bundle";
  write_golden_bundle(config, 2, b, *backend);
  const std::string meta = read_bytes(b / kBundleJson);
  auto tamper = [&](const std::function<void(json&)>& change) {
    json j = json::parse(meta);
    change(j);
    write_bytes(b / kBundleJson, j.dump());
    return error_of([&] { read_bundle(b); });
  };
  EXPECT_NE(tamper([](json& j) { j["optimizer"]["lrs"][1] = 1.0; }).find("optimizer.lrs[1] differs"), std::string::npos);
  EXPECT_NE(tamper([](json& j) { j["model"]["n_layer"] = 3; }).find("model block disagrees"), std::string::npos);
  EXPECT_NE(tamper([](json& j) { j["version"] = 2; }).find("version 2"), std::string::npos);
  EXPECT_NE(tamper([](json& j) { j["batch"]["steps"] = 3; }).find("learning rates for 3 steps"), std::string::npos);
  write_bytes(b / kBundleJson, meta);

  Int32Array tokens = read_npy_int32(b / kTokensFile);
  tokens.values[5] = 100000;
  write_npy_int32(b / kTokensFile, tokens);
  // bundle.json's files: any edit is refused by its digest, before the contents are read.
  std::string error = error_of([&] { read_bundle(b); });
  EXPECT_NE(error.find("tokens.npy: XXH64 "), std::string::npos) << error;
  EXPECT_NE(error.find("the file was changed or damaged since the bundle was written"), std::string::npos) << error;
  // A bundle written before bundle.json listed its files: the contents are still checked.
  json older = json::parse(meta);
  older.erase("files");
  write_bytes(b / kBundleJson, older.dump());
  error = error_of([&] { read_bundle(b); });
  EXPECT_NE(error.find("tokens.npy: element 5 (step 1) is 100000"), std::string::npos) << error;
  fs::remove(b / kTargetsFile);
  EXPECT_NE(error_of([&] { read_bundle(b); }).find("targets.npy: cannot open"), std::string::npos);
  write_bytes(b / kBundleJson, meta);
  error = error_of([&] { read_bundle(b); });
  EXPECT_NE(error.find("targets.npy: missing (bundle.json lists it)"), std::string::npos) << error;
}

TEST_F(GoldenTest, HfParamsMustMatchTheModel) {
  const RunConfig config = small_run();
  auto backend = testing::make_test_backend();
  write_golden_bundle(config, 1, dir_ / "bundle", *backend);
  const std::vector<ParamSpec> specs = gpt_param_specs(read_bundle(dir_ / "bundle").config.model);
  auto values = read_hf_params(dir_ / "bundle" / kModelFile, specs);
  std::vector<ParamSpec> fewer(specs.begin(), specs.end() - 1);  // a model without lm_head
  EXPECT_NE(error_of([&] { read_hf_params(dir_ / "bundle" / kModelFile, fewer); }).find("is not a parameter of this model"),
            std::string::npos);
  ParamSpec wider = specs[0];
  wider.shape[1] += 1;
  std::vector<ParamSpec> misshapen = specs;
  misshapen[0] = wider;
  const std::string error = error_of([&] { read_hf_params(dir_ / "bundle" / kModelFile, misshapen); });
  EXPECT_NE(error.find(specs[0].name + " has shape"), std::string::npos) << error;
}

}  // namespace
}  // namespace tripod::golden
