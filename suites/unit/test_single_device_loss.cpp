// The single-device loss (model/layer_ops.h) runs the Backend's windowed cross-entropy over the
// whole vocabulary, keeping each row's logsumexp from the forward for the backward. It must give
// the bits of the whole-vocabulary operations it replaced, ignored targets included, in fp64 and
// fp32, and a backward without its forward is an error, not a gradient from stale numbers.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend/transfer.h"
#include "core/error.h"
#include "model/layer_ops.h"
#include "support/test_backend.h"

namespace tripod {
namespace {

TEST(SingleDeviceLoss, GivesTheBitsOfTheWholeVocabularyOperations) {
  Backend& be = testing::shared_test_backend();
  const int64_t rows = 37, vocab = 1031;  // odd sizes: no block or vector width divides them
  std::vector<int32_t> targets(rows);
  for (int64_t r = 0; r < rows; ++r) targets[r] = r % 9 == 4 ? -1 : static_cast<int32_t>((r * 389) % vocab);
  for (DType dt : {DType::F64, DType::F32}) {
    const Tensor target_tensor = be.alloc({rows}, DType::I32);
    be.upload(targets.data(), target_tensor);
    auto logits_like = [&] {
      const Tensor t = be.alloc({rows, vocab}, dt);
      fill_random(be, t, 7);  // the same values each time
      be.scale(t, 8.0);       // a spread that makes the softmax far from uniform
      return t;
    };
    const Tensor want_logits = logits_like(), got_logits = logits_like();
    const Tensor want_losses = be.alloc({rows}, dt), got_losses = be.alloc({rows}, dt);
    be.cross_entropy_forward(want_losses, want_logits, target_tensor);
    be.cross_entropy_backward(want_logits, target_tensor, 1.0 / 29);
    SingleDeviceLayers layers;
    layers.loss_forward(be, got_losses, got_logits, target_tensor);
    layers.loss_backward(be, got_logits, target_tensor, 1.0 / 29);
    EXPECT_EQ(to_host_f64(be, got_losses), to_host_f64(be, want_losses)) << dtype_name(dt);
    EXPECT_EQ(to_host_f64(be, got_logits), to_host_f64(be, want_logits)) << dtype_name(dt);
  }
}

// Without a forward, or a second time after one (the logits are the gradient then, and the kept
// logsumexp was dropped with its use, so that no entry outlives its activations).
TEST(SingleDeviceLoss, ABackwardWithoutItsForwardIsAnError) {
  Backend& be = testing::shared_test_backend();
  const Tensor logits = be.alloc({2, 5}, DType::F32), targets = be.alloc({2}, DType::I32);
  const Tensor losses = be.alloc({2}, DType::F32);
  SingleDeviceLayers layers;
  auto backward_error = [&] {
    try {
      layers.loss_backward(be, logits, targets, 1.0);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(backward_error().find("loss backward without its forward"), std::string::npos);
  layers.loss_forward(be, losses, logits, targets);
  EXPECT_EQ(backward_error(), "no error");
  EXPECT_NE(backward_error().find("loss backward without its forward"), std::string::npos);
}

}  // namespace
}  // namespace tripod
