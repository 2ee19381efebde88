// The one driver behind tripod_gemm_bench, tripod_kernel_bench and `tripod bench gemm | kernels`:
// resolve the shapes, hand the --benchmark_* flags to Google Benchmark, register the suite,
// run it through the derived-counter reporters, then print and save the summary.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>

#include "backend/backend_factory.h"
#include "core/error.h"
#include "microbench/bench_setup.h"
#include "microbench/derived_counters_reporter.h"
#include "microbench/summary.h"
#include "train/run_config.h"

namespace tripod::microbench {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGptVocab = 50257;  // GPT-2's BPE, for presets whose vocabulary comes from the data

// STREAM wants arrays far beyond the caches. Each array is at least the last-level cache this
// machine reports (so the three triad arrays are >= 3x it), at least 256 MiB, and at most 1 GiB
// (a VM may report its host's whole L3).
int64_t default_stream_bytes() {
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  return std::clamp<int64_t>(l3 > 0 ? l3 : 0, 256 * kMiB, 1024 * kMiB);
}

// The value of a --benchmark_<name>=value flag, last one winning as in Google Benchmark.
std::string flag_value(const std::vector<std::string>& args, const std::string& name, const std::string& fallback) {
  std::string value = fallback;
  for (const std::string& a : args) {
    const std::size_t start = a.find_first_not_of('-');
    if (start != std::string::npos && a.compare(start, name.size() + 1, name + "=") == 0)
      value = a.substr(start + name.size() + 1);
  }
  return value;
}

// The reporter GB would create for --benchmark_out, created here so that it can be wrapped.
std::unique_ptr<benchmark::BenchmarkReporter> file_reporter_for(const std::vector<std::string>& args) {
  if (flag_value(args, "benchmark_out", "").empty()) return nullptr;
  const std::string format = flag_value(args, "benchmark_out_format", "json");
  if (format == "console") return std::make_unique<benchmark::ConsoleReporter>(benchmark::ConsoleReporter::OO_None);
  BENCHMARK_DISABLE_DEPRECATED_WARNING
  if (format == "csv") return std::make_unique<benchmark::CSVReporter>();
  BENCHMARK_RESTORE_DEPRECATED_WARNING
  return std::make_unique<benchmark::JSONReporter>();
}

}  // namespace

BenchSetup resolve_setup(const MicrobenchOptions& o) {
  const RunConfig config = parse_run_config(load_config_json(o.model, o.overrides));
  BenchSetup s;
  s.model_name = o.model;
  s.model = config.model;
  if (s.model.vocab_size == 0) {
    s.model.vocab_size = kGptVocab;
    std::fprintf(
        stderr, "note: %s takes its vocabulary from the data; benchmarking V = %lld (set model.vocab_size to change)\n",
        o.model.c_str(), static_cast<long long>(kGptVocab));
  }
  s.model.validate();  // a preset edited with --set (model.d_model=-1 reached a [1024, -1] allocation)
  // 0 means "the preset's" (or "from the cache size"); below 0 is a typo, not a default.
  check(o.batch >= 0 && o.seq_len >= 0 && o.stream_mib >= 0, "--batch, --seq-len and --stream-mib must be >= 0 ",
        "(0: the preset's; got ", o.batch, ", ", o.seq_len, ", ", o.stream_mib, ")");
  check(o.seq_len <= s.model.context, "--seq-len ", o.seq_len, " is longer than the position table model.context (",
        s.model.context, ")");
  s.tp = o.tp;
  s.batch = o.batch > 0 ? o.batch : std::max<int64_t>(1, config.train.batch_size / config.train.micro_batches);
  s.seq_len = o.seq_len > 0 ? o.seq_len : config.train.seq_len;
  s.dtype = parse_dtype(o.dtype);
  s.quick = o.quick;
  s.stream_array_bytes = o.stream_mib > 0 ? o.stream_mib * kMiB : default_stream_bytes();
  check(s.dtype == DType::F32 || s.dtype == DType::F64, "--dtype ", o.dtype, ": the CPU backend runs fp32 or fp64");
  check(s.tp >= 1, "--tp must be at least 1 (got ", s.tp, ")");
  check(s.model.n_head % s.tp == 0, "model.n_head = ", s.model.n_head, " does not divide over --tp ", s.tp,
        " (tensor parallelism splits the heads)");
  check(s.model.d_ff % s.tp == 0, "model.d_ff = ", s.model.d_ff, " does not divide over --tp ", s.tp);
  return s;
}

int run_microbench(Suite suite, MicrobenchOptions o) {
  const bool gemm = suite == Suite::Gemm;
  // These suites judge against the CPU's nominal peak and a CPU STREAM triad: on a GPU the figures
  // would mislead. The GPU has its own, against the device's peak table and a device copy.
  check(o.backend != "cuda", gemm ? "tripod bench gemm" : "tripod bench kernels",
        " measures the CPU (its peak and STREAM baseline are the CPU's): on a GPU run `tripod bench ",
        gemm ? "gemm-rate" : "kernel-rate", " --backend cuda`");
  const BenchSetup setup = resolve_setup(o);
  auto backend = make_backend(o.backend);
  const Peaks peaks{nominal_cpu_peak(DType::F32), nominal_cpu_peak(DType::F64)};

  // Google Benchmark parses its flags from an argv; --quick's minimum time comes first so that an
  // explicit --benchmark_min_time still wins.
  std::vector<std::string> args{!o.program.empty() ? o.program : gemm ? "tripod bench gemm" : "tripod bench kernels"};
  if (o.quick) args.push_back("--benchmark_min_time=0.05");
  args.insert(args.end(), o.benchmark_args.begin(), o.benchmark_args.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int argc = static_cast<int>(args.size());
  benchmark::Initialize(&argc, argv.data());
  if (benchmark::ReportUnrecognizedArguments(argc, argv.data())) return 2;

  BenchCatalog catalog;
  if (gemm) {
    register_gemm_benchmarks(setup, *backend, catalog);
  } else {
    register_stream_benchmarks(setup, catalog);  // first: the kernels are compared with its triad
    register_kernel_benchmarks(setup, *backend, catalog);
  }
  // The shapes in GB's own context block (console header and --benchmark_out JSON).
  benchmark::AddCustomContext("tripod_model", setup.model_name);
  benchmark::AddCustomContext("tripod_tp", std::to_string(setup.tp));
  benchmark::AddCustomContext("tripod_tokens", std::to_string(setup.batch) + "x" + std::to_string(setup.seq_len));
  benchmark::AddCustomContext("tripod_dtype", dtype_name(setup.dtype));

  // Our lines go where they do not corrupt GB's machine-readable stdout (--benchmark_format=json|csv).
  std::FILE* text = flag_value(args, "benchmark_format", "console") == "console" ? stdout : stderr;
  std::fprintf(
      text, "tripod bench %s: %s (d_model %lld, %lld heads, d_ff %lld, vocab %lld), tp %lld, %lld x %lld tokens, %s\n",
      gemm ? "gemm" : "kernels", setup.model_name.c_str(), static_cast<long long>(setup.model.d_model),
      static_cast<long long>(setup.model.n_head), static_cast<long long>(setup.model.d_ff),
      static_cast<long long>(setup.model.vocab_size), static_cast<long long>(setup.tp),
      static_cast<long long>(setup.batch), static_cast<long long>(setup.seq_len), dtype_name(setup.dtype).c_str());
  std::fflush(text);

  ResultsBook book;
  // GB owns its default display reporter (a static); the file reporter is ours.
  DerivedCountersReporter display(benchmark::CreateDefaultDisplayReporter(), catalog, peaks, book, /*records=*/true);
  const std::unique_ptr<benchmark::BenchmarkReporter> file_inner = file_reporter_for(args);
  std::unique_ptr<DerivedCountersReporter> file;
  if (file_inner) file = std::make_unique<DerivedCountersReporter>(file_inner.get(), catalog, peaks, book, false);
  benchmark::RunSpecifiedBenchmarks(&display, file.get());
  benchmark::Shutdown();
  if (book.entries().empty()) return 0;  // --benchmark_list_tests, or a filter matching nothing

  const nlohmann::json summary = gemm ? gemm_summary(setup, book, peaks) : kernel_summary(setup, book);
  if (gemm) {
    print_gemm_summary(summary, text);
  } else {
    print_kernel_summary(summary, text);
  }
  if (!o.json_out.empty()) {
    merge_summary_json(o.json_out, gemm ? "gemm" : "kernels", summary);
    std::fprintf(text, "summary written to %s (under \"%s\")\n", o.json_out.c_str(), gemm ? "gemm" : "kernels");
  }
  return 0;
}

}  // namespace tripod::microbench
