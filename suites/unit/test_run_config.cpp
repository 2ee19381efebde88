// Configuration loading: presets, overrides, and clear errors for contradictory or unknown input.
#include <gtest/gtest.h>

#include <fstream>

#include "support/error_text.h"
#include "train/run_config.h"

namespace tripod {
namespace {

RunConfig with(std::vector<std::string> overrides) { return parse_run_config(load_config_json("", overrides)); }

TEST(RunConfig, PresetsLoadAndValidate) {
  for (const char* preset : {"tiny", "small", "gpt2-124m"}) {
    RunConfig c = parse_run_config(load_config_json(preset, {}));
    EXPECT_GT(c.train.steps, 0) << preset;
  }
  RunConfig gpt2 = parse_run_config(load_config_json("gpt2-124m", {}));
  EXPECT_EQ(gpt2.model.n_layer, 12);
  EXPECT_EQ(gpt2.model.d_model, 768);
}

TEST(RunConfig, OverridesApplyWithTypes) {
  RunConfig c = with({"train.steps=7", "optim.lr=0.5", "model.tie_embeddings=false", "train.dtype=fp64"});
  EXPECT_EQ(c.train.steps, 7);
  EXPECT_DOUBLE_EQ(c.schedule.max_lr, 0.5);
  EXPECT_FALSE(c.model.tie_embeddings);
  EXPECT_EQ(c.train.dtype, DType::F64);
  EXPECT_EQ(c.schedule.total_steps, 7);
}

TEST(RunConfig, UnknownKeyIsNamed) {
  EXPECT_NE(error_of([] { with({"train.stepz=3"}); }).find("unknown config key 'train.stepz'"), std::string::npos);
  // the keys the object takes, so that a user need not read the source for them
  const std::string model_key = error_of([] { with({"model.n_embd=96"}); });
  EXPECT_NE(model_key.find("unknown config key 'model.n_embd' (model takes "), std::string::npos) << model_key;
  EXPECT_NE(model_key.find("d_model"), std::string::npos) << model_key;
  EXPECT_NE(model_key.find("n_head"), std::string::npos) << model_key;
  EXPECT_NE(error_of([] { with({"trian.steps=3"}); }).find("(the top level takes "), std::string::npos);
  EXPECT_NE(error_of([] { with({"modle.n_layer=3"}); }).find("'modle'"), std::string::npos);
}

TEST(RunConfig, AKeyWithAnEmptyPartIsMalformedNotAnEndlessLoop) {
  // ".steps=1" looped forever (searching back for a dot from position npos wrapped around).
  for (const std::string key : {".steps", "train.", "train..steps", ".", "..steps"})
    EXPECT_NE(error_of([&] { with({key + "=1"}); }).find("--set: malformed key '" + key + "'"), std::string::npos)
        << key;
  EXPECT_EQ(with({"train.steps=5"}).train.steps, 5);
}

TEST(RunConfig, WrongTypeIsNamed) {
  EXPECT_NE(error_of([] { with({"train.steps=\"ten\""}); }).find("train.steps"), std::string::npos);
  // An integer key given a real says "integer" (json's type names call both "number").
  EXPECT_NE(error_of([] { with({"train.steps=1.5"}); }).find("'train.steps' should be an integer, got a number (1.5)"),
            std::string::npos);
  EXPECT_NE(error_of([] { with({"model.tie_embeddings=1"}); }).find("should be true or false, got an integer (1)"),
            std::string::npos);
}

TEST(RunConfig, ContradictionsAreNamed) {
  EXPECT_NE(error_of([] { with({"model.n_head=3", "model.d_model=64", "model.vocab_size=100"}); }).find("does not divide"),
            std::string::npos);
  EXPECT_NE(error_of([] { with({"train.seq_len=128", "model.context=64"}); }).find("model.context"), std::string::npos);
  EXPECT_NE(error_of([] { with({"train.micro_batches=3", "train.batch_size=8"}); }).find("train.micro_batches"),
            std::string::npos);
  EXPECT_NE(error_of([] { with({"optim.min_lr=1", "optim.lr=0.1"}); }).find("optim.min_lr"), std::string::npos);
  EXPECT_NE(error_of([] { with({"optim.decay=step"}); }).find("step"), std::string::npos);
  EXPECT_NE(error_of([] { with({"train.dtype=fp16"}); }).find("fp16"), std::string::npos);
  EXPECT_NE(error_of([] { load_config_json("no-such-preset", {}); }).find("no-such-preset"), std::string::npos);
  EXPECT_NE(error_of([] { with({"justakey"}); }).find("key=value"), std::string::npos);
  // batch x sequence overflowed int64 and reached the allocator as a negative shape.
  EXPECT_NE(error_of([] { with({"train.batch_size=9223372036854775807"}); })
                .find("train.batch_size x train.seq_len (9223372036854775807 x 64) is more than 2^40 tokens a step"),
            std::string::npos);
  EXPECT_NO_THROW(with({"train.batch_size=16384", "train.seq_len=64", "model.context=64"}));
  // Trained with before: an AdamW eps or weight decay below 0.
  EXPECT_NE(error_of([] { with({"optim.eps=-1"}); }).find("optim.eps must be > 0 (got -1)"), std::string::npos);
  // eps = 0 divided 0 by 0 in every weight not yet given a gradient: NaN after the first update.
  EXPECT_NE(error_of([] { with({"optim.eps=0"}); }).find("optim.eps must be > 0 (got 0): with 0, a weight"),
            std::string::npos);
  EXPECT_NE(error_of([] { with({"optim.weight_decay=-0.1"}); }).find("optim.weight_decay must be >= 0 (got -0.1)"),
            std::string::npos);
  EXPECT_NO_THROW(with({"optim.eps=1e-30", "optim.weight_decay=0"}));
  // A negative seed wrapped to 2^64 minus it and trained as that seed, silently.
  EXPECT_NE(error_of([] { with({"train.seed=-1"}); }).find("train.seed must be >= 0 (got -1)"), std::string::npos);
  EXPECT_NO_THROW(with({"train.seed=0"}));
  EXPECT_NO_THROW(with({"train.seed=18446744073709551615"}));
  EXPECT_NE(error_of([] { with({"anomaly.skip_batches=9223372036854775807"}); })
                .find("anomaly.skip_batches must be in [0, 2^20] (got 9223372036854775807)"),
            std::string::npos);
  // A negative stated peak was taken as "none stated": MFU against the device table's, silently.
  EXPECT_NE(error_of([] { with({"train.peak_tflops=-1"}); }).find("train.peak_tflops must be >= 0 (0: the device's"),
            std::string::npos);
  EXPECT_NO_THROW(with({"train.peak_tflops=0"}));
  // d_ff = 2^63 - 1 overflowed the parameter offsets and ended in a view error naming nothing.
  EXPECT_NE(error_of([] { with({"model.d_ff=9223372036854775807", "model.vocab_size=100"}); })
                .find("model.d_ff (9223372036854775807) is more than 2^31 - 1"),
            std::string::npos);
  EXPECT_NE(error_of([] { with({"model.n_layer=100000000", "model.d_model=65536", "model.vocab_size=100"}); })
                .find("parameters (model.n_layer x (4 d_model^2 + 2 d_model d_ff) + d_model x (vocab_size + context)), "
                      "more than 2^48"),
            std::string::npos);
}

TEST(RunConfig, CountsPastIntAreKeptOrRefusedNotWrapped) {
  // keep_checkpoints was an int: 4294967298 kept 2 checkpoints, 2147483648 was "must be >= 1".
  EXPECT_EQ(with({"train.keep_checkpoints=4294967298"}).train.keep_checkpoints, 4294967298);
  EXPECT_EQ(with({"train.keep_checkpoints=2147483648"}).train.keep_checkpoints, 2147483648);
  // 2^62 evaluation batches: an evaluation that would never end.
  EXPECT_NE(error_of([] { with({"train.eval_batches=4611686018427387904"}); }).find("is more than 2^40 tokens an evaluation"),
            std::string::npos);
}

TEST(RunConfig, ADirectoryIsNotAConfigFile) {
  // Read as a stream, a directory failed as "internal error: basic_filebuf::underflow".
  const std::string dir = ::testing::TempDir();
  EXPECT_NE(error_of([&] { load_config_json(dir, {}); }).find("config '" + dir + "' is a directory, not a JSON file"),
            std::string::npos);
}

TEST(RunConfig, AKeyTwiceInAConfigFileIsNamed) {
  // JSON keeps the last of two equal keys: a hand-edited file ran with whichever came second.
  const std::string path = ::testing::TempDir() + "/twice.json";
  for (const auto& [text, key] : std::vector<std::pair<std::string, std::string>>{
           {R"({"model": {"n_layer": 2}, "model": {"n_layer": 3}})", "model"},
           {R"({"model": {"n_layer": 2, /* kept */ "n_head": 2, "n_layer": 3}})", "model.n_layer"},
           {R"({"train": {"steps": 3}, "optim": {"lr": 1e-3, "betas": [{"a": 1, "a": 2}]}})", "optim.betas.a"}}) {
    std::ofstream(path) << text;
    EXPECT_NE(error_of([&] { load_config_json(path, {}); })
                  .find("config file " + path + ": key '" + key + "' appears twice"),
              std::string::npos)
        << text;
  }
  std::ofstream(path) << R"({"model": {"n_layer": 2}, "train": {"steps": 3}, "optim": {"lr": 1e-3}})";
  EXPECT_EQ(parse_run_config(load_config_json(path, {})).model.n_layer, 2);  // the same key in two objects is fine
}

TEST(RunConfig, ASyntaxErrorInAConfigFileIsPlacedByLineAndColumn) {
  // It said "is not valid JSON" and no more: a trailing comma in a long file was left to be found.
  const std::string path = ::testing::TempDir() + "/comma.json";
  std::ofstream(path) << "{\n  \"model\": {\"n_layer\": 2,}\n}";
  const std::string error = error_of([&] { load_config_json(path, {}); });
  EXPECT_NE(error.find("config file " + path + ": not valid JSON ("), std::string::npos) << error;
  EXPECT_NE(error.find("at line 2, column 26"), std::string::npos) << error;
}

}  // namespace
}  // namespace tripod
