#include "bench/gemm_rate_bench.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "backend/backend_factory.h"
#include "backend/transfer.h"
#include "bench/timed_cases.h"
#include "bench/timed_regions.h"
#include "core/error.h"
#include "core/output_file.h"
#include "perf/backend_peak.h"

namespace tripod::bench {
using nlohmann::json;

std::vector<GemmCase> gpt2_gemm_cases(int64_t tokens, int64_t vocab, int64_t logits_row_multiple) {
  const int64_t logits_row = (vocab + logits_row_multiple - 1) / logits_row_multiple * logits_row_multiple;
  struct Layer {
    const char* name;
    int64_t in, out;
    int per_step;
    bool logits = false;  // its output is the logits, in the trainer's padded rows
  };
  // GPT-2 124M: d_model 768, d_ff 3072, 12 layers, vocabulary V (the tied LM head: wte [V, C]).
  const Layer layers[] = {{"qkv", 768, 2304, 12}, {"attn_proj", 768, 768, 12}, {"fc", 768, 3072, 12},
                          {"fc_proj", 3072, 768, 12}, {"lm_head", 768, vocab, 1, true}};
  std::vector<GemmCase> cases;
  for (const Layer& l : layers) {
    const std::string name = l.name;
    // model/linear.cpp with weight W [out, in] and N = tokens rows:
    //   forward  Y[N,out] = X[N,in] W^T           gemm(N, T)  m=N   n=out k=in
    //   dX       dX[N,in] = dY[N,out] W           gemm(N, N)  m=N   n=in  k=out
    //   dW       dW[out,in] += dY^T[out,N] X[N,in] gemm(T, N) m=out n=in  k=N, beta 1
    const int64_t ld_out = l.logits && logits_row != vocab ? logits_row : 0;  // Y's and dY's rows
    cases.push_back({name + " fwd", "gpt2", tokens, l.out, l.in, false, true, 0.0, l.per_step, 0, ld_out});
    cases.push_back({name + " dX", "gpt2", tokens, l.in, l.out, false, false, 0.0, l.per_step, ld_out, 0});
    cases.push_back({name + " dW", "gpt2", l.out, l.in, tokens, true, false, 1.0, l.per_step, ld_out, 0});
  }
  return cases;
}

std::vector<GemmCase> square_gemm_cases(const std::vector<int64_t>& sizes) {
  std::vector<GemmCase> cases;
  for (int64_t n : sizes) {
    check(n > 0, "gemm-rate: --sizes must be positive, got ", n);
    cases.push_back({"square " + std::to_string(n), "square", n, n, n, false, false, 0.0, 0});
  }
  return cases;
}

namespace {

// --dtype: the tensors' dtype, and whether the backend rounds fp32 operands to bf16 (bf16-mixed).
struct GemmPrecision {
  DType tensors;
  bool bf16_operands;
  DType peak() const { return bf16_operands ? DType::BF16 : tensors; }
};

GemmPrecision parse_gemm_precision(const std::string& name) {
  if (name == "bf16-mixed") return {DType::F32, true};
  const DType t = parse_dtype(name);
  check(t == DType::BF16 || t == DType::F32 || t == DType::F64, "gemm-rate: --dtype bf16, bf16-mixed, fp32 or fp64, not ",
        name);
  return {t, false};
}

}  // namespace

DType gemm_c_dtype(DType ab, const std::string& c_dtype) {
  const DType usual = ab == DType::BF16 ? DType::F32 : ab;
  if (c_dtype.empty()) return usual;
  const DType c = parse_dtype(c_dtype);
  check(c == usual || (ab == DType::BF16 && c == DType::BF16), "gemm-rate: --c-dtype ", c_dtype, " with A/B in ",
        dtype_name(ab), ": C is ", dtype_name(usual), ab == DType::BF16 ? " or bf16" : "",
        " (bf16 C only with --dtype bf16)");
  return c;
}

GemmTiming time_gemm(Backend& backend, const GemmCase& g, DType ab, DType c_dtype, int repeat, double min_time_ms) {
  // Row-major storage: A is [m, k] or, transposed, [k, m]; B is [k, n] or [n, k].
  // A's rows and C's may be longer than dense (GemmCase::lda, ldc).
  const Shape a_shape = g.trans_a ? Shape{g.k, std::max(g.m, g.lda)} : Shape{g.m, std::max(g.k, g.lda)};
  const Shape b_shape = g.trans_b ? Shape{g.n, g.k} : Shape{g.k, g.n};
  const int64_t ldc = std::max(g.n, g.ldc);
  Tensor a = backend.alloc(a_shape, ab), b = backend.alloc(b_shape, ab), c = backend.alloc({g.m, ldc}, c_dtype);
  fill_random(backend, a, 1);
  fill_random(backend, b, 2);
  const DType accumulate = gemm_accumulate_dtype(ab);
  const RegionTiming t = time_regions(backend, [&] {
    backend.gemm(g.trans_a, g.trans_b, g.m, g.n, g.k, 1.0, a, a_shape[1], b, b_shape[1], g.beta, c, ldc, accumulate);
  }, repeat, min_time_ms);
  return {g, t.calls_per_region, t.median_seconds, t.best_seconds};
}

namespace {

json percent_json(double flops_per_second, const PeakFlops& peak) {
  return peak.flops > 0 ? json(100.0 * flops_per_second / peak.flops) : json(nullptr);
}

json timing_json(const GemmTiming& t, const PeakFlops& peak) {
  const GemmCase& g = t.gemm;
  const double median_rate = g.flops() / t.median_seconds, best_rate = g.flops() / t.best_seconds;
  return {{"name", g.name}, {"group", g.group}, {"m", g.m}, {"n", g.n}, {"k", g.k}, {"trans_a", g.trans_a},
          {"trans_b", g.trans_b}, {"beta", g.beta}, {"per_step", g.per_step}, {"lda", g.lda}, {"ldc", g.ldc}, {"flops_per_gemm", g.flops()},
          {"calls_per_region", t.calls_per_region}, {"median_seconds", t.median_seconds},
          {"best_seconds", t.best_seconds}, {"median_tflops", median_rate / 1e12}, {"best_tflops", best_rate / 1e12},
          {"pct_of_peak_median", percent_json(median_rate, peak)}, {"pct_of_peak_best", percent_json(best_rate, peak)}};
}

// One GPT-2 training step's GEMMs (each case times its count per step): the rate the trainer's
// matrix work would reach if every GEMM ran as fast as here.
// Null, saying so, where a GPT-2 row failed: a sum without it would overstate the rate.
json gpt2_step_json(const std::vector<GemmTiming>& timings, const PeakFlops& peak, int64_t tokens,
                    int failed_gpt2_rows) {
  if (failed_gpt2_rows > 0) {
    std::printf("GPT-2 124M step GEMMs: not summed, %d of its rows failed\n", failed_gpt2_rows);
    return nullptr;
  }
  double flops = 0, seconds = 0;
  for (const GemmTiming& t : timings) {
    if (t.gemm.group != "gpt2") continue;
    flops += t.gemm.per_step * t.gemm.flops();
    seconds += t.gemm.per_step * t.median_seconds;
  }
  if (seconds <= 0) return nullptr;
  const double rate = flops / seconds;
  std::printf("GPT-2 124M step GEMMs (%lld tokens, 12 layers + LM head, fwd + dX + dW): %.3g FLOP in %.2f ms = "
              "%.2f TFLOP/s, %s of peak\n",
              static_cast<long long>(tokens), flops, 1e3 * seconds, rate / 1e12, percent_of_peak_text(rate, peak).c_str());
  return {{"tokens", tokens}, {"flops", flops}, {"seconds", seconds}, {"tflops", rate / 1e12},
          {"pct_of_peak", percent_json(rate, peak)}};
}

void write_gemm_rate_json(const GemmRateOptions& o, const GemmPrecision& precision, DType c_dtype,
                          const std::string& backend_name, const PeakFlops& peak, const json& results,
                          const json& step) {
  if (o.json_out.empty()) return;
  const DType ab = precision.tensors;
  const json j = {{"benchmark", "gemm_rate"}, {"backend", o.backend}, {"backend_name", backend_name},
                  {"dtype", precision.bf16_operands ? std::string("bf16-mixed") : dtype_name(ab)},
                  {"c_dtype", dtype_name(c_dtype)},
                  {"accumulate", dtype_name(gemm_accumulate_dtype(ab))}, {"repeat", o.repeat},
                  {"min_time_ms", o.min_time_ms}, {"tokens", o.tokens}, {"vocab", o.vocab},
                  {"peak", {{"known", peak.flops > 0}, {"flops", peak.flops > 0 ? json(peak.flops) : json(nullptr)},
                            {"precision", peak_precision_name(gemm_peak_precision(precision.peak()))},
                            {"source", peak.source}}},
                  {"results", results}, {"gpt2_step", step}};
  write_output_file(o.json_out, j.dump(2) + "\n", "the results file (--json)");
}

}  // namespace

GemmRows time_gemm_cases(Backend& backend, const std::vector<GemmCase>& cases, DType ab, DType c_dtype, int repeat,
                         double min_time_ms, const PeakFlops& peak) {
  check(repeat >= 1, "gemm-rate: --repeat must be at least 1, got ", repeat);  // refused once, not row by row
  GemmRows rows;
  for (const GemmCase& g : cases) {
    const char op[3] = {g.trans_a ? 'T' : 'N', g.trans_b ? 'T' : 'N', 0};
    GemmTiming t;
    try {
      t = time_gemm(backend, g, ab, c_dtype, repeat, min_time_ms);
    } catch (const Error& e) {
      std::printf("%-18s %7lld %7lld %7lld %-3s FAILED: %s\n", g.name.c_str(), static_cast<long long>(g.m),
                  static_cast<long long>(g.n), static_cast<long long>(g.k), op, e.what());
      std::fflush(stdout);
      rows.results.push_back({{"name", g.name}, {"group", g.group}, {"m", g.m}, {"n", g.n}, {"k", g.k},
                              {"trans_a", g.trans_a}, {"trans_b", g.trans_b}, {"error", e.what()}});
      rows.failed.push_back(g.name);
      if (g.group == "gpt2") ++rows.failed_gpt2;
      continue;
    }
    rows.timings.push_back(t);
    rows.results.push_back(timing_json(t, peak));
    const double rate = g.flops() / t.median_seconds;
    std::printf("%-18s %7lld %7lld %7lld %-3s %6lld %11.4f %9.3f %9.3f %8s\n", g.name.c_str(),
                static_cast<long long>(g.m), static_cast<long long>(g.n), static_cast<long long>(g.k), op,
                static_cast<long long>(t.calls_per_region), 1e3 * t.median_seconds, rate / 1e12, g.flops() / t.best_seconds / 1e12,
                percent_of_peak_text(rate, peak).c_str());
    std::fflush(stdout);
  }
  return rows;
}

void run_gemm_rate(const GemmRateOptions& o) {
  const GemmPrecision precision = parse_gemm_precision(o.dtype);
  const DType ab = precision.tensors;
  check(o.c_dtype.empty() || !precision.bf16_operands, "gemm-rate: --c-dtype is for --dtype bf16, fp32 or fp64, not ",
        o.dtype, " (whose C is the trainer's fp32)");
  const DType c_dtype = gemm_c_dtype(ab, o.c_dtype);
  check(o.shapes.empty() || o.shapes == "gpt2", "gemm-rate: --shapes knows only gpt2, not '", o.shapes, "'");
  check(o.tokens > 0, "gemm-rate: --tokens must be positive, got ", o.tokens);
  check(o.vocab > 0, "gemm-rate: --vocab must be positive, got ", o.vocab);
  // A region is at most kMaxCallsPerRegion calls: a longer --min-time-ms was cut short while the header
  // still promised it.
  check(o.min_time_ms >= 0 && o.min_time_ms <= kMaxRegionMs, "gemm-rate: --min-time-ms must be 0 to ", kMaxRegionMs,
        " (got ", o.min_time_ms, ")");
  std::vector<int64_t> sizes = o.sizes;
  if (sizes.empty() && o.shapes.empty()) sizes = {1024, 4096, 8192};
  std::vector<GemmCase> cases = square_gemm_cases(sizes);
  auto backend = make_backend(o.backend);
  if (o.shapes == "gpt2")
    for (GemmCase& g : gpt2_gemm_cases(o.tokens, o.vocab, backend->gemm_row_multiple())) cases.push_back(std::move(g));

  if (precision.bf16_operands) backend->set_fp32_matmul(Fp32Matmul::Bf16Operands);
  const DType peak_dtype = precision.peak();
  const PeakFlops peak = o.peak_device.empty() || o.peak_tflops > 0
                             ? backend_peak(backend->name(), peak_dtype, o.peak_tflops)
                             : table_peak_or_unknown(o.peak_device, peak_dtype);
  // A device the user names must be one the table knows: percentages of an unknown peak read "n/a"
  // in every row, and a misspelt name would look like a measurement without a peak.
  TRIPOD_CHECK(o.peak_device.empty() || o.peak_tflops > 0 || peak.flops > 0, "gemm-rate: --peak-device \"",
               o.peak_device, "\": ", peak.source.substr(peak.source.find(':') + 2), ". Known devices: ",
               known_device_names());
  const std::string ab_text = precision.bf16_operands ? "fp32 rounded to bf16 by the backend (bf16-mixed)" : dtype_name(ab);
  std::printf("tripod bench gemm-rate: backend %s, A/B %s, C %s, accumulate %s, %d timed regions of >= %.1f ms\n",
              backend->name().c_str(), ab_text.c_str(), dtype_name(c_dtype).c_str(),
              dtype_name(gemm_accumulate_dtype(ab)).c_str(), o.repeat, o.min_time_ms);
  if (peak.flops > 0) std::printf("peak: %.4g TFLOP/s, %s\n", peak.flops / 1e12, peak.source.c_str());
  else std::printf("%s\n", peak.source.c_str());
  std::printf("%-18s %7s %7s %7s %-3s %6s %11s %9s %9s %8s\n", "gemm", "m", "n", "k", "op", "calls", "median ms",
              "TFLOP/s", "best", "of peak");
  std::fflush(stdout);
  const GemmRows rows = time_gemm_cases(*backend, cases, ab, c_dtype, o.repeat, o.min_time_ms, peak);
  const json step = gpt2_step_json(rows.timings, peak, o.tokens, rows.failed_gpt2);
  write_gemm_rate_json(o, precision, c_dtype, backend->name(), peak, rows.results, step);
  fail_naming_failed_rows("gemm-rate", "GEMMs", rows.failed, cases.size(), o.json_out);
}

}  // namespace tripod::bench
