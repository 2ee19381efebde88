// tripod: the command-line program. Subcommands live in their own files (see commands.h).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <utility>

#include "backend/backend_factory.h"
#include "backend/cpu/blas_kernels.h"
#include "cli/commands.h"
#include "core/crash_report.h"
#include "core/error.h"
#include "core/host_cpus.h"
#include "core/output_file.h"
#include "parallel/launch.h"
#include "process/openmp_wait_policy.h"

namespace tripod::cli {

void add_backend_option(CLI::App& command, std::string& name) {
  command.add_option("--backend", name, "where tensors live and compute: " + backend_names_text() +
                                            " (emulated: CPU arithmetic on device-tagged memory, staged collectives)")
      ->capture_default_str();
}

void add_comm_options(CLI::App& command, CommSettings& comm) {
  command.add_option("--comm", comm.kind,
                     "the communicator: " + comm_kind_names_text() +
                         " (auto: nccl for --backend cuda, staged for other devices, mpi for the CPU;"
                         " staged lets several ranks share one GPU)")
      ->capture_default_str();
  command.add_option("--comm-timeout", comm.timeout_seconds,
                     "seconds any rank may wait for its peers in one collective or message before the job"
                     " ends with the operation, group and rank named (0: never)")
      ->capture_default_str();
  command.add_option("--mpi-progress-us", comm.progress_us,
                     "run an MPI progress thread that polls every N microseconds while non-blocking operations"
                     " are in flight (0: none; helps only where cores are left idle: measure with bench overlap)")
      ->capture_default_str();
  command.add_option("--mpi-chunk-mb", comm.mpi_chunk_mb,
                     "MPI all-reduces and reduce-scatters larger than this go as a sequence of pieces, which bounds"
                     " Open MPI's temporaries (it allocates up to twice the message per call; 0: whole messages)")
      ->capture_default_str();
}

namespace {

CLI::Option* require_number(CLI::Option* option, bool zero_allowed) {
  const std::string name = option->get_name();
  return option->each([name, zero_allowed](const std::string& text) {
    char* end = nullptr;
    const double value = std::strtod(text.c_str(), &end);
    if (end == text.c_str() || *end != '\0') return;  // not a number at all: CLI11's conversion says so
    check(std::isfinite(value) && (zero_allowed ? value >= 0 : value > 0), name, ": ", text,
          " is not a finite number ", zero_allowed ? ">= 0" : "> 0");
  });
}

}  // namespace

CLI::Option* require_positive(CLI::Option* option) { return require_number(option, false); }
CLI::Option* require_non_negative(CLI::Option* option) { return require_number(option, true); }

CLI::Option* add_output_option(CLI::App& command, const std::string& names, std::string& path,
                               const std::string& description) {
  const std::string option = names.substr(names.rfind(',') + 1);  // "-J,--json" -> "--json"
  return command.add_option(names, path, description)->each([option](const std::string& value) {
    check_output_path(value, option);
  });
}

}  // namespace tripod::cli

namespace {

// "rank 1 of 4: " under a multi-rank launcher (known from its environment, MPI or not), else "".
std::string launch_rank_prefix() {
  try {
    const tripod::LaunchInfo launch = tripod::detect_launch();
    if (launch.world_size > 1)
      return "rank " + std::to_string(launch.rank) + " of " + std::to_string(launch.world_size) + ": ";
  } catch (const tripod::Error&) {  // a malformed launcher variable: the error itself says more
  }
  return "";
}

// An option given an empty value ("--save ''", or an unset shell variable) is refused. Several
// took "" for "not given": `--save ""` trained without a checkpoint, `--resume ""` started from
// step 0, `--config ""` trained the built-in defaults, `schedule --json ""` wrote nothing, all with
// exit 0. Positional arguments are left alone (a launched command may take "" on purpose).
void refuse_empty_values(CLI::App& app) {
  for (CLI::Option* option : app.get_options([](CLI::Option* o) { return !o->get_positional(); })) {
    if (option->get_type_size() == 0) continue;  // a flag
    const std::string name = option->get_name();
    option->each([name](const std::string& value) {
      tripod::check(!value.empty(), name, ": an empty value (an unset shell variable?): give one, or leave ", name,
                    " out");
    });
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) refuse_empty_values(*sub);
}

// A huge OMP_NUM_THREADS crashed inside the OpenMP runtime at the first parallel region
// (OMP_NUM_THREADS=100000: a segfault, no message); tens of threads per CPU only slow a rank down.
void check_omp_num_threads() {
  const char* env = std::getenv("OMP_NUM_THREADS");
  if (env == nullptr || *env == '\0') return;
  const int cores = tripod::available_cores();
  const int most = std::max(256, 16 * cores);
  tripod::check(omp_get_max_threads() <= most, "OMP_NUM_THREADS=", env, " asks for ", omp_get_max_threads(),
                " threads, and this process may use ", cores, " CPU(s) (at most ", most,
                " threads are accepted): unset it, and the ranks of a machine share its cores by themselves");
}

}  // namespace

// For "A subcommand is required" when a word was given that is none: CLI11 did not name the word.
// Returns "" when the error is not that one.
// `commands_optional`: the command also runs without a subcommand (`bench`, `golden`), so a
// mistyped one reached CLI11 as an unexpected argument ("The following argument was not expected:
// comms", exit 109) instead of this list.
std::string unknown_subcommand_message(CLI::App& app, bool commands_optional = false) {
  CLI::App* at = &app;
  while (!at->get_subcommands().empty()) at = at->get_subcommands().front();
  const std::vector<std::string> extra = at->remaining();
  if (extra.empty() || extra.front().starts_with("-")) return "";
  if (at->get_require_subcommand_min() == 0 &&
      (!commands_optional || at->get_subcommands([](const CLI::App*) { return true; }).empty()))
    return "";
  std::string names;
  for (const CLI::App* sub : at->get_subcommands([](const CLI::App*) { return true; }))
    names += (names.empty() ? "" : ", ") + sub->get_name();
  const std::string command = at == &app ? "tripod" : "tripod " + at->get_name();
  return "tripod: error: '" + extra.front() + "' is not a command of `" + command + "`: one of " + names +
         " (see `" + command + " --help`)";
}

int main(int argc, char** argv) {
  // Settings libgomp and OpenBLAS read when loaded: tripod executes itself again with them, at once.
  tripod::EnvironmentSettings settings = tripod::openmp_spinning_settings();
  for (auto& setting : tripod::cpu::openblas_kernel_settings()) settings.push_back(std::move(setting));
  tripod::execute_again_with(settings, argv);
  tripod::install_crash_report("tripod");  // a fatal signal prints the stack (core/crash_report.h)
  CLI::App app{"tripod: a reference 3D-parallel GPT trainer and its conformance and benchmark suite"};
  app.require_subcommand(1);
  tripod::cli::add_train_command(app);
  tripod::cli::add_data_commands(app);
  tripod::cli::add_export_commands(app);
  tripod::cli::add_ckpt_commands(app);
  tripod::cli::add_bench_commands(app);
  tripod::cli::add_scale_commands(app);
  tripod::cli::add_conform_command(app);
  tripod::cli::add_schedule_command(app);
  tripod::cli::add_check_backend_command(app);
  tripod::cli::add_launch_command(app);
  tripod::cli::add_golden_commands(app);
  tripod::cli::add_import_command(app);
  tripod::cli::add_report_command(app);
  tripod::cli::add_version_flag(app);
  refuse_empty_values(app);
  try {
    check_omp_num_threads();
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // A required subcommand missing, or (commands that also run without one) an unexpected word:
    // when it is a mistyped command, name it and list the commands.
    const bool extra = dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr;
    const std::string unknown = extra || dynamic_cast<const CLI::RequiredError*>(&e)
                                    ? unknown_subcommand_message(app, /*commands_optional=*/extra)
                                    : "";
    if (unknown.empty()) return app.exit(e);
    std::fprintf(stderr, "%s\n", unknown.c_str());
    return e.get_exit_code();
  } catch (const tripod::ReportedFailure& e) {
    return e.exit_status;
  } catch (const tripod::Error& e) {
    // An empty message means the error was already reported (with its rank) where it happened.
    if (*e.what() != '\0') std::fprintf(stderr, "tripod: error: %s%s\n", launch_rank_prefix().c_str(), e.what());
    return 1;
  } catch (const std::filesystem::filesystem_error& e) {
    // A path the user gave that cannot be made or read (a file where a directory should be, no
    // permission, a full disk): input, not a bug. Its text names the operation, reason and paths.
    std::fprintf(stderr, "tripod: error: %s%s\n", launch_rank_prefix().c_str(), e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tripod: internal error: %s\n", e.what());
    return 2;
  }
  return 0;
}
