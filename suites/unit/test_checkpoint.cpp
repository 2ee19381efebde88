// Checkpoints: round trip, exact resume, corruption detection; HF export layout.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "support/error_text.h"
#include "support/test_backend.h"
#include "ckpt/checkpoint_reader.h"
#include "ckpt/checkpoint_root.h"
#include "ckpt/checkpoint_verify.h"
#include "ckpt/root_lock.h"
#include "ckpt/shard_file.h"
#include "train/checkpointing.h"
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

fs::path save(const fs::path& root, Trainer& trainer, Backend& backend, const RunConfig& config) {
  return save_checkpoint(nullptr, root, trainer.state_regions(), backend,
                         {trainer.step(), &config, "single process", trainer.step() * config.train.batch_size});
}

// Resuming from a checkpoint continues bit for bit as if the run had not stopped.
TEST(Checkpoint, ResumeIsBitIdentical) {
  const RunConfig config = testing::tiny_run_config("fp32", true);
  auto backend = testing::make_test_backend();
  Trainer straight(config, *backend);
  straight.initialise();
  std::vector<double> straight_losses;
  for (int64_t s = 0; s < 5; ++s) straight_losses.push_back(straight.train_step(batch_for(config, s)).loss);

  const fs::path root = temp_dir("resume");
  Trainer first(config, *backend);
  first.initialise();
  for (int64_t s = 0; s < 2; ++s) first.train_step(batch_for(config, s));
  const fs::path dir = save(root, first, *backend, config);
  EXPECT_EQ(dir, root / "step-00000002");
  EXPECT_EQ(ckpt::find_latest(root), dir);

  Trainer resumed(config, *backend);
  resumed.initialise();
  const ckpt::Manifest m = resume_from_checkpoint(nullptr, dir, resumed.state_regions(), *backend, config, false);
  resumed.set_step(m.step, m.updates);
  EXPECT_EQ(m.step, 2);
  EXPECT_EQ(m.data.next_sample, 2 * config.train.batch_size);
  for (int64_t s = 2; s < 5; ++s) EXPECT_EQ(resumed.train_step(batch_for(config, s)).loss, straight_losses[s]) << s;
  EXPECT_EQ(to_host_f64(*backend, resumed.params().flat()), to_host_f64(*backend, straight.params().flat()));
  EXPECT_TRUE(ckpt::verify_checkpoint(root).ok());
  fs::remove_all(root);
}

// Only the newest keep_checkpoints survive, and `latest` names the newest.
TEST(Checkpoint, KeepsTheNewestAndPointsLatestAtIt) {
  RunConfig config = testing::tiny_run_config("fp32", true);
  config.train.keep_checkpoints = 2;
  auto backend = testing::make_test_backend();
  Trainer trainer(config, *backend);
  trainer.initialise();
  const fs::path root = temp_dir("keep");
  for (int64_t s = 0; s < 3; ++s) {
    trainer.train_step(batch_for(config, s));
    save(root, trainer, *backend, config);
  }
  EXPECT_FALSE(fs::exists(root / "step-00000001"));
  EXPECT_TRUE(fs::exists(root / "step-00000002"));
  EXPECT_EQ(ckpt::find_latest(root), root / "step-00000003");
  // `--resume ROOT/latest` (the pointer file itself) was "a file, not a checkpoint directory".
  EXPECT_EQ(ckpt::resolve_checkpoint(root / "latest"), root / "step-00000003");
  EXPECT_EQ(ckpt::resolve_checkpoint(root), root / "step-00000003");
  EXPECT_EQ(ckpt::latest_pointer_problem(root), "");
  // A latest pointing at a missing directory (a crash in publish) falls back to the newest complete
  // one, and says so: the fallback was silent, and `ckpt verify ROOT` said OK.
  fs::remove_all(root / "step-00000003");
  EXPECT_EQ(ckpt::find_latest(root), root / "step-00000002");
  const std::string missing = ckpt::latest_pointer_problem(root / "latest");
  EXPECT_NE(missing.find("names 'step-00000003', which does not exist; the newest complete checkpoint, "
                         "step-00000002, is used instead"), std::string::npos) << missing;
  EXPECT_FALSE(ckpt::verify_checkpoint(root).ok());
  EXPECT_TRUE(ckpt::verify_checkpoint(root / "step-00000002").ok());
  EXPECT_EQ(ckpt::latest_pointer_problem(root / "step-00000002"), "");
  std::ofstream(root / "latest") << "garbage\n";
  EXPECT_EQ(ckpt::find_latest(root), root / "step-00000002");
  EXPECT_NE(ckpt::latest_pointer_problem(root).find("names 'garbage', which is not a step directory's name"),
            std::string::npos);
  fs::remove_all(root);
}

// One run at a time in a root: a second lock is refused naming the holder while the first is held
// (flock is per open file, so a second one in this process stands in for another process), and
// taken once it is gone; a root holding only the lock file is still a root to save into.
TEST(CheckpointRootLock, ASecondRunIsRefusedWhileTheFirstHoldsTheRoot) {
  const fs::path root = temp_dir("lock");
  ckpt::check_save_root(root, 0);
  {
    const ckpt::RootLock first(root, "--save");
    EXPECT_TRUE(first.held());
    try {
      const ckpt::RootLock second(root, "--save");
      FAIL() << "a second lock of a held root";
    } catch (const Error& e) {
      const std::string expected = "--save " + root.string() + ": another run is saving into this checkpoint root (pid " +
                                   std::to_string(::getpid()) + " on host ";
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  }
  const ckpt::RootLock again(root, "--save");
  EXPECT_TRUE(again.held());
  EXPECT_NO_THROW(ckpt::check_save_root(root, 0)) << "a root with only " << ckpt::kLockFile;
  EXPECT_EQ(ckpt::remove_leftovers(root), 0);
  EXPECT_TRUE(fs::exists(root / ckpt::kLockFile));
  // The error's way out of a lock a lost node left held: the file removed, a new one is a new lock.
  fs::remove(root / ckpt::kLockFile);
  EXPECT_TRUE(ckpt::RootLock(root, "--save").held());
  fs::remove_all(root);
}

TEST(Checkpoint, CorruptBlockIsDetectedAndNamed) {
  const RunConfig config = testing::tiny_run_config("fp32", true);
  auto backend = testing::make_test_backend();
  Trainer trainer(config, *backend);
  trainer.initialise();
  const fs::path root = temp_dir("corrupt");
  const fs::path dir = save(root, trainer, *backend, config);
  {
    std::fstream f(dir / "shard-00000.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-3, std::ios::end);  // the last block: the final tensor's adam_v
    f.put('\x7f');
  }
  Trainer other(config, *backend);
  other.initialise();
  try {
    resume_from_checkpoint(nullptr, dir, other.state_regions(), *backend, config, false);
    FAIL() << "a corrupt checkpoint must not load";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("shard-00000.bin"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("damaged in tensor"), std::string::npos) << e.what();
  }
  const ckpt::VerifyReport report = ckpt::verify_checkpoint(root);
  EXPECT_FALSE(report.ok());
  EXPECT_THROW(ckpt::resolve_checkpoint(root / "missing"), Error);
  fs::remove_all(root);
}

TEST(Checkpoint, ShapeMismatchNamesTheTensor) {
  const RunConfig config = testing::tiny_run_config("fp32", true);
  auto backend = testing::make_test_backend();
  Trainer trainer(config, *backend);
  trainer.initialise();
  const fs::path root = temp_dir("shape");
  const fs::path dir = save(root, trainer, *backend, config);
  RunConfig wider = config;
  wider.model.d_ff = 32;
  Trainer other(wider, *backend);
  other.initialise();
  ckpt::CheckpointReader reader(dir);
  try {
    for (const StateRegion& r : other.state_regions()) reader.load(r, *backend);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("h.0.mlp.c_fc.weight"), std::string::npos) << e.what();
  }
  fs::remove_all(root);
}

// Strided blocks: a column shard's rows share one block; ZeRO cuts give a partial head and tail.
TEST(CheckpointBlocks, RunsCompressIntoStridedBlocks) {
  const std::vector<LogicalRun> columns = {{0, 2, 3}, {3, 10, 3}, {6, 18, 3}, {9, 26, 3}};
  const std::vector<ckpt::Block> one = ckpt::blocks_of_runs(columns);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].start, 2);
  EXPECT_EQ(one[0].stride, 8);
  EXPECT_EQ(one[0].count, 4);
  const std::vector<ckpt::Block> cut = ckpt::blocks_of_runs(runs_within(columns, 1, 10));  // 2 + 3 + 3 + 2 elements
  ASSERT_EQ(cut.size(), 3u);
  EXPECT_EQ(cut[0].start, 3);
  EXPECT_EQ(cut[0].length, 2);
  EXPECT_EQ(cut[1].start, 10);
  EXPECT_EQ(cut[1].count, 2);
  EXPECT_EQ(cut[2].start, 26);
  EXPECT_EQ(cut[2].length, 2);
}

// The manifest refuses what a reader would trip over, naming the entry.
TEST(CheckpointManifest, DamageIsRefusedWithTheEntryNamed) {
  ckpt::Manifest m;
  m.config = nlohmann::json::object();
  m.layout = "single process";
  m.data = {0, 1, 8, 16};
  m.tensors["w"] = {4, 4};
  m.files.push_back({"shard-00000.bin", 0, 64 + 64, "0", {{"w", "param", DType::F32, 0, 4, 4, 4, 64, "0"}}});
  const std::string text = ckpt::manifest_text(m);
  EXPECT_EQ(ckpt::parse_manifest(text, "m.json").files[0].blocks[0].count, 4);
  auto refused = [](const std::string& t, const std::string& words) {
    try {
      ckpt::parse_manifest(t, "m.json");
      ADD_FAILURE() << "accepted: " << t;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  std::string altered = text;
  altered.replace(altered.find("\"step\": 0"), 9, "\"step\": 9");  // valid JSON, wrong checksum
  refused(altered, "damaged");
  refused(text.substr(0, text.size() / 2), "not valid JSON");
  ckpt::Manifest future = m;
  future.version = 3;
  refused(ckpt::manifest_text(future), "newer Tripod");
  ckpt::Manifest past_end = m;
  past_end.files[0].blocks[0].count = 5;
  refused(ckpt::manifest_text(past_end), "past the end of the tensor");
  ckpt::Manifest outside = m;
  outside.files[0].bytes = 100;
  refused(ckpt::manifest_text(outside), "past the end of its 100-byte file");
  ckpt::Manifest other_tensor = m;
  other_tensor.files[0].blocks[0].tensor = "x";
  refused(ckpt::manifest_text(other_tensor), "tensor 'x'");
}

// The training tokens' XXH64 goes round the manifest; a manifest without it (written before it was
// recorded) still reads, and a malformed one is refused.
TEST(CheckpointManifest, TheTrainingTokensDigestIsOptionalAndChecked) {
  ckpt::Manifest m;
  m.config = nlohmann::json::object();
  m.layout = "single process";
  m.data = {0, 1, 8, 16, "0123456789abcdef"};
  m.tensors["w"] = {4};
  m.files.push_back({"shard-00000.bin", 0, 64 + 16, "0", {{"w", "param", DType::F32, 0, 4, 4, 1, 64, "0"}}});
  EXPECT_EQ(ckpt::parse_manifest(ckpt::manifest_text(m), "m.json").data.train_tokens_xxh64, "0123456789abcdef");
  ckpt::Manifest older = m;
  older.data.train_tokens_xxh64.clear();
  const std::string older_text = ckpt::manifest_text(older);
  EXPECT_EQ(older_text.find("train_tokens_xxh64"), std::string::npos);
  EXPECT_EQ(ckpt::parse_manifest(older_text, "m.json").data.train_tokens_xxh64, "");
  ckpt::Manifest bad = m;
  bad.data.train_tokens_xxh64 = "0123456789ABCDEF";
  EXPECT_THROW(
      {
        try {
          ckpt::parse_manifest(ckpt::manifest_text(bad), "m.json");
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("m.json: data.train_tokens_xxh64 is not 16 hex digits"),
                    std::string::npos)
              << e.what();
          throw;
        }
      },
      Error);
}

// The tokens trained and the anomaly guard's window go round the manifest; without them (written
// before 2026-12-08) it still reads, and a window holding what is no finite loss is refused.
TEST(CheckpointManifest, TokensTrainedAndTheGuardsWindowAreOptionalAndChecked) {
  ckpt::Manifest m;
  m.config = nlohmann::json::object();
  m.layout = "single process";
  m.data = {0, 1, 8, 16, "", 240};
  m.recent_losses = {4.25, 4.125};
  m.tensors["w"] = {4};
  m.files.push_back({"shard-00000.bin", 0, 64 + 16, "0", {{"w", "param", DType::F32, 0, 4, 4, 1, 64, "0"}}});
  const ckpt::Manifest read = ckpt::parse_manifest(ckpt::manifest_text(m), "m.json");
  EXPECT_EQ(read.data.tokens_trained, 240);
  EXPECT_EQ(read.recent_losses, (std::vector<double>{4.25, 4.125}));
  ckpt::Manifest older = m;
  older.data.tokens_trained = -1;
  older.recent_losses.clear();
  const std::string older_text = ckpt::manifest_text(older);
  EXPECT_EQ(older_text.find("tokens_trained"), std::string::npos);
  EXPECT_EQ(older_text.find("recent_losses"), std::string::npos);
  EXPECT_EQ(ckpt::parse_manifest(older_text, "m.json").data.tokens_trained, -1);
  EXPECT_TRUE(ckpt::parse_manifest(older_text, "m.json").recent_losses.empty());
  ckpt::Manifest bad = m;
  bad.recent_losses = {4.25, NAN};  // written as null
  EXPECT_NE(error_of([&] { ckpt::parse_manifest(ckpt::manifest_text(bad), "m.json"); })
                .find("m.json: anomaly.recent_losses holds null, not a finite loss"),
            std::string::npos);
}

// A resume checks the corpus by its tokens where both sides know them: another corpus under the same
// data.dir is a change (it resumed without a word), the same corpus under another path is not.
TEST(Checkpoint, ResumeComparesTheTrainingTokensNotTheirFolder) {
  RunConfig config = testing::tiny_run_config("fp64", false);
  ckpt::Manifest m;
  m.step = 1;
  m.dtype = config.train.dtype;
  m.config = config.json;
  m.data.train_tokens_xxh64 = "00000000000000aa";
  auto refusal = [&](const RunConfig& now, const std::string& tokens) -> std::string {
    try {
      check_resume_compatible(m, now, /*allow_changes=*/false, tokens);
      return "";
    } catch (const Error& e) {
      return e.what();
    }
  };
  EXPECT_EQ(refusal(config, "00000000000000aa"), "");
  const std::string other = refusal(config, "00000000000000bb");
  EXPECT_NE(other.find("the training tokens: XXH64 00000000000000aa in the checkpoint"), std::string::npos) << other;
  EXPECT_NE(other.find("00000000000000bb in data.dir"), std::string::npos) << other;
  EXPECT_NO_THROW(check_resume_compatible(m, config, /*allow_changes=*/true, "00000000000000bb"));
  RunConfig moved = config;
  moved.json["data"]["dir"] = "elsewhere/the-same-corpus";
  EXPECT_EQ(refusal(moved, "00000000000000aa"), "");
  // Without the tokens' digest on either side the folder's path is what is known.
  EXPECT_NE(refusal(moved, "").find("data.dir"), std::string::npos);
  m.data.train_tokens_xxh64.clear();
  EXPECT_NE(refusal(moved, "00000000000000aa").find("data.dir"), std::string::npos);
}

// AdamW's settings are part of the run like its learning rates: a resume that changed the weight
// decay or a beta went through without a word.
TEST(Checkpoint, ResumeRefusesAnotherOptimizerSetting) {
  const RunConfig config = testing::tiny_run_config("fp64", false);
  ckpt::Manifest m;
  m.step = 1;
  m.dtype = config.train.dtype;
  m.config = config.json;
  for (const auto& [key, value] : {std::pair<std::string, nlohmann::json>{"weight_decay", 0.0}, {"beta2", 0.999},
                                   {"grad_clip", 0.5}, {"eps", 1e-6}, {"decay_tensors", "all"}}) {
    RunConfig changed = config;
    changed.json["optim"][key] = value;
    try {
      check_resume_compatible(m, changed, /*allow_changes=*/false);
      ADD_FAILURE() << "optim." << key << " changed and the resume went through";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("optim." + key + ": "), std::string::npos) << e.what();
    }
    EXPECT_NO_THROW(check_resume_compatible(m, changed, /*allow_changes=*/true));
  }
  EXPECT_NO_THROW(check_resume_compatible(m, config, /*allow_changes=*/false));
}

// GPT2LMHeadModel's names: the body under "transformer.", the untied head as "lm_head.weight".
TEST(HfExport, Conv1DWeightsAreTransposedAndNamesKept) {
  const RunConfig config = testing::tiny_run_config("fp64", false);
  auto backend = testing::make_test_backend();
  Trainer trainer(config, *backend);
  trainer.initialise();
  const fs::path ckpt_dir = temp_dir("export_ckpt"), out = temp_dir("export_out");
  save(ckpt_dir, trainer, *backend, config);
  ExportReport report = export_hf_checkpoint(ckpt_dir, out, DType::F64, *backend);
  EXPECT_EQ(report.tensors, static_cast<int64_t>(trainer.params().size()));
  ckpt::SafetensorsFile file = ckpt::SafetensorsFile::read(out / "model.safetensors");
  const ckpt::HostTensor& c_fc = file.get("transformer.h.1.mlp.c_fc.weight");
  EXPECT_EQ(c_fc.shape, (Shape{8, 16}));  // [in, out]
  const std::vector<double> ours = to_host_f64(*backend, trainer.params()["h.1.mlp.c_fc.weight"]);  // [16, 8]
  EXPECT_EQ(c_fc.as<double>()[3 * 16 + 5], ours[5 * 8 + 3]);
  EXPECT_EQ(file.get("transformer.wte.weight").shape, (Shape{11, 8}));
  EXPECT_TRUE(file.contains("lm_head.weight"));
  EXPECT_FALSE(file.contains("wte.weight") || file.contains("transformer.lm_head.weight"));
  EXPECT_TRUE(fs::exists(out / "config.json"));
  fs::remove_all(ckpt_dir);
  fs::remove_all(out);
}

}  // namespace
}  // namespace tripod
