// Backend::adamw_runs's unfused form: a call of adamw a run, on the run's views of the four
// buffers. The CPU backends run it; the CUDA backend launches once for all the runs
// (backend/cuda/kernels/adamw_runs.cu), the same arithmetic per element.
#include <algorithm>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"

namespace tripod {

void Backend::check_adamw_runs(const Tensor& params, const Tensor& grads, const Tensor& m, const Tensor& v,
                               const std::vector<AdamWRun>& runs) const {
  const int64_t n = params.numel();
  for (const Tensor* t : {&grads, &m, &v})
    TRIPOD_CHECK(t->numel() == n && t->dtype() == params.dtype() && t->device() == params.device(),
                 "adamw_runs: the buffers must be as long as the parameters (", params.describe(),
                 "), of their dtype and ", "device; got ", t->describe());
  std::vector<AdamWRun> sorted = runs;
  std::sort(sorted.begin(), sorted.end(), [](const AdamWRun& a, const AdamWRun& b) { return a.offset < b.offset; });
  int64_t end = 0;
  for (const AdamWRun& r : sorted) {
    TRIPOD_CHECK(r.offset >= 0 && r.length >= 0 && r.offset + r.length <= n, "adamw_runs: run [", r.offset, ", ",
                 r.offset + r.length, ") is outside the ", n, " elements of ", params.describe());
    check(r.length == 0 || r.offset >= end, "adamw_runs: run [", r.offset, ", ", r.offset + r.length,
          ") overlaps another run (up to ", end, ")");
    if (r.length > 0) end = r.offset + r.length;
  }
}

void Backend::adamw_runs(const Tensor& params, const Tensor& grads, const Tensor& m, const Tensor& v,
                         const std::vector<AdamWRun>& runs, double lr, double beta1, double beta2, double eps,
                         int64_t step, double grad_scale) {
  check_adamw_runs(params, grads, m, v, runs);
  for (const AdamWRun& r : runs) {
    if (r.length == 0) continue;
    auto span = [&](const Tensor& t) { return t.view(r.offset, {r.length}); };
    adamw(span(params), span(grads), span(m), span(v), lr, beta1, beta2, eps, r.weight_decay, step, grad_scale);
  }
}

}  // namespace tripod
