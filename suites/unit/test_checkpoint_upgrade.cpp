// `tripod ckpt upgrade`: a version-1 checkpoint (state.json beside model.safetensors and
// optimizer.safetensors) rewritten as a sharded one that resumes bit for bit, and the inputs it
// must refuse by name: tensors that are not the model its config describes (they were upgraded
// as they were, and refused only by the resume after), a NEW_ROOT that holds another run's checkpoints (its `latest` moved to the
// upgraded one), a state.json without its step (an "internal error" naming no file), a negative step.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "backend/transfer.h"
#include "ckpt/manifest.h"
#include "ckpt/safetensors.h"
#include "model_test_util.h"
#include "support/error_text.h"
#include "support/test_backend.h"
#include "train/checkpointing.h"
#include "train/trainer.h"

namespace tripod {
namespace {
namespace fs = std::filesystem;

std::string file_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A version-1 checkpoint of `trainer` at step 3: parameters, zero Adam moments, checksummed.
void write_v1(const fs::path& dir, const Trainer& trainer, Backend& backend, const RunConfig& config,
              nlohmann::json state_changes = nlohmann::json::object()) {
  fs::create_directories(dir);
  std::vector<ckpt::HostTensor> model, optimizer;
  for (std::size_t i = 0; i < trainer.params().size(); ++i) {
    const ParamSpec& spec = trainer.params().specs()[i];
    const std::vector<double> values = to_host_f64(backend, trainer.params().at(i));
    model.push_back(ckpt::make_host_tensor<float>(spec.name, spec.shape, std::vector<float>(values.begin(), values.end())));
    const std::vector<float> zeros(values.size(), 0.0f);
    optimizer.push_back(ckpt::make_host_tensor<float>("m." + spec.name, spec.shape, zeros));
    optimizer.push_back(ckpt::make_host_tensor<float>("v." + spec.name, spec.shape, zeros));
  }
  ckpt::write_safetensors(dir / "model.safetensors", model, {});
  ckpt::write_safetensors(dir / "optimizer.safetensors", optimizer, {});
  nlohmann::json state = {{"format", ckpt::kCheckpointFormat}, {"version", 1}, {"step", 3}, {"dtype", "fp32"},
                          {"config", config.json}, {"files", nlohmann::json::object()}};
  for (const char* name : {"model.safetensors", "optimizer.safetensors"}) {
    const std::string bytes = file_text(dir / name);
    state["files"][name] = xxh64_hex(bytes.data(), bytes.size());
  }
  state.merge_patch(state_changes);  // a null value removes the key
  std::ofstream(dir / "state.json") << state.dump();
}

struct CheckpointUpgrade : ::testing::Test {
  const RunConfig config = testing::tiny_run_config("fp32", true);
  std::unique_ptr<Backend> backend = testing::make_test_backend();
  Trainer trainer{config, *backend};
  fs::path dir = fs::temp_directory_path() / ("tripod_test_upgrade_" + std::to_string(::getpid()));
  void SetUp() override {
    fs::remove_all(dir);
    trainer.initialise();
  }
  void TearDown() override { fs::remove_all(dir); }
};

TEST_F(CheckpointUpgrade, AVersion1ConfigWithoutTheKeysAddedSinceIsUpgraded) {
  // As the version-1 code wrote it: none of the keys added since (the first commit's had neither
  // pipeline_split nor rank_stats_every). Every real version-1 checkpoint was refused: "its config
  // cannot be read (key 'recompute' not found)".
  const nlohmann::json absent = {
      {"train",
       {{"recompute", nullptr}, {"keep_checkpoints", nullptr}, {"local_save_every", nullptr}, {"async_save", nullptr},
        {"split_tied_grad", nullptr}, {"pipeline_split", nullptr}, {"rank_stats_every", nullptr}}},
      {"anomaly", nullptr}};
  write_v1(dir / "v1", trainer, *backend, config, {{"config", absent}});
  ASSERT_FALSE(nlohmann::json::parse(file_text(dir / "v1" / "state.json"))["config"]["train"].contains("recompute"));
  const fs::path upgraded = upgrade_legacy_checkpoint(dir / "v1", dir / "root", *backend);
  Trainer resumed(config, *backend);
  resumed.initialise();
  EXPECT_EQ(resume_from_checkpoint(nullptr, upgraded, resumed.state_regions(), *backend, config, false).step, 3);
  EXPECT_EQ(to_host_f64(*backend, resumed.params().flat()), to_host_f64(*backend, trainer.params().flat()));
}

TEST_F(CheckpointUpgrade, RewritesAVersion1CheckpointThatResumesWithItsParameters) {
  write_v1(dir / "v1", trainer, *backend, config);
  const fs::path upgraded = upgrade_legacy_checkpoint(dir / "v1", dir / "root", *backend);
  EXPECT_EQ(upgraded, dir / "root" / "step-00000003");
  Trainer resumed(config, *backend);
  resumed.initialise();
  resumed.train_step(testing::random_batch(config.train.batch_size, config.train.seq_len, config.model.vocab_size, 7));
  ASSERT_NE(to_host_f64(*backend, resumed.params().flat()), to_host_f64(*backend, trainer.params().flat()));
  const ckpt::Manifest m = resume_from_checkpoint(nullptr, upgraded, resumed.state_regions(), *backend, config, false);
  EXPECT_EQ(m.step, 3);
  EXPECT_EQ(m.data.next_sample, 3 * config.train.batch_size);
  EXPECT_EQ(to_host_f64(*backend, resumed.params().flat()), to_host_f64(*backend, trainer.params().flat()));
}

TEST_F(CheckpointUpgrade, RefusesARootThatHoldsCheckpointsAndBadStateFiles) {
  write_v1(dir / "v1", trainer, *backend, config);
  upgrade_legacy_checkpoint(dir / "v1", dir / "root", *backend);
  EXPECT_NE(error_of([&] { upgrade_legacy_checkpoint(dir / "v1", dir / "root", *backend); })
                .find("must be absent or an empty folder"),
            std::string::npos);
  write_v1(dir / "no-step", trainer, *backend, config, {{"step", nullptr}});
  std::string m = error_of([&] { upgrade_legacy_checkpoint(dir / "no-step", dir / "a", *backend); });
  EXPECT_NE(m.find((dir / "no-step" / "state.json").string()), std::string::npos) << m;
  EXPECT_NE(m.find("'step'"), std::string::npos) << m;
  write_v1(dir / "negative", trainer, *backend, config, {{"step", -5}});
  m = error_of([&] { upgrade_legacy_checkpoint(dir / "negative", dir / "b", *backend); });
  EXPECT_NE(m.find("step -5 is negative"), std::string::npos) << m;
  EXPECT_FALSE(fs::exists(dir / "a"));
  EXPECT_FALSE(fs::exists(dir / "b"));
}

TEST_F(CheckpointUpgrade, RefusesTensorsThatAreNotTheModelOfItsConfig) {
  nlohmann::json wider = config.json;
  wider["model"]["d_ff"] = config.model.d_ff * 2;
  write_v1(dir / "wider", trainer, *backend, config, {{"config", wider}});
  std::string m = error_of([&] { upgrade_legacy_checkpoint(dir / "wider", dir / "a", *backend); });
  EXPECT_NE(m.find("h.0.mlp.c_fc.weight"), std::string::npos) << m;
  EXPECT_NE(m.find("but its config's model makes"), std::string::npos) << m;
  write_v1(dir / "f64", trainer, *backend, config, {{"dtype", "fp64"}});
  m = error_of([&] { upgrade_legacy_checkpoint(dir / "f64", dir / "b", *backend); });
  EXPECT_NE(m.find("is fp32 but state.json says fp64"), std::string::npos) << m;
  nlohmann::json deeper = config.json;
  deeper["model"]["n_layer"] = config.model.n_layer + 1;
  write_v1(dir / "deeper", trainer, *backend, config, {{"config", deeper}});
  m = error_of([&] { upgrade_legacy_checkpoint(dir / "deeper", dir / "c", *backend); });
  EXPECT_NE(m.find("tensors but its config's model has"), std::string::npos) << m;
  for (const char* root : {"a", "b", "c"}) EXPECT_FALSE(fs::exists(dir / root)) << root;
}

}  // namespace
}  // namespace tripod
