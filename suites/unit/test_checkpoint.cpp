// Checkpoints: round trip, exact resume, corruption detection; HF export layout.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "support/test_backend.h"
#include "ckpt/checkpoint.h"
#include "export/hf_gpt2.h"
#include "model_test_util.h"
#include "train/trainer.h"

namespace tripod {
namespace {
namespace fs = std::filesystem;

fs::path temp_dir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("tripod_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir;
}

data::Batch batch_for(const RunConfig& c, int64_t step) {
  return testing::random_batch(c.train.batch_size, c.train.seq_len, c.model.vocab_size, 500 + step);
}

// Resuming from a checkpoint continues bit for bit as if the run had not stopped.
TEST(Checkpoint, ResumeIsBitIdentical) {
  const RunConfig config = testing::tiny_run_config("fp32", true);
  auto backend = testing::make_test_backend();
  Trainer straight(config, *backend);
  straight.initialise();
  std::vector<double> straight_losses;
  for (int64_t s = 0; s < 5; ++s) straight_losses.push_back(straight.train_step(batch_for(config, s)).loss);

  const fs::path dir = temp_dir("resume");
  Trainer first(config, *backend);
  first.initialise();
  for (int64_t s = 0; s < 2; ++s) first.train_step(batch_for(config, s));
  ckpt::save_checkpoint(dir, *backend, first.params(), &first.optimizer(), {first.step(), DType::F32, config.json});

  Trainer resumed(config, *backend);
  ckpt::CheckpointState state = ckpt::load_checkpoint(dir, *backend, resumed.params(), &resumed.optimizer());
  resumed.set_step(state.step);
  EXPECT_EQ(state.step, 2);
  for (int64_t s = 2; s < 5; ++s) EXPECT_EQ(resumed.train_step(batch_for(config, s)).loss, straight_losses[s]) << s;
  EXPECT_EQ(to_host_f64(*backend, resumed.params().flat()), to_host_f64(*backend, straight.params().flat()));
  fs::remove_all(dir);
}

TEST(Checkpoint, CorruptFileIsDetectedAndNamed) {
  const RunConfig config = testing::tiny_run_config("fp32", true);
  auto backend = testing::make_test_backend();
  Trainer trainer(config, *backend);
  trainer.initialise();
  const fs::path dir = temp_dir("corrupt");
  ckpt::save_checkpoint(dir, *backend, trainer.params(), &trainer.optimizer(), {0, DType::F32, config.json});
  {
    std::fstream f(dir / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-3, std::ios::end);
    f.put('\x7f');
  }
  try {
    ckpt::read_checkpoint_state(dir);
    FAIL() << "a corrupt checkpoint must not load";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.safetensors"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("corrupt"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ckpt::read_checkpoint_state(dir / "missing"), Error);
  fs::remove_all(dir);
}

TEST(Checkpoint, ShapeMismatchNamesTheTensor) {
  const RunConfig config = testing::tiny_run_config("fp32", true);
  auto backend = testing::make_test_backend();
  Trainer trainer(config, *backend);
  const fs::path dir = temp_dir("shape");
  ckpt::save_checkpoint(dir, *backend, trainer.params(), nullptr, {0, DType::F32, config.json});
  ModelConfig wider = config.model;
  wider.d_ff = 32;
  ParamSet other(gpt_param_specs(wider), *backend, DType::F32);
  try {
    ckpt::load_checkpoint(dir, *backend, other, nullptr);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("h.0.mlp.c_fc.weight"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

TEST(HfExport, Conv1DWeightsAreTransposedAndNamesKept) {
  const RunConfig config = testing::tiny_run_config("fp64", false);
  auto backend = testing::make_test_backend();
  Trainer trainer(config, *backend);
  trainer.initialise();
  const fs::path ckpt_dir = temp_dir("export_ckpt"), out = temp_dir("export_out");
  ckpt::save_checkpoint(ckpt_dir, *backend, trainer.params(), nullptr, {0, DType::F64, config.json});
  ExportReport report = export_hf_checkpoint(ckpt_dir, out, DType::F64, *backend);
  EXPECT_EQ(report.tensors, static_cast<int64_t>(trainer.params().size()));
  ckpt::SafetensorsFile file = ckpt::SafetensorsFile::read(out / "model.safetensors");
  const ckpt::HostTensor& c_fc = file.get("h.1.mlp.c_fc.weight");
  EXPECT_EQ(c_fc.shape, (Shape{8, 16}));  // [in, out]
  const std::vector<double> ours = to_host_f64(*backend, trainer.params()["h.1.mlp.c_fc.weight"]);  // [16, 8]
  EXPECT_EQ(c_fc.as<double>()[3 * 16 + 5], ours[5 * 8 + 3]);
  EXPECT_EQ(file.get("wte.weight").shape, (Shape{11, 8}));
  EXPECT_TRUE(file.contains("lm_head.weight"));
  EXPECT_TRUE(fs::exists(out / "config.json"));
  fs::remove_all(ckpt_dir);
  fs::remove_all(out);
}

}  // namespace
}  // namespace tripod
