// AdamW::update hands the backend its runs of consecutive tensors with the same weight decay that
// lie back to back in the parameter, gradient and moment buffers, all in one Backend::adamw_runs
// call (whose default makes a call of adamw a run; CUDA launches once). AdamW is elementwise with
// the same coefficients across such a run, so the result must be the bits of one call a tensor.
// Then the CUDA launch's partition of the runs into blocks (backend/kernels/adamw_runs_math.h),
// and adamw_runs' refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/kernels/adamw_runs_math.h"
#include "backend/transfer.h"
#include "kernel_math_test_util.h"
#include "model/param_spec.h"
#include "optim/adamw.h"
#include "support/error_text.h"

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
  void adamw_runs(const Tensor& params, const Tensor& grads, const Tensor& m, const Tensor& v,
                  const std::vector<AdamWRun>& runs, double lr, double beta1, double beta2, double eps, int64_t step,
                  double grad_scale) override {
    ++adamw_runs_calls;
    cpu::CpuBackend::adamw_runs(params, grads, m, v, runs, lr, beta1, beta2, eps, step, grad_scale);
  }
  int adamw_calls = 0, adamw_runs_calls = 0;
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
      be.adamw_calls = be.adamw_runs_calls = 0;
      optimizer.update(params, grads, 6e-4, step, 0.7);
      EXPECT_EQ(be.adamw_calls, want_calls) << "step " << step;
      EXPECT_EQ(be.adamw_runs_calls, 1) << "step " << step;  // every run in one backend call
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

// Every element of every run in exactly one block, and each block's run found by the search,
// runs of zero elements and runs of whole and partial blocks among them.
TEST(AdamWRuns, TheLaunchsBlocksCoverEveryRunOnce) {
  using namespace kernels;
  const std::vector<int64_t> lengths{0, 1, kAdamWBlockElements, 0, 0, kAdamWBlockElements + 1, 768, 3 * kAdamWBlockElements, 0};
  const int count = static_cast<int>(lengths.size());
  std::vector<int64_t> first_block(lengths.size() + 1);
  adamw_first_blocks(lengths.data(), count, first_block.data());
  EXPECT_EQ(first_block.back(), 0 + 1 + 1 + 0 + 0 + 2 + 1 + 3 + 0);
  std::vector<int64_t> covered(lengths.size(), 0);
  for (int64_t block = 0; block < first_block.back(); ++block) {
    const int r = adamw_run_of_block(first_block.data(), count, block);
    ASSERT_GE(r, 0);
    ASSERT_LT(r, count);
    const int64_t begin = (block - first_block[r]) * kAdamWBlockElements;
    ASSERT_LT(begin, lengths[r]) << "block " << block << " of run " << r;
    covered[r] += std::min(begin + kAdamWBlockElements, lengths[r]) - begin;
  }
  EXPECT_EQ(covered, lengths);
  EXPECT_EQ(adamw_run_of_block(first_block.data(), count, 0), 1);  // the empty run 0 shares its first block
}

TEST(AdamWRuns, RunsOutsideTheBuffersOrOverlappingAreRefused) {
  cpu::CpuBackend be(Device::Host, "cpu");
  const Tensor p = be.alloc({100}, DType::F32), g = be.alloc({100}, DType::F32), m = be.alloc({100}, DType::F32),
               v = be.alloc({100}, DType::F32), short_v = be.alloc({99}, DType::F32);
  auto run = [&](std::vector<AdamWRun> runs, const Tensor& vv) {
    return expected_error([&] { be.adamw_runs(p, g, m, vv, runs, 1e-3, 0.9, 0.95, 1e-8, 1, 1.0); });
  };
  EXPECT_NE(run({{90, 11, 0.0}}, v).find("run [90, 101) is outside the 100 elements"), std::string::npos);
  EXPECT_NE(run({{0, 10, 0.0}, {5, 10, 0.1}}, v).find("run [5, 15) overlaps another run (up to 10)"),
            std::string::npos);
  EXPECT_NE(run({{0, 10, 0.0}}, short_v).find("must be as long as the parameters"), std::string::npos);
  EXPECT_NO_THROW(be.adamw_runs(p, g, m, v, {{0, 10, 0.0}, {10, 0, 0.1}, {10, 90, 0.1}}, 1e-3, 0.9, 0.95, 1e-8, 1, 1.0));
}

}  // namespace
}  // namespace tripod
