#include "backend/check/backend_check.h"

#include <cmath>

#include "backend/transfer.h"
#include "core/counter_rng.h"
#include "core/error.h"

namespace tripod::backend_check {

Inputs::Inputs(Backend& backend, DType dtype, uint64_t seed) : backend_(backend), dtype_(dtype), seed_(seed) {}

double Inputs::uniform() { return CounterRng(seed_, "backend-check").uniform(counter_++); }

Tensor Inputs::values(const Shape& shape, const std::vector<double>& v, DType dtype) {
  Tensor t = backend_.alloc(shape, dtype);
  from_host_f64(backend_, v, t);
  return t;
}

Tensor Inputs::normal_as(const Shape& shape, DType dtype, double scale) {
  const CounterRng rng(seed_, "backend-check");
  std::vector<double> v(static_cast<std::size_t>(shape_numel(shape)));
  for (double& x : v) x = scale * rng.normal(counter_++);
  return values(shape, v, dtype);
}

Tensor Inputs::normal(const Shape& shape, double scale) { return normal_as(shape, dtype_, scale); }

Tensor Inputs::positive(const Shape& shape, double low, double high) {
  std::vector<double> v(static_cast<std::size_t>(shape_numel(shape)));
  for (double& x : v) x = low + (high - low) * uniform();
  return values(shape, v, dtype_);
}

Tensor Inputs::ids(const Shape& shape, int64_t low, int64_t high, double ignored_fraction) {
  std::vector<int32_t> v(static_cast<std::size_t>(shape_numel(shape)));
  for (int32_t& x : v) {
    const bool ignored = uniform() < ignored_fraction;
    const double id = std::floor(static_cast<double>(low) + static_cast<double>(high - low) * uniform());
    x = ignored ? -1 : static_cast<int32_t>(id);
  }
  Tensor t = backend_.alloc(shape, DType::I32);
  backend_.upload(v.data(), t);  // ids are integers: uploaded as they are, never through fp64 values
  return t;
}

Output output(Backend& backend, const std::string& name, const Tensor& t) {
  return {name, t.dtype(), to_host_f64(backend, t)};
}

double output_bound(DType dtype) {
  switch (dtype) {
    case DType::F64: return 1e-12;
    case DType::F32: return 1e-5;
    case DType::BF16: return 1.0 / 256;
    case DType::I32: return 0;
  }
  return 0;
}

namespace {

void compare(const std::vector<Output>& got, const std::vector<Output>& ref, OpResult& r) {
  check(got.size() == ref.size(), r.op, ": the backends returned ", got.size(), " and ", ref.size(), " outputs");
  r.max_rel = 0;
  bool chosen = false;  // an output is reported yet
  for (std::size_t i = 0; i < ref.size(); ++i) {
    if (got[i].not_comparable || ref[i].not_comparable) continue;
    const std::vector<double>& a = got[i].values;
    const std::vector<double>& b = ref[i].values;
    check(a.size() == b.size(), r.op, ": output ", ref[i].name, " has ", a.size(), " elements, the reference ",
          b.size());
    double scale = 0, worst = 0;
    for (std::size_t k = 0; k < b.size(); ++k) {
      if (std::isfinite(b[k])) scale = std::max(scale, std::fabs(b[k]));  // infinities are compared exactly
      const bool same = a[k] == b[k] || (std::isnan(a[k]) && std::isnan(b[k]));
      if (!same) r.bit_identical = false;
      // A NaN or infinity where the reference has a number (or the reverse) is infinitely wrong.
      const double d = same ? 0.0 : (std::isfinite(a[k]) && std::isfinite(b[k]) ? std::fabs(a[k] - b[k]) : INFINITY);
      worst = std::max(worst, d);
    }
    const double relative_bound = ref[i].bound > 0 ? ref[i].bound : output_bound(ref[i].dtype);
    const double bound = relative_bound * (scale > 0 ? scale : 1.0);
    const double rel = worst / (scale > 0 ? scale : 1.0);
    const double ratio = bound > 0 ? worst / bound : (worst > 0 ? INFINITY : 0.0);
    // The row is the output nearest its bound, with that output's bound: the case dtype's bound beside
    // the largest relative error printed 3e-3 against 1e-5 as PASS (a bf16 operand of an fp32 case)
    // and named a bf16 gradient within its bound where an fp32 loss failed.
    if (!chosen || ratio > r.error_over_bound || (ratio == r.error_over_bound && rel > r.max_rel)) {
      chosen = true;
      r.error_over_bound = ratio;
      r.max_rel = rel;
      r.max_abs = worst;
      r.bound = relative_bound;
      r.worst_output = ref[i].name;
    }
    if (!(worst <= bound)) r.pass = false;
  }
}

}  // namespace

std::vector<OpResult> check_backend(Backend& tested, Backend& reference, const std::vector<OpCase>& cases,
                                    const std::function<void(const OpResult&)>& on_result) {
  std::vector<OpResult> results;
  for (const OpCase& c : cases) {
    OpResult r;
    r.op = c.op;
    r.shape = c.shape;
    r.dtype = c.dtype;
    r.bound = output_bound(c.dtype);
    try {
      const std::vector<Output> ref = c.run(reference);
      const std::vector<Output> got = c.run(tested);
      compare(got, ref, r);
    } catch (const std::exception& e) {  // any exception fails the case, not the whole check
      r.pass = false;
      r.bit_identical = false;
      r.error = e.what();
    }
    results.push_back(r);
    if (on_result) on_result(r);
  }
  return results;
}

}  // namespace tripod::backend_check
