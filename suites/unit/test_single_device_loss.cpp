// The single-device loss (model/layer_ops.h) runs the Backend's windowed cross-entropy over the
// whole vocabulary, keeping each row's logsumexp from the forward for the backward. It must give
// the bits of the whole-vocabulary operations it replaced, ignored targets included, in fp64 and
// fp32, and a backward without its forward is an error, not a gradient from stale numbers. A
// training forward's loss with its gradient in one pass (loss_forward_with_gradient, Backend::
// cross_entropy_with_gradient) must give the bits of the forward then the backward.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend/transfer.h"
#include "core/error.h"
#include "model/layer_ops.h"
#include "support/error_text.h"
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

// Logits [rows, width] of `dt` (bf16: bf16-mixed's, with fp32 statistics), the same values each
// call, padding columns past `vocab` holding a value no softmax may read.
Tensor loss_logits(Backend& be, int64_t rows, int64_t width, int64_t vocab, DType dt) {
  const Tensor wide = be.alloc({rows, width}, dt == DType::BF16 ? DType::F32 : dt);
  fill_random(be, wide, 7);
  be.scale(wide, 8.0);  // a spread that makes the softmax far from uniform
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = vocab; c < width; ++c) be.fill(wide.view(r * width + c, {1}), 1e30);
  if (dt != DType::BF16) return wide;
  const Tensor rounded = be.alloc({rows, width}, DType::BF16);
  be.convert(wide, rounded);
  return rounded;
}

TEST(SingleDeviceLoss, TheLossWithItsGradientInOnePassGivesTheBitsOfTheForwardThenTheBackward) {
  Backend& be = testing::shared_test_backend();
  const int64_t rows = 37, vocab = 1031;  // odd sizes: no block or vector width divides them
  std::vector<int32_t> targets(rows);
  for (int64_t r = 0; r < rows; ++r) targets[r] = r % 9 == 4 ? -1 : static_cast<int32_t>((r * 389) % vocab);
  targets[5] = static_cast<int32_t>(vocab - 1);  // the last column's onehot
  const Tensor target_tensor = be.alloc({rows}, DType::I32);
  be.upload(targets.data(), target_tensor);
  for (const int64_t multiple : {int64_t{1}, int64_t{8}})
    for (DType dt : {DType::F64, DType::F32, DType::BF16}) {
      SingleDeviceLayers layers(vocab, multiple);
      const int64_t width = layers.local_width(LinearRole::LmHead, vocab);
      const DType stats = dt == DType::BF16 ? DType::F32 : dt;
      const std::string label = std::string(dtype_name(dt)) + " rows of " + std::to_string(width);
      const Tensor want = loss_logits(be, rows, width, vocab, dt), want_losses = be.alloc({rows}, stats);
      layers.loss_forward(be, want_losses, want, target_tensor);
      layers.loss_backward(be, want, target_tensor, 1.0 / 29);
      const Tensor got = loss_logits(be, rows, width, vocab, dt), got_losses = be.alloc({rows}, stats);
      EXPECT_TRUE(layers.loss_forward_with_gradient(be, got_losses, got, target_tensor, 1.0 / 29)) << label;
      EXPECT_EQ(to_host_f64(be, got_losses), to_host_f64(be, want_losses)) << label;
      EXPECT_EQ(to_host_f64(be, got), to_host_f64(be, want)) << label;
      // The Backend's own separate calls (what a device backend falls back to): the same bits.
      const Tensor apart = loss_logits(be, rows, width, vocab, dt), apart_losses = be.alloc({rows}, stats);
      be.Backend::cross_entropy_with_gradient(apart_losses, apart, target_tensor, vocab, 1.0 / 29);
      EXPECT_EQ(to_host_f64(be, apart_losses), to_host_f64(be, want_losses)) << label;
      EXPECT_EQ(to_host_f64(be, apart), to_host_f64(be, want)) << label;
    }
}

// A target outside the vocabulary is an error naming it, before any row is overwritten; fp32
// logits that the bf16-operand policy rounds to a separate operand are not their gradient's
// operand: the backend refuses them and the layers leave the gradient to the backward.
TEST(SingleDeviceLoss, TheOnePassFormRefusesBadTargetsAndLogitsRoundedAsOperands) {
  auto backend = testing::make_test_backend();
  Backend& be = *backend;
  const int64_t rows = 3, vocab = 7;
  const std::vector<int32_t> bad = {1, 7, 2};
  const Tensor targets = be.alloc({rows}, DType::I32), losses = be.alloc({rows}, DType::F32);
  be.upload(bad.data(), targets);
  const Tensor logits = loss_logits(be, rows, vocab, vocab, DType::F32);
  const std::vector<double> before = to_host_f64(be, logits);
  const std::string error = expected_error(
      [&] { be.cross_entropy_with_gradient(losses, logits, targets, vocab, 0.5); });
  EXPECT_NE(error.find("target id 7 at position 1 is outside the vocabulary of 7"), std::string::npos) << error;
  EXPECT_EQ(to_host_f64(be, logits), before);

  const std::vector<int32_t> good = {1, 6, -1};
  be.upload(good.data(), targets);
  be.set_fp32_matmul(Fp32Matmul::Bf16Operands);
  const std::string refused = expected_error(
      [&] { be.cross_entropy_with_gradient(losses, logits, targets, vocab, 0.5); });
  EXPECT_NE(refused.find("rounded as the LM head's operand"), std::string::npos) << refused;
  SingleDeviceLayers layers(vocab, 1);
  EXPECT_FALSE(layers.loss_forward_with_gradient(be, losses, logits, targets, 0.5));
  EXPECT_EQ(to_host_f64(be, logits), before);  // the losses only: the backward writes the operand
  EXPECT_EQ(layers.loss_backward_operand(be, logits, targets, 0.5).dtype(), DType::BF16);
}

}  // namespace
}  // namespace tripod
