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
    SingleDeviceLayers layers(vocab, 1);
    layers.loss_forward(be, got_losses, got_logits, target_tensor);
    layers.loss_backward(be, got_logits, target_tensor, 1.0 / 29);
    EXPECT_EQ(to_host_f64(be, got_losses), to_host_f64(be, want_losses)) << dtype_name(dt);
    EXPECT_EQ(to_host_f64(be, got_logits), to_host_f64(be, want_logits)) << dtype_name(dt);
  }
}

// Rows padded to a multiple (Backend::gemm_row_multiple, as a GPU's logits are): the padding
// columns hold anything, no softmax reads them and their gradient is zero; the vocabulary's
// columns get the unpadded bits.
TEST(SingleDeviceLoss, PaddedRowsGiveTheUnpaddedBitsAndAZeroPaddingGradient) {
  Backend& be = testing::shared_test_backend();
  const int64_t rows = 6, vocab = 13;
  SingleDeviceLayers padded(vocab, 8), plain(vocab, 1);
  const int64_t width = padded.local_width(LinearRole::LmHead, vocab);
  ASSERT_EQ(width, 16);
  EXPECT_EQ(plain.local_width(LinearRole::LmHead, vocab), vocab);
  EXPECT_EQ(padded.local_width(LinearRole::Fc, 12), 12);  // only the logits are padded
  std::vector<int32_t> targets = {0, 12, -1, 5, 7, 12};
  const Tensor target_tensor = be.alloc({rows}, DType::I32);
  be.upload(targets.data(), target_tensor);
  std::vector<double> values(static_cast<std::size_t>(rows * width));
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<double>((i * 7919) % 23) * 0.37 - 4;
  std::vector<double> unpadded;
  for (int64_t r = 0; r < rows; ++r)
    unpadded.insert(unpadded.end(), values.begin() + r * width, values.begin() + r * width + vocab);
  for (int64_t r = 0; r < rows; ++r) values[r * width + vocab] = 1e30;  // padding no softmax may read
  const Tensor wide = be.alloc({rows, width}, DType::F64), narrow = be.alloc({rows, vocab}, DType::F64);
  from_host_f64(be, values, wide);
  from_host_f64(be, unpadded, narrow);
  const Tensor wide_losses = be.alloc({rows}, DType::F64), narrow_losses = be.alloc({rows}, DType::F64);
  padded.loss_forward(be, wide_losses, wide, target_tensor);
  plain.loss_forward(be, narrow_losses, narrow, target_tensor);
  EXPECT_EQ(to_host_f64(be, wide_losses), to_host_f64(be, narrow_losses));
  padded.loss_backward(be, wide, target_tensor, 0.25);
  plain.loss_backward(be, narrow, target_tensor, 0.25);
  const std::vector<double> wide_grad = to_host_f64(be, wide), narrow_grad = to_host_f64(be, narrow);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < width; ++c)
      EXPECT_EQ(wide_grad[r * width + c], c < vocab ? narrow_grad[r * vocab + c] : 0.0) << r << ", " << c;
  const std::string narrow_error = [&] {
    try {
      padded.loss_forward(be, narrow_losses, narrow, target_tensor);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  }();
  EXPECT_NE(narrow_error.find("13 columns, 16 expected"), std::string::npos) << narrow_error;
}

// Without a forward, or a second time after one (the logits are the gradient then, and the kept
// logsumexp was dropped with its use, so that no entry outlives its activations).
TEST(SingleDeviceLoss, ABackwardWithoutItsForwardIsAnError) {
  Backend& be = testing::shared_test_backend();
  const Tensor logits = be.alloc({2, 5}, DType::F32), targets = be.alloc({2}, DType::I32);
  const Tensor losses = be.alloc({2}, DType::F32);
  SingleDeviceLayers layers(5, 1);
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
