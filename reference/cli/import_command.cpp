// tripod import nccl-tests FILE --out X.json [--collective NAME]   an nccl-tests table -> kind "comm"
// tripod import megatron FILE --out X.json                          a Megatron-LM training log -> "train"
// tripod import torchtitan FILE --out X.json                        a torchtitan training log -> "train"
// tripod import tripod-metrics FILE --out X.json                    Tripod's own metrics.jsonl -> "train"
// Other tools' output in the schema of Tripod's own results (reports/FORMATS.md section 3), so that
// `tripod report` can set them side by side. The parsing is the Python package reports/importers/,
// run as a module; it prints "FILE:LINE: message" for a line it cannot read.
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "process/python_module.h"

namespace tripod::cli {
namespace {

struct ImportOptions {
  std::string file;
  std::string out;
  std::string collective;  // nccl-tests only
  std::string python = process::default_python();
};

void add_kind(CLI::App& import, const std::string& kind, const std::string& description) {
  auto o = std::make_shared<ImportOptions>();
  auto* cmd = import.add_subcommand(kind, description);
  cmd->add_option("file", o->file, "the tool's output or log")->required()->check(CLI::ExistingFile);
  // Checked when the command line is parsed, as every results file is (its folder must exist).
  add_output_option(*cmd, "--out", o->out, "the JSON document to write (its folder must exist)")->required();
  if (kind == "nccl-tests") {
    cmd->add_option("--collective", o->collective,
                    "the collective (all_reduce, ...) when the output does not name it (nccl-tests before mid-2025)"
                    " and the file name does not either");
  }
  cmd->add_option("--python", o->python, "the Python that runs reports/importers")->capture_default_str();
  cmd->callback([o, kind] {
    std::vector<std::string> args = {kind, o->file, "--out", o->out};
    if (!o->collective.empty()) args.insert(args.end(), {"--collective", o->collective});
    const int code = process::run_python_module_writing(o->python, "reports.importers", args, o->out);
    // The importer has already printed which line it could not read; this says which command failed.
    TRIPOD_CHECK(code == 0, "import ", kind, " ", o->file, " failed (exit status ", code, "): nothing written to ",
                 o->out);
  });
}

}  // namespace

void add_import_command(CLI::App& app) {
  auto* import = app.add_subcommand("import", "read another tool's output into Tripod's results schema (JSON)");
  import->require_subcommand(1);
  add_kind(*import, "nccl-tests", "an nccl-tests table (all_reduce_perf, ...): rows like `tripod bench comm`'s");
  add_kind(*import, "megatron", "a Megatron-LM training log: loss, lr, grad norm, step time, TFLOP/s per step");
  add_kind(*import, "torchtitan", "a torchtitan training log: loss, grad norm, memory, tps, tflops, mfu per step");
  add_kind(*import, "tripod-metrics", "Tripod's own metrics.jsonl, steps counted from 1 like the others");
}

}  // namespace tripod::cli
