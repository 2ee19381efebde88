// Every Backend operation on one backend against another (normally the CPU backend) on the same
// inputs: random values (never zeros, which hide unwritten outputs), odd sizes that leave partial
// warps and blocks, and sizes of GPT-2 rows. This is the first thing to run on a new device
// (`tripod check-backend --backend cuda`): a wrong kernel shows as an error of ~1e-3 in fp64, where
// a change of reduction order shows as ~1e-15.
//
// Bounds, relative to the largest element of the reference output: fp64 1e-12, fp32 1e-5 (sums
// of up to ~5e4 terms in another order move fp32 by ~1e-6), bf16 outputs 2^-8 (one rounding of a
// value that the two backends may compute a few fp32 ulps apart, either side of a tie).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace tripod::backend_check {

struct Output {
  std::string name;  // "dweight"
  DType dtype;
  std::vector<double> values;
  // Relative bound when not the dtype's (0): 2^-8 for fp32 results of products whose bf16-rounded
  // operands the two backends may round one step apart (a value a few fp32 ulps from a tie).
  double bound = 0;
  // Not compared: this backend keeps something else in its place (the CUDA flash attention's
  // probs buffer holds its own state, not the probabilities).
  bool not_comparable = false;
};

// One check: `run` builds the inputs on a backend from fixed host values, runs the operation and
// returns its outputs as host copies. It must build its inputs in the same order on every backend.
struct OpCase {
  std::string op;     // "layernorm_backward"
  DType dtype;        // the operation's element type
  std::string shape;  // "rows 33, channels 40"
  std::function<std::vector<Output>(Backend&)> run;
};

struct OpResult {
  std::string op, shape, worst_output;
  DType dtype;
  // Of the output nearest its bound (`worst_output`): its largest error, that error over the output's
  // largest |reference| element, and its relative bound.
  double max_abs = 0, max_rel = 0, bound = 0;
  double error_over_bound = 0;  // the worst output's error / its bound: <= 1 passes
  bool bit_identical = true, pass = true;
  std::string error;  // an exception from either backend (the case fails)
};

// The cases of the given groups: F64 and F32, every operation in that dtype (and the conversions
// between the two); BF16, the cases of bf16 tensors, which compute in fp32 around them: bf16 GEMMs
// (bf16 or fp32 C), fp32 GEMMs with bf16 operands, the kernels that write a GEMM's bf16 operand,
// attention under the bf16-operand policy, and the conversions to and from bf16.
std::vector<OpCase> all_op_cases(const std::vector<DType>& dtypes);
double output_bound(DType dtype);
std::vector<OpResult> check_backend(Backend& tested, Backend& reference, const std::vector<OpCase>& cases,
                                    const std::function<void(const OpResult&)>& on_result = {});

// Builds a case's tensors on one backend from a deterministic stream of values.
class Inputs {
 public:
  Inputs(Backend& backend, DType dtype, uint64_t seed);
  Tensor normal(const Shape& shape, double scale = 1.0);           // in the case's dtype
  Tensor normal_as(const Shape& shape, DType dtype, double scale);  // in another one
  Tensor positive(const Shape& shape, double low, double high);     // uniform in [low, high)
  Tensor ids(const Shape& shape, int64_t low, int64_t high, double ignored_fraction = 0);  // int32
  Tensor values(const Shape& shape, const std::vector<double>& v, DType dtype);
  Backend& backend() { return backend_; }
  DType dtype() const { return dtype_; }

 private:
  double uniform();
  Backend& backend_;
  DType dtype_;
  uint64_t seed_, counter_ = 0;
};

Output output(Backend& backend, const std::string& name, const Tensor& t);

}  // namespace tripod::backend_check
