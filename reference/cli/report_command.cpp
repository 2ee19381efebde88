// tripod report DIR [--out HTML] [--extra PATH ...] [--check] [--python P]
// One self-contained HTML page (figures embedded) from a results directory: bench, conform, scaling
// sweeps, training metrics, imported peers and golden checks, each found by its content. The page is
// built by reports/report/ (what it reads: reports/report/__init__.py); --check then renders it in
// headless Chromium (reports/report/render_check.py) and fails on a broken image, a console error,
// a blank render or a screenshot of the wrong size.
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "process/python_module.h"

namespace tripod::cli {
namespace {

struct ReportOptions {
  std::string dir;
  std::string out;  // empty: DIR/report.html
  std::vector<std::string> extra;
  bool check = false;
  std::string python = process::default_python();
};

void run_report(const ReportOptions& opts) {
  const std::string out = opts.out.empty() ? (std::filesystem::path(opts.dir) / "report.html").string() : opts.out;
  std::vector<std::string> args = {opts.dir, "--out", out};
  if (!opts.extra.empty()) {
    args.emplace_back("--extra");
    args.insert(args.end(), opts.extra.begin(), opts.extra.end());
  }
  const int status = process::run_python_module_writing(opts.python, "reports.report", args, out);
  check(status == 0, "tripod report: building ", out, " failed (", opts.python, " -m reports.report exited with ",
        status, ")");
  if (!opts.check) return;
  // The screenshot lands beside the page (report.png), where CI keeps it as an artifact.
  const int rendered = process::run_python_module(opts.python, "reports.report.render_check", {out});
  check(rendered == 0, "tripod report --check: ", out,
        rendered == 2 ? " could not be rendered: chromium is missing (run ci/setup.sh)"
                      : " does not render cleanly in headless Chromium (the reasons are printed above)");
}

}  // namespace

void add_report_command(CLI::App& app) {
  auto opts = std::make_shared<ReportOptions>();
  auto* cmd = app.add_subcommand("report", "one self-contained HTML page of figures from a results directory");
  cmd->add_option("dir", opts->dir, "results directory (bench/, conform.json, sweeps, metrics.jsonl, imported/, golden/)")
      ->required()
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--out", opts->out, "the HTML file to write (default: DIR/report.html)");
  cmd->add_option("--extra", opts->extra,
                  "more inputs from elsewhere: imported results (`tripod import`), metrics.jsonl, sweep directories");
  cmd->add_flag("--check", opts->check,
                "render the page in headless Chromium and fail on a broken image, a console error or a blank render");
  cmd->add_option("--python", opts->python, "Python with numpy and matplotlib")->capture_default_str();
  cmd->callback([opts] { run_report(*opts); });
}

}  // namespace tripod::cli
