// tripod bench gemm-rate: GEMM throughput through the Backend interface (the path the trainer
// takes, so cuBLASLt on the CUDA backend and OpenBLAS on the CPU), on square sizes and on the
// GEMMs of a GPT-2 124M layer, in TFLOP/s and as a percentage of the device's peak for that
// precision (perf/backend_peak.h).
//
// Precisions (--dtype): bf16 = bf16 A and B, fp32 accumulation, fp32 C (Backend::gemm with
// accumulate F32); bf16-mixed = the trainer's GEMMs under that policy: fp32 A, B and C whose
// operands the backend rounds to bf16 itself (Fp32Matmul::Bf16Operands: on a GPU the conversions,
// and the padding of sizes that are not multiples of 8, are in the time), against the bf16 peak;
// fp32 = fp32 everywhere (TF32 off); fp64 = fp64 everywhere. --c-dtype bf16 with --dtype bf16:
// C in bf16 too (the product summed in fp32, rounded once), as PyTorch's bf16 matmul and the
// issue's "about 790 TFLOP/s on this H200" measure it: C's traffic is half of fp32's.
//
// Timing: bench/timed_regions.h (warm-ups, regions of at least min_time_ms, median and best).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "perf/device_peak.h"

namespace tripod::bench {

struct GemmRateOptions {
  std::string backend = "cpu";
  std::string dtype = "fp32";      // bf16, bf16-mixed, fp32 or fp64
  std::string c_dtype;             // "" (fp32 for bf16 A/B, else the A/B dtype) or bf16 (with --dtype bf16)
  std::vector<int64_t> sizes;      // squares n x n x n
  std::string shapes;              // "" or "gpt2"
  int64_t tokens = 8192;           // B*T rows of the GPT-2 activations
  int64_t vocab = 50257;           // the LM head's width (50304: padded as Megatron-LM and llm.c train it)
  int repeat = 10;
  double min_time_ms = 5;          // the shortest timed region
  double peak_tflops = 0;          // > 0: a stated peak instead of the table's
  std::string peak_device;         // non-empty: the table's peak of this device, not the backend's
  std::string json_out;
};

// One GEMM of the benchmark: C[m,n] = op(A)[m,k] op(B)[k,n] (+ C when beta is 1), row-major,
// as Backend::gemm takes it. `per_step` is how many times a GPT-2 training step runs it
// (12 layers, or 1 for the LM head); 0 for the squares.
struct GemmCase {
  std::string name;  // "square 4096", "fc fwd", "lm_head dW"
  std::string group; // "square" or "gpt2"
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  double beta = 0;
  int per_step = 0;
  int64_t lda = 0, ldc = 0;  // leading dimensions of A and C; 0: their rows are dense
  double flops() const { return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k); }
};

// GPT-2 124M's layer GEMMs for `tokens` rows, as model/linear.cpp calls them: for each of qkv
// (768->2304), attn proj (768->768), fc (768->3072), fc proj (3072->768) and the LM head
// (768->vocab) the forward (x W^T), the input gradient (dY W) and the weight gradient
// (dY^T x, accumulated: beta 1). The logits and their gradient have rows of `vocab` rounded up to
// `logits_row_multiple` (the trainer pads them to Backend::gemm_row_multiple()): the LM head's C
// and its gradients' dY have that leading dimension.
std::vector<GemmCase> gpt2_gemm_cases(int64_t tokens, int64_t vocab = 50257, int64_t logits_row_multiple = 1);
std::vector<GemmCase> square_gemm_cases(const std::vector<int64_t>& sizes);

struct GemmTiming {
  GemmCase gemm;
  int64_t calls_per_region = 1;
  double median_seconds = 0, best_seconds = 0;  // per GEMM call
};

// Times one case on `backend` with A and B in `ab` and C in `c`, on random data (never constants:
// some libraries and chips run faster on zeros).
GemmTiming time_gemm(Backend& backend, const GemmCase& gemm, DType ab, DType c, int repeat, double min_time_ms);

// The table's rows, timed one after another and printed. A shape that throws (one the library
// refuses, a fault) is printed and recorded as {name, group, m, n, k, trans_a, trans_b, error}, and
// the shapes after it are still timed, so that one failing shape loses no other figure; the
// command fails at the end, after writing the JSON, naming the failed shapes.
struct GemmRows {
  std::vector<GemmTiming> timings;                // the timed shapes
  nlohmann::json results = nlohmann::json::array();  // every shape in order: its timing or its error
  std::vector<std::string> failed;               // the names of the shapes that threw
  int failed_gpt2 = 0;                           // how many of them are GPT-2 shapes (no step sum then)
};
GemmRows time_gemm_cases(Backend& backend, const std::vector<GemmCase>& cases, DType ab, DType c_dtype, int repeat,
                         double min_time_ms, const PeakFlops& peak);

// --c-dtype's C dtype for A and B in `ab`: "" is fp32 for bf16 inputs and `ab` otherwise; bf16 only
// with bf16 inputs. Throws naming both otherwise.
DType gemm_c_dtype(DType ab, const std::string& c_dtype);

void run_gemm_rate(const GemmRateOptions& options);

}  // namespace tripod::bench
