#include "bench/suite.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "backend/backend_factory.h"
#include "bench/suite_ranks.h"
#include "comm/world.h"
#include "core/build_info.h"
#include "core/error.h"
#include "core/folder_writer_lock.h"
#include "core/host_cpus.h"
#include "core/output_file.h"
#include "parallel/launch.h"
#include "perf/nvml_reader.h"
#include "process/child_process.h"

namespace tripod::bench {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

// The launcher as an executable path: as given if it has a slash, else the first match on PATH.
fs::path find_program(const std::string& name) {
  if (name.find('/') != std::string::npos) {
    check(::access(name.c_str(), X_OK) == 0, "--mpirun ", name, " is not an executable file");
    return name;
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  for (std::size_t start = 0; start <= dirs.size();) {
    const std::size_t end = std::min(dirs.find(':', start), dirs.size());
    const fs::path candidate = fs::path(dirs.substr(start, end - start)) / name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  fail("'", name, "' was not found on PATH (install openmpi-bin, or pass --mpirun PATH)");
}

json read_json(const fs::path& path) {
  std::ifstream in(path);
  if (!in.good()) return json::object();
  json j = json::parse(in, nullptr, false);
  return j.is_discarded() ? json::object() : j;
}

void print_summary(const json& bench) {
  std::printf("\nsummary\n");
  const json& comm = bench.value("comm", json::object());
  struct BestRow {
    double busbw = 0;
    int64_t size = 0;
    double on_cpu = 1;  // the least share of a CPU of its ranks (bench comm's on_cpu; 1 if not measured)
  };
  std::map<std::string, BestRow> best;
  for (const auto& r : comm.value("results", json::array()))
    if (r["busbw"].get<double>() > best[r["collective"]].busbw) {
      const json on_cpu = r.value("on_cpu", json());
      best[r["collective"]] = {r["busbw"], r["size"], on_cpu.is_number() ? on_cpu.get<double>() : 1.0};
    }
  for (const auto& [name, b] : best) {
    std::printf("  best busbw %-16s %8.2f GB/s at %lld bytes", name.c_str(), b.busbw, static_cast<long long>(b.size));
    // A figure from ranks held off their cores is the machine's load, not its transport: say so.
    if (b.on_cpu < kSharedCpuShare) std::printf(" (ranks on a CPU %.0f%% of it: cores shared, figure low)", 100 * b.on_cpu);
    std::printf("\n");
  }
  const json& gemm = bench.value("gemm", json::object());
  if (gemm.contains("sgemm_best"))
    std::printf("  best sgemm                  %8.3f TFLOP/s at n=%d (%.0f%% of %s)\n",
                gemm["sgemm_best"]["tflops"].get<double>(), gemm["sgemm_best"]["size"].get<int>(),
                gemm["sgemm_best"]["pct_of_peak"].get<double>(), gemm["peak"].value("fp32_source", "peak").c_str());
  const json* best_rate = nullptr;  // a GPU's GEMM rate (bench gemm-rate)
  for (const auto& r : bench.value("gemm_rate", json::object()).value("results", json::array()))
    if (!best_rate || r.value("median_tflops", 0.0) > best_rate->value("median_tflops", 0.0)) best_rate = &r;
  if (best_rate)
    std::printf("  best GEMM rate %-13s %8.1f TFLOP/s median\n", best_rate->value("name", "").c_str(),
                best_rate->value("median_tflops", 0.0));
  for (const auto& r : bench.value("layouts", json::object()).value("layouts", json::array()))
    std::printf("  MFU %-23s %8.2f%%  (%.0f tokens/s)\n", r["layout"].get<std::string>().c_str(),
                100 * r["mfu"].get<double>(), r["tokens_per_second"].get<double>());
  for (const auto& r : bench.value("pipeline", json::object()).value("results", json::array()))
    std::printf("  bubble %-11s p=%d m=%-3d %6.3f measured, %6.3f theory\n", r["schedule"].get<std::string>().c_str(),
                r["stages"].get<int>(), r["microbatches"].get<int>(), r["measured_bubble"].get<double>(),
                r["theoretical_bubble"].get<double>());
}

// One benchmark step: a child process whose output goes to `log` in the output directory.
struct Step {
  std::string label, log;
  fs::path program;
  std::vector<std::string> args;
  std::map<std::string, std::string> env;
};

// The environment of the multi-rank steps: the cores shared evenly among the ranks, which wait
// passively so that oversubscribed ranks do not spin against each other.
std::map<std::string, std::string> mpi_environment(int cores, int ranks) {
  std::map<std::string, std::string> mpi_env = {{"OMP_NUM_THREADS", std::to_string(std::max(1, cores / ranks))},
                                                {"OMP_WAIT_POLICY", "PASSIVE"}};
  if (::geteuid() == 0) {  // Open MPI refuses root without these
    mpi_env["OMPI_ALLOW_RUN_AS_ROOT"] = "1";
    mpi_env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1";
  }
  return mpi_env;
}

// The suite's steps in run order; --quick shrinks every sweep, and every step gets the backend.
std::vector<Step> plan_steps(const SuiteOptions& o, const fs::path& out, const fs::path& self, const fs::path& mpirun,
                             int ranks, const std::map<std::string, std::string>& mpi_env) {
  const std::vector<std::string> mpi = {"--oversubscribe", "--mca", "btl", "self,vader", "--timeout", "900", "-np",
                                        std::to_string(ranks), self.string()};
  auto with = [](std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  std::vector<Step> steps = {
      {"GEMM sweep", "gemm.log", self, {"bench", "gemm", "--json", (out / "bench.json").string()}, {}},
      {"kernel sweep", "kernels.log", self, {"bench", "kernels", "--json", (out / "bench.json").string()}, {}},
      {"collective sweep", "comm.log", mpirun,
       with(mpi, {"bench", "comm", "all", "-b", "8", "-e", o.quick ? "4M" : "256M", "-f", o.quick ? "4" : "2", "-n",
                  o.quick ? "5" : "20", "-w", o.quick ? "2" : "5", "--json", (out / "comm.json").string()}),
       mpi_env},
      {"training layouts", "layouts.log", mpirun,
       with(mpi, o.quick ? std::vector<std::string>{"bench", "layouts", "--config", "tiny", "--seq-len", "64", "--zero",
                                                    "0", "3", "--steps", "2", "--json", (out / "layouts.json").string()}
                         : std::vector<std::string>{"bench", "layouts", "--config", "small", "--json",
                                                    (out / "layouts.json").string()}),
       mpi_env},
      {"pipeline bubble", "pipeline.log", mpirun,
       with(mpi, {"bench", "pipeline", "--microbatches", o.quick ? "4" : "4,8,16", "--forward-ms", o.quick ? "5" : "20",
                  "--repeats", o.quick ? "1" : "3", "--json", (out / "pipeline.json").string(), "--trace",
                  (out / "pipeline_timeline.json").string()}),
       mpi_env},
  };
  if (o.backend == "cuda") {
    // `bench gemm` and `bench kernels` judge against the CPU's peak and STREAM: on a GPU its own
    // sweeps run instead, against the device's peak table and a device copy.
    steps[0] = {"GEMM rate", "gemm_rate.log", self,
                {"bench", "gemm-rate", "--dtype", "bf16", "--json", (out / "gemm_rate.json").string()}, {}};
    steps[1] = {"kernel rate", "kernel_rate.log", self,
                {"bench", "kernel-rate", "--json", (out / "kernel_rate.json").string()}, {}};
    if (o.quick)
      for (Step* step : {&steps[0], &steps[1]}) step->args.insert(step->args.end(), {"--repeat", "3"});
  } else if (o.quick) {
    steps[0].args.push_back("--quick");
    steps[1].args.push_back("--quick");
  }
  for (Step& step : steps) {
    step.args.push_back("--backend");
    step.args.push_back(o.backend);
    if (step.program == mpirun && o.comm != "auto") step.args.insert(step.args.end(), {"--comm", o.comm});
  }
  return steps;
}

// The result files a step writes: its --json and --trace values, bench.json aside (the CPU's GEMM and
// kernel sweeps add their sections to it, and run_suite starts it afresh).
std::vector<fs::path> result_files(const Step& s) {
  std::vector<fs::path> files;
  for (std::size_t i = 0; i + 1 < s.args.size(); ++i)
    if ((s.args[i] == "--json" || s.args[i] == "--trace") && fs::path(s.args[i + 1]).filename() != "bench.json")
      files.emplace_back(s.args[i + 1]);
  return files;
}

// Runs every step, even after one fails (the others' results are still worth having); returns
// what became of each: bench.json's "steps", so that a failed step's empty section is explained.
// A step's result files go before it runs, and stay gone if it fails: merge_results reads whatever
// is there, and a previous suite's comm.json had stood in the summary for a sweep that failed.
json run_steps(const std::vector<Step>& steps, const fs::path& out) {
  json record = json::array();
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const Step& s = steps[i];
    std::printf("[%zu/%zu] %-18s ... ", i + 1, steps.size(), s.label.c_str());
    std::fflush(stdout);
    fs::remove(out / s.log);
    for (const fs::path& file : result_files(s)) fs::remove(file);
    const auto start = std::chrono::steady_clock::now();
    const process::ChildExit exit = process::wait_child(process::spawn_logged(s.program, s.args, out / s.log, s.env));
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const bool ok = !exit.signaled && exit.code == 0;
    if (!ok)
      for (const fs::path& file : result_files(s)) fs::remove(file);
    std::printf("%s in %.0f s (%s)\n", ok ? "done" : "FAILED", seconds,
                ok ? (out / s.log).string().c_str() : (process::describe_exit(exit) + ", see " + (out / s.log).string()).c_str());
    std::fflush(stdout);
    record.push_back({{"step", s.label}, {"status", ok ? "done" : "failed"}, {"seconds", seconds},
                      {"exit", ok ? json(nullptr) : json(process::describe_exit(exit))}, {"log", s.log}});
  }
  return record;
}

int failed_steps(const json& steps) {
  int failed = 0;
  for (const json& s : steps) failed += s.at("status") == "failed";
  return failed;
}

// Merges the steps' JSON files into bench.json (the CPU's GEMM and kernel steps wrote it directly).
// `gpus`: the names NVML gave (run_suite reads them once, with the count it plans the ranks by).
json merge_results(const fs::path& out, const SuiteOptions& o, int cores, int ranks, const std::vector<std::string>& gpus,
                   const json& steps) {
  json bench = read_json(out / "bench.json");
  if (o.backend == "cuda") {
    bench["gemm_rate"] = read_json(out / "gemm_rate.json");
    bench["kernel_rate"] = read_json(out / "kernel_rate.json");
  }
  bench["comm"] = read_json(out / "comm.json");
  bench["layouts"] = read_json(out / "layouts.json");
  bench["pipeline"] = read_json(out / "pipeline.json");
  bench["pipeline_timeline"] = read_json(out / "pipeline_timeline.json");
  bench["steps"] = steps;
  bench["build"] = build_info_json();
  // On a GPU node the CPU's name alone said nothing of what was measured: the GPUs NVML sees too.
  // The BLAS's kernel set halves or doubles the CPU figures (backend/cpu/blas_kernels.h): named.
  bench["system"] = {{"device", cpu_model()}, {"gpus", gpus}, {"cores", cores}, {"ranks", ranks},
                     {"quick", o.quick}, {"backend", o.backend}, {"comm", o.comm}, {"blas", cpu_blas_version()}};
  write_output_file((out / "bench.json").string(), bench.dump(2) + "\n", "the suite's summary");
  return bench;
}

}  // namespace

void run_suite(const SuiteOptions& o) {
  check(detect_launch().world_size == 1, "run `tripod bench` directly, not under mpirun: it launches its own ",
        "ranks for the collective and training steps (--ranks N)");
  // Everything the steps need is checked before the first of them runs (and before the previous
  // bench.json goes): a bad launcher or backend was found only after the GEMM and kernel sweeps.
  check(o.ranks == 0 || (o.ranks >= 2 && o.ranks <= 1024), "--ranks must be 2-1024 (got ", o.ranks, ")");
  const std::vector<std::string> backends = backend_names();  // by name: a CUDA context stays with the steps
  check(std::find(backends.begin(), backends.end(), o.backend) != backends.end(), "--backend: unknown backend '",
        o.backend, "' (this build has: ", backend_names_text(), ")");
  resolve_comm_kind(o.comm, backend_device(o.backend), o.backend);  // a kind that cannot move its tensors
  const fs::path mpirun = find_program(o.mpirun);
  const int cores = available_cores();
  const bool cuda = backend_device(o.backend) == Device::Cuda;
  int gpus = -1;
  std::vector<std::string> gpu_names;  // for bench.json
  if (cuda) {
    const NvmlReader nvml;
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    gpus = visible_gpu_count(nvml.device_count(), nvml.available(), visible);
    check(gpus != 0, "--backend ", o.backend, ": no GPU is visible to this node's ranks (NVML counts ",
          nvml.device_count(), visible ? "; CUDA_VISIBLE_DEVICES='" + std::string(visible) + "'" : "", ")");
    try {
      for (int i = 0; i < nvml.device_count(); ++i) gpu_names.push_back(nvml.read_index(i).name);
    } catch (const Error&) {  // a reading NVML refuses: the names are a description, not a result
    }
  }
  const SuiteRanks plan = plan_suite_ranks(o.ranks, o.comm, cuda, cores, gpus);
  const int ranks = plan.ranks;
  SuiteOptions planned = o;
  planned.comm = plan.comm;
  const fs::path out = o.out;
  // One suite at a time in a results folder: each step writes a fixed name in it and the summary
  // reads them all back, so a second suite (run again in another terminal, two jobs on one node)
  // replaced the first one's files under it, with figures measured while both shared the cores.
  // Locked on the folder itself: `tripod report` reads the folder.
  const FolderWriterLock lock(out, "",
                              str_cat("bench --out ", out.string(), ": another `tripod bench` is writing its results "
                                      "into this folder (and measuring on these cores); wait for it to end, or give "
                                      "another --out"));
  fs::remove(out / "bench.json");
  const fs::path self = process::self_executable();
  std::printf("tripod bench%s: %s, %d cores, backend %s; %d MPI ranks -> %s\n", o.quick ? " --quick" : "",
              cpu_model().c_str(), cores, o.backend.c_str(), ranks, out.string().c_str());
  if (!plan.why.empty()) std::printf("  %s\n", plan.why.c_str());

  const json steps = run_steps(plan_steps(planned, out, self, mpirun, ranks, mpi_environment(cores, ranks)), out);
  const int failed = failed_steps(steps);
  print_summary(merge_results(out, planned, cores, ranks, gpu_names, steps));
  // The plots are the Python package reports/ of the source tree, run as a module.
  const process::ChildExit plots = process::wait_child(process::spawn_logged(
      "/usr/bin/python3", {"-m", "reports.plot_bench", (out / "bench.json").string(), "--out", (out / "plots").string()},
      out / "plots.log", {{"PYTHONPATH", TRIPOD_SOURCE_DIR}, {"PYTHONSAFEPATH", "1"}}));  // as process/python_module.cpp
  std::printf("results: %s; plots: %s%s\n", (out / "bench.json").string().c_str(), (out / "plots").string().c_str(),
              plots.code == 0 && !plots.signaled ? "" : " (plotting failed, see plots.log)");
  TRIPOD_CHECK(failed == 0, failed, " benchmark step(s) failed; their logs are in ", out.string());
}

}  // namespace tripod::bench
