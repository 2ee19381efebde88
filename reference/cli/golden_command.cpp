// tripod golden --config FILE --steps K --out DIR [--set key=value]...   cut a golden bundle
// tripod golden run BUNDLE --precision fp32|fp64 --out RESULTS.json [--layout NAME]   Tripod as a peer
// tripod golden check BUNDLE RESULTS.json [--json OUT]   compare a peer's results (reports/golden/check.py)
// The bundle and results formats: reports/FORMATS.md; golden/ builds and replays bundles.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "backend/backend_factory.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/output_file.h"
#include "golden/bundle.h"
#include "golden/golden_replay.h"
#include "golden/golden_writer.h"
#include "process/python_module.h"

namespace tripod::cli {
namespace {

struct GoldenWriteOptions {
  std::string config = "tiny";
  std::vector<std::string> overrides;
  int64_t steps = 8;
  std::string out, backend = "cpu";
};

struct GoldenCheckOptions {
  std::string bundle, results, json_out, python = process::default_python();
};

void write_bundle(const GoldenWriteOptions& o) {
  check(!o.out.empty(), "golden: --out DIR is required (or use `golden run` / `golden check`)");
  const RunConfig config = parse_run_config(load_config_json(o.config, o.overrides));
  auto backend = make_backend(o.backend);
  const golden::GoldenWriteSummary s = golden::write_golden_bundle(config, o.steps, o.out, *backend);
  std::printf("golden bundle: %lld steps of %lld tokens, %lld parameters; fp64 loss %.6f -> %.6f; Tripod's fp32 "
              "within %.1e of its fp64 -> %s\n",
              static_cast<long long>(s.steps), static_cast<long long>(s.tokens_per_step),
              static_cast<long long>(s.parameters), s.first_loss, s.last_loss, s.fp32_worst_loss_rel_error,
              o.out.c_str());
  if (s.steps > golden::kFp32StepsWithinTolerance)
    std::printf("note: beyond %lld steps an fp32 peer's rounding drift (amplified by AdamW) outgrows the fp32 "
                "tolerance; check fp32 peers on a shorter bundle, or compare in fp64\n",
                static_cast<long long>(golden::kFp32StepsWithinTolerance));
  std::printf("next: a peer trains from it (reports/peers/), then tripod golden check %s RESULTS.json\n", o.out.c_str());
}

void add_run(CLI::App& golden) {
  auto o = std::make_shared<golden::ReplayOptions>();
  auto* cmd = golden.add_subcommand("run", "train a bundle's steps with Tripod in any layout; write peer results");
  cmd->add_option("bundle", o->bundle, "a golden bundle directory")->required();
  cmd->add_option("--precision", o->precision, "fp32 or fp64")
      ->check(CLI::IsMember({"fp32", "fp64"}))
      ->capture_default_str();
  // A results file, checked before training: a folder given here failed after the training, leaving
  // its parameter files and a .tmp beside it.
  cmd->add_option("--out", o->out, "RESULTS.json (parameters after steps 1 and K are written beside it)")
      ->required()
      ->each([](const std::string& value) { check_output_path(value, "--out"); });
  cmd->add_option("--layout", o->layout,
                  "a parallel layout by name, e.g. tp2-pp1-dp2-z1-mb2 (default: data parallel over every rank)");
  add_backend_option(*cmd, o->backend);
  add_comm_options(*cmd, o->comm);
  cmd->callback([o] { golden::replay_golden_bundle(*o); });
}

// The checker prints its verdict (or what it could not read); its exit status is the command's
// (1: DIFFERS, 2: results that cannot be read). Exit 0 alone is not a MATCH: the verdict it writes
// as JSON (--json, or a temporary file) must exist, be new and say "match" (a --python that is not
// an interpreter with the checker exited 0 and the command reported nothing wrong).
void run_golden_check(const GoldenCheckOptions& o) {
  namespace fs = std::filesystem;
  const bool temporary = o.json_out.empty();
  const std::string verdict_path =
      temporary ? (fs::temp_directory_path() / ("tripod-golden-check-" + std::to_string(::getpid()) + ".json")).string()
                : o.json_out;
  struct RemoveAtEnd {
    std::string path;
    ~RemoveAtEnd() {
      std::error_code ec;
      if (!path.empty()) fs::remove(path, ec);
    }
  } cleanup{temporary ? verdict_path : ""};
  // The bundle's files against the sizes and digests bundle.json records, first: a damaged
  // reference made a correct peer DIFFER. An unusable bundle is exit status 2, as the checker's.
  // (A bundle.json that cannot be read is left to the checker, which names what is wrong with it.)
  std::ifstream meta_in(fs::path(o.bundle) / golden::kBundleJson);
  const nlohmann::json meta = nlohmann::json::parse(meta_in, nullptr, /*allow_exceptions=*/false);
  if (meta.is_object()) {
    try {
      golden::verify_bundle_files(o.bundle, meta);
    } catch (const Error& e) {
      std::fprintf(stderr, "golden check: bad bundle: %s\n", e.what());
      throw ReportedFailure(2);
    }
  }
  const std::vector<std::string> args = {o.bundle, o.results, "--json", verdict_path};
  if (const int status = process::run_python_module_writing(o.python, "reports.golden.check", args, verdict_path);
      status != 0)
    throw ReportedFailure(status);
  std::ifstream in(verdict_path);
  const nlohmann::json verdict = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  check(verdict.is_object() && verdict.value("verdict", "") == "match", "golden check: ", o.python,
        " exited 0 but its verdict (", verdict_path, ") does not say match");
}

void add_check(CLI::App& golden) {
  auto o = std::make_shared<GoldenCheckOptions>();
  auto* cmd = golden.add_subcommand("check", "compare a peer's results with a bundle's reference, per step and tensor");
  cmd->add_option("bundle", o->bundle, "a golden bundle directory")->required();
  cmd->add_option("results", o->results, "the peer's RESULTS.json (reports/FORMATS.md section 2)")->required();
  add_output_option(*cmd, "--json", o->json_out, "also write the verdict as JSON here");
  cmd->add_option("--python", o->python, "Python with numpy")->capture_default_str();
  cmd->callback([o] { run_golden_check(*o); });
}

}  // namespace

void add_golden_commands(CLI::App& app) {
  auto o = std::make_shared<GoldenWriteOptions>();
  auto* golden = app.add_subcommand("golden", "golden bundles: what another framework needs to reproduce a short run");
  golden->require_subcommand(0, 1);
  golden->add_option("-c,--config", o->config, "preset name (tiny, small, gpt2-124m) or JSON config file")
      ->capture_default_str();
  golden->add_option("--set", o->overrides, "override a config key, e.g. --set train.batch_size=4 (repeatable)");
  require_positive(golden->add_option("--steps", o->steps, "K: the steps recorded")->capture_default_str());
  golden->add_option("--out", o->out, "the bundle directory (new or empty)");
  add_backend_option(*golden, o->backend);
  add_run(*golden);
  add_check(*golden);
  golden->callback([o, golden] {
    if (golden->get_subcommands().empty()) write_bundle(*o);
  });
}

}  // namespace tripod::cli
