// Gradient check of every parameter tensor of a tiny GPT against central finite differences, in
// fp64. The five-point stencil (f(-2h) - 8f(-h) + 8f(h) - f(2h)) / 12h with h = 1e-3 has a
// truncation error O(h^4 f^(5)) ~ 1e-12 and a rounding error ~ 1e-16 * |loss| / h ~ 3e-13, so the
// finite difference is good to ~1e-12 absolute. We require relative error <= 1e-6, with
// relative error = |fd - analytic| / max(|fd|, |analytic|, 1e-6): the floor keeps gradients that are
// (almost) exactly zero, e.g. of unused position rows, from dividing ~1e-13 noise by ~0.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "support/test_backend.h"
#include "core/counter_rng.h"
#include "model_test_util.h"
#include "train/trainer.h"

namespace tripod {
namespace {

class GradCheck : public ::testing::TestWithParam<bool> {};

double loss_of(Trainer& trainer, const data::Batch& b) {
  LossSum s = trainer.model().forward(trainer.params(), b.tokens.data(), b.targets.data(), b.batch, b.seq_len);
  return read_scalar(trainer.backend(), s.sum) / static_cast<double>(s.n_valid);
}

TEST_P(GradCheck, EveryParameterTensorMatchesFiniteDifferences) {
  const bool tied = GetParam();
  RunConfig config = testing::tiny_run_config("fp64", tied);
  auto backend = testing::make_test_backend();
  Trainer trainer(config, *backend);
  trainer.initialise();
  // Perturb LayerNorm gains and biases away from 1/0 so their gradients are generic.
  for (std::size_t i = 0; i < trainer.params().size(); ++i) {
    const Tensor& t = trainer.params().at(i);
    std::vector<double> p = to_host_f64(*backend, t);
    const CounterRng rng(99, trainer.params().specs()[i].name);
    for (int64_t j = 0; j < t.numel(); ++j) p[static_cast<std::size_t>(j)] += 0.1 * rng.normal(static_cast<uint64_t>(j));
    from_host_f64(*backend, p, t);
  }
  const data::Batch batch = testing::random_batch(3, 5, config.model.vocab_size, 7);

  LossSum s = trainer.model().forward(trainer.params(), batch.tokens.data(), batch.targets.data(), 3, 5);
  backend->fill(trainer.grads().flat(), 0.0);
  trainer.model().backward(trainer.params(), trainer.grads(), 1.0 / static_cast<double>(s.n_valid));

  const double h = 1e-3;
  for (std::size_t i = 0; i < trainer.params().size(); ++i) {
    const std::string& name = trainer.params().specs()[i].name;
    const Tensor& param = trainer.params().at(i);
    const std::vector<double> p = to_host_f64(*backend, param);
    const std::vector<double> g = to_host_f64(*backend, trainer.grads().at(i));
    const int64_t n = param.numel();
    // Up to 8 elements per tensor: the first, the last and evenly spaced ones between.
    const int64_t probes = std::min<int64_t>(8, n);
    double worst = 0;
    for (int64_t k = 0; k < probes; ++k) {
      const int64_t j = probes == 1 ? 0 : k * (n - 1) / (probes - 1);
      const double saved = p[static_cast<std::size_t>(j)];
      const Tensor element = param.reshape({n}).view(j, {1});
      auto loss_at = [&](double delta) {
        from_host_f64(*backend, {saved + delta}, element);
        const double loss = loss_of(trainer, batch);
        from_host_f64(*backend, {saved}, element);
        return loss;
      };
      const double fd = (loss_at(-2 * h) - 8 * loss_at(-h) + 8 * loss_at(h) - loss_at(2 * h)) / (12 * h);
      const double gj = g[static_cast<std::size_t>(j)];
      const double rel = std::fabs(fd - gj) / std::max({std::fabs(fd), std::fabs(gj), 1e-6});
      worst = std::max(worst, rel);
      EXPECT_LE(rel, 1e-6) << name << "[" << j << "]: finite difference " << fd << " vs backward " << gj;
    }
    RecordProperty(name, std::to_string(worst));
  }
}

INSTANTIATE_TEST_SUITE_P(TiedAndUntied, GradCheck, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "tied" : "untied"; });

}  // namespace
}  // namespace tripod
