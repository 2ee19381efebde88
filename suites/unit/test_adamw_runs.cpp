// AdamW::update calls the backend once per run of consecutive tensors with the same weight decay
// that lie back to back in the parameter, gradient and moment buffers. AdamW is elementwise with
// the same coefficients across such a run, so the result must be the bits of one call a tensor.
#include <gtest/gtest.h>

#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/transfer.h"
#include "kernel_math_test_util.h"
#include "model/param_spec.h"
#include "optim/adamw.h"

namespace tripod {
namespace {

class CountingCpuBackend : public cpu::CpuBackend {
 public:
  CountingCpuBackend() : cpu::CpuBackend(Device::Host, "cpu") {}
  void adamw(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, double lr, double beta1,
             double beta2, double eps, double weight_decay, int64_t step, double grad_scale) override {
    ++adamw_calls;
    cpu::CpuBackend::adamw(param, grad, m, v, lr, beta1, beta2, eps, weight_decay, step, grad_scale);
  }
  int adamw_calls = 0;
};

// GPT-2's list of tensors (12 layers, tied embeddings) at small widths: the runs depend only on
// the order of the tensors and on which of them decay.
ModelConfig twelve_small_layers() {
  ModelConfig c;
  c.n_layer = 12;
  c.n_head = 2;
  c.d_model = 8;
  c.d_ff = 32;
  c.vocab_size = 16;
  c.context = 8;
  return c;
}

TEST(AdamWRuns, OneCallARunGivesTheBitsOfOneCallATensor) {
  const std::vector<ParamSpec> specs = gpt_param_specs(twelve_small_layers());
  ASSERT_EQ(specs.size(), 148u);  // as GPT-2 124M's
  const int64_t n = count_params(specs);
  for (const auto& [policy, want_calls] : std::vector<std::pair<DecayPolicy, int>>{
           {DecayPolicy::Matrices, 98}, {DecayPolicy::All, 1}, {DecayPolicy::None, 1}}) {
    CountingCpuBackend be;
    ParamSet params(specs, be, DType::F32), grads(specs, be, DType::F32);
    ParamSet reference(specs, be, DType::F32), m(specs, be, DType::F32), v(specs, be, DType::F32);
    const std::vector<double> initial = testing::uniform_values<double>(n, 61, "test.adamw_runs.params", -0.1, 0.1);
    from_host_f64(be, initial, params.flat());
    from_host_f64(be, initial, reference.flat());
    from_host_f64(be, testing::uniform_values<double>(n, 62, "test.adamw_runs.grads", -1, 1), grads.flat());
    AdamWConfig config;
    config.decay_policy = policy;
    AdamW optimizer(specs, be, DType::F32, config);
    for (int64_t step = 1; step <= 2; ++step) {
      be.adamw_calls = 0;
      optimizer.update(params, grads, 6e-4, step, 0.7);
      EXPECT_EQ(be.adamw_calls, want_calls) << "step " << step;
      for (std::size_t i = 0; i < specs.size(); ++i)  // the reference: one call a tensor
        be.adamw(reference.at(i), grads.at(i), m.at(i), v.at(i), 6e-4, config.beta1, config.beta2, config.eps,
                 decays(specs[i], policy) ? config.weight_decay : 0.0, step, 0.7);
    }
    EXPECT_EQ(to_host_f64(be, params.flat()), to_host_f64(be, reference.flat()));
    EXPECT_EQ(to_host_f64(be, optimizer.m().flat()), to_host_f64(be, m.flat()));
    EXPECT_EQ(to_host_f64(be, optimizer.v().flat()), to_host_f64(be, v.flat()));
  }
}

// Tensors that do not lie back to back (a padded layout, as ZeRO's shards use) are not merged.
TEST(AdamWRuns, TensorsWithAGapBetweenThemAreSeparateCalls) {
  std::vector<ParamSpec> specs = gpt_param_specs(twelve_small_layers());
  specs.resize(2);  // wte and wpe: both decay, a run of two when packed
  const int64_t wte = shape_numel(specs[0].shape), wpe = shape_numel(specs[1].shape);
  const std::vector<int64_t> gapped{0, wte + 4};
  CountingCpuBackend be;
  ParamSet params(specs, be, DType::F32, gapped, gapped[1] + wpe);
  ParamSet grads(specs, be, DType::F32);
  AdamW optimizer(specs, be, DType::F32, AdamWConfig{});
  optimizer.update(params, grads, 1e-3, 1);
  EXPECT_EQ(be.adamw_calls, 2);
  ParamSet packed(specs, be, DType::F32);
  be.adamw_calls = 0;
  optimizer.update(packed, grads, 1e-3, 2);
  EXPECT_EQ(be.adamw_calls, 1);
}

}  // namespace
}  // namespace tripod
