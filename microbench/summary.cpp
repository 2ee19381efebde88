#include "microbench/summary.h"

#include <omp.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace tripod::microbench {
namespace {

using nlohmann::json;

json square_gemm_table(const ResultsBook& book, DType dtype, const Peaks& peaks) {
  json rows = json::array();
  for (const auto& e : book.entries()) {
    if (e.info.kind != BenchKind::SquareGemm || e.info.dtype != dtype) continue;
    const Sample s = e.representative();
    rows.push_back({{"name", e.name},
                    {"size", e.info.square_size},
                    {"tflops", s.flops_per_second / 1e12},
                    {"pct_of_peak", 100 * s.flops_per_second / peaks.of(dtype).flops},
                    {"real_seconds_per_iteration", s.real_seconds / static_cast<double>(s.iterations)}});
  }
  return rows;
}

// The fastest and the largest square size of a table (either may be absent if filtered out).
void add_headlines(json& out, const std::string& prefix, const json& rows) {
  if (rows.empty()) return;
  const json* best = &rows[0];
  const json* largest = &rows[0];
  for (const json& r : rows) {
    if (r["tflops"].get<double>() > (*best)["tflops"].get<double>()) best = &r;
    if (r["size"].get<int64_t>() > (*largest)["size"].get<int64_t>()) largest = &r;
  }
  out[prefix + "_best"] = {
      {"size", (*best)["size"]}, {"tflops", (*best)["tflops"]}, {"pct_of_peak", (*best)["pct_of_peak"]}};
  out[prefix + "_largest"] = {
      {"size", (*largest)["size"]}, {"tflops", (*largest)["tflops"]}, {"pct_of_peak", (*largest)["pct_of_peak"]}};
}

}  // namespace

json setup_json(const BenchSetup& s) {
  return {{"model", s.model_name},
          {"d_model", s.model.d_model},
          {"n_head", s.model.n_head},
          {"d_ff", s.model.d_ff},
          {"vocab_size", s.model.vocab_size},
          {"tp", s.tp},
          {"batch", s.batch},
          {"seq_len", s.seq_len},
          {"tokens", s.tokens()},
          {"dtype", dtype_name(s.dtype)},
          {"quick", s.quick},
          {"threads", omp_get_max_threads()},
          {"device", "cpu"}};
}

json gemm_summary(const BenchSetup& setup, const ResultsBook& book, const Peaks& peaks) {
  json out = {{"setup", setup_json(setup)},
              {"peak",
               {{"fp32_flops", peaks.fp32.flops},
                {"fp32_source", peaks.fp32.source},
                {"fp64_flops", peaks.fp64.flops},
                {"fp64_source", peaks.fp64.source}}}};
  out["sgemm"] = square_gemm_table(book, DType::F32, peaks);
  out["dgemm"] = square_gemm_table(book, DType::F64, peaks);
  add_headlines(out, "sgemm", out["sgemm"]);
  add_headlines(out, "dgemm", out["dgemm"]);
  // The measured peak: the best square GEMM in the layer GEMMs' dtype (what the hardware really
  // sustains here), beside the nominal one.
  const std::string measured_key = setup.dtype == DType::F64 ? "dgemm_best" : "sgemm_best";
  const double measured = out.contains(measured_key) ? out[measured_key]["tflops"].get<double>() * 1e12 : 0.0;
  json layers = json::array();
  for (const auto& e : book.entries()) {
    if (e.info.kind != BenchKind::LayerGemm) continue;
    const Sample s = e.representative();
    json row = {{"name", e.name},
                {"shape", e.info.shape},
                {"dtype", dtype_name(e.info.dtype)},
                {"tflops", s.flops_per_second / 1e12},
                {"pct_of_peak", 100 * s.flops_per_second / peaks.of(e.info.dtype).flops}};
    if (measured > 0) row["pct_of_measured_gemm"] = 100 * s.flops_per_second / measured;
    layers.push_back(row);
  }
  out["layer_gemms"] = layers;
  return out;
}

json kernel_summary(const BenchSetup& setup, const ResultsBook& book) {
  json out = {{"setup", setup_json(setup)}};
  const double triad = book.triad_bytes_per_second();
  json stream = {{"array_mib", setup.stream_array_bytes >> 20}};
  json kernels = json::array();
  for (const auto& e : book.entries()) {
    const Sample s = e.representative();
    if (e.info.kind == BenchKind::Stream) {
      const std::string which = e.name.rfind("stream/copy", 0) == 0 ? "copy_gbps" : "triad_gbps";
      stream[which] = s.bytes_per_second / 1e9;
    } else if (e.info.kind == BenchKind::Kernel) {
      json row = {{"name", e.name},
                  {"shape", e.info.shape},
                  {"dtype", dtype_name(e.info.dtype)},
                  {"bytes_per_iteration", e.info.bytes_per_iteration},
                  {"gbps", s.bytes_per_second / 1e9},
                  {"seconds_per_iteration", s.real_seconds / static_cast<double>(s.iterations)}};
      if (triad > 0) row["pct_of_triad"] = 100 * s.bytes_per_second / triad;
      if (s.flops_per_second > 0) row["gflops"] = s.flops_per_second / 1e9;
      kernels.push_back(row);
    }
  }
  out["stream"] = stream;
  out["kernels"] = kernels;
  return out;
}

void print_gemm_summary(const json& s, std::FILE* out) {
  std::fprintf(out, "\nGEMM summary (%d threads; rates are Google Benchmark's flops_per_second counters)\n",
               s["setup"]["threads"].get<int>());
  std::fprintf(out, "  nominal peak fp32: %.1f GFLOP/s  [%s]\n", s["peak"]["fp32_flops"].get<double>() / 1e9,
               s["peak"]["fp32_source"].get<std::string>().c_str());
  std::fprintf(out, "  nominal peak fp64: %.1f GFLOP/s  [%s]\n", s["peak"]["fp64_flops"].get<double>() / 1e9,
               s["peak"]["fp64_source"].get<std::string>().c_str());
  for (const char* g : {"sgemm", "dgemm"}) {
    const std::string best = std::string(g) + "_best", largest = std::string(g) + "_largest";
    if (!s.contains(best)) continue;
    std::fprintf(
        out, "  measured %s: best %.1f GFLOP/s (%.1f%% of nominal) at %lld; largest size %lld: %.1f GFLOP/s (%.1f%%)\n",
        g, s[best]["tflops"].get<double>() * 1e3, s[best]["pct_of_peak"].get<double>(),
        static_cast<long long>(s[best]["size"].get<int64_t>()),
        static_cast<long long>(s[largest]["size"].get<int64_t>()), s[largest]["tflops"].get<double>() * 1e3,
        s[largest]["pct_of_peak"].get<double>());
  }
  if (s["layer_gemms"].empty()) return;
  const json& setup = s["setup"];
  std::fprintf(out, "  layer GEMMs of %s, tp %lld, %lld tokens:\n", setup["model"].get<std::string>().c_str(),
               static_cast<long long>(setup["tp"].get<int64_t>()),
               static_cast<long long>(setup["tokens"].get<int64_t>()));
  std::fprintf(out, "    %-44s %10s %10s %12s\n", "GEMM (M x N x K)", "GFLOP/s", "% nominal", "% best gemm");
  for (const json& r : s["layer_gemms"]) {
    // "-" when no square sgemm ran (a --benchmark_filter left it out): there is nothing to compare with.
    char best[32] = "-";
    if (r.contains("pct_of_measured_gemm"))
      std::snprintf(best, sizeof best, "%.1f%%", r["pct_of_measured_gemm"].get<double>());
    std::fprintf(out, "    %-44s %10.1f %9.1f%% %12s\n", r["name"].get<std::string>().c_str(),
                 r["tflops"].get<double>() * 1e3, r["pct_of_peak"].get<double>(), best);
  }
}

void print_kernel_summary(const json& s, std::FILE* out) {
  const json& st = s["stream"];
  std::fprintf(out, "\nKernel summary (%d threads; GB/s = 1e9 bytes/s, bytes counted by hand per kernel)\n",
               s["setup"]["threads"].get<int>());
  // STREAM counts triad as 24 B per element; without non-temporal stores the written array is
  // also read (write-allocate), so memory moves 32 B. A kernel whose outputs are also its inputs
  // (AdamW, in-place cross-entropy backward) pays no such read and can reach ~133% of triad.
  // "-" for what a --benchmark_filter left unmeasured (the JSON leaves those keys out): 0.0 GB/s and
  // 0.0 % of triad read as measurements.
  const auto number_or_dash = [](const json& j, const char* key, const char* format) {
    char text[32] = "-";
    if (j.contains(key)) std::snprintf(text, sizeof text, format, j[key].get<double>());
    return std::string(text);
  };
  std::fprintf(out, "  STREAM (arrays of %lld MiB): copy %s GB/s, triad %s GB/s (STREAM's byte counts)\n",
               static_cast<long long>(st["array_mib"].get<int64_t>()), number_or_dash(st, "copy_gbps", "%.1f").c_str(),
               number_or_dash(st, "triad_gbps", "%.1f").c_str());
  std::fprintf(out, "    %-48s %9s %10s %10s\n", "kernel", "GB/s", "% triad", "GFLOP/s*");
  bool any_flops = false;
  for (const json& r : s["kernels"]) {
    std::fprintf(out, "    %-48s %9.2f %10s", r["name"].get<std::string>().c_str(), r["gbps"].get<double>(),
                 number_or_dash(r, "pct_of_triad", "%.1f%%").c_str());
    if (r.contains("gflops")) std::fprintf(out, " %10.1f", r["gflops"].get<double>());
    any_flops = any_flops || r.contains("gflops");
    std::fprintf(out, "\n");
  }
  if (any_flops)
    std::fprintf(out, "  * nominal: attention's FLOPs are counted over the whole T x T square; the CPU skips the masked "
                      "key blocks (at T = 1024 it computes about 9/16 of it)\n");
}

void merge_summary_json(const std::string& path, const std::string& suite, const json& summary) {
  json file = json::object();
  if (std::filesystem::exists(path)) {
    std::ifstream in(path);
    file = json::parse(in, nullptr, /*allow_exceptions=*/false);
    check(file.is_object(), path, ": exists but is not a JSON object; not overwriting it with the ", suite, " summary");
  }
  file[suite] = summary;
  std::ofstream out(path);
  check(out.good(), path, ": cannot write the ", suite, " summary");
  out << file.dump(2) << "\n";
}

}  // namespace tripod::microbench
