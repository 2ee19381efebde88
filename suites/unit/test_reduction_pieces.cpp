// The cutting and packing of large reductions (comm/reduction_pieces.h); the multi-rank suite
// checks the pieces' results against whole messages.
#include <gtest/gtest.h>

#include "comm/reduction_pieces.h"
#include "core/host_memory.h"

#include <string>
#include <vector>

namespace tripod {
namespace {

TEST(ReductionPieces, EqualPiecesAndAShorterLastOne) {
  // all_reduce of 10 floats in 16-byte pieces: 4 + 4 + 2.
  const auto pieces = reduction_pieces(10, 1, 4, 16);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[0].first, 0);
  EXPECT_EQ(pieces[1].first, 4);
  EXPECT_EQ(pieces[2].first, 8);
  EXPECT_EQ(pieces[2].length, 2);
}

TEST(ReductionPieces, AReduceScatterPieceCountsEveryRanksColumns) {
  // 4 ranks x 8-byte elements = 32 bytes per column: 100-byte pieces hold 3 columns.
  const auto pieces = reduction_pieces(7, 4, 8, 100);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[0].length, 3);
  EXPECT_EQ(pieces[2].length, 1);
}

TEST(ReductionPieces, AtLeastOneElementAndNothingForEmpty) {
  EXPECT_EQ(reduction_pieces(5, 8, 8, 1).size(), 5u);  // a column is larger than the piece size
  EXPECT_TRUE(reduction_pieces(0, 2, 4, 64).empty());
  EXPECT_THROW(reduction_pieces(5, 2, 4, 0), Error);
}

TEST(ReductionPieces, PackTakesTheSameColumnsOfEveryBlock) {
  // 3 blocks of 5: block r holds 10r .. 10r + 4; columns 1..2 of each, rank by rank.
  Tensor in = host_alloc({15}, DType::F64);
  for (int r = 0; r < 3; ++r)
    for (int i = 0; i < 5; ++i) in.data<double>()[r * 5 + i] = 10 * r + i;
  Tensor staging = host_alloc({6}, DType::F64);
  pack_piece(in, 5, 3, {1, 2}, staging);
  const double* s = staging.data<double>();
  EXPECT_EQ(std::vector<double>(s, s + 6), (std::vector<double>{1, 2, 11, 12, 21, 22}));
  EXPECT_THROW(pack_piece(in, 5, 3, {4, 2}, staging), Error);  // past the block's end
}

// Operations that complete on their second test(), recording when each starts.
struct TwoTests final : CommRequest {
  int tests = 0;
  void wait() override { tests = 2; }
  bool test() override { return ++tests >= 2; }
};

TEST(PieceQueue, OneOperationAtATimeInTheOrderQueued) {
  auto queue = std::make_shared<PieceQueue>();
  std::vector<std::string> started;
  auto sequence = [&](const std::string& name) {
    return [&started, name](std::size_t i) {
      started.push_back(name + std::to_string(i));
      return std::make_unique<TwoTests>();
    };
  };
  QueuedRequest a(queue, 2, sequence("a")), b(queue, 2, sequence("b"));
  EXPECT_EQ(started, (std::vector<std::string>{"a0"}));  // b waits behind a
  EXPECT_FALSE(b.test());                                 // a0 tested once
  EXPECT_FALSE(b.test());                                 // a0 done: a1 starts
  EXPECT_EQ(started, (std::vector<std::string>{"a0", "a1"}));
  b.wait();  // runs a to its end first
  EXPECT_EQ(started, (std::vector<std::string>{"a0", "a1", "b0", "b1"}));
  EXPECT_TRUE(a.test());
  EXPECT_TRUE(b.test());
}

TEST(PieceQueue, AnEmptySequenceIsDoneAndADroppedOneIsWaitedFor) {
  auto queue = std::make_shared<PieceQueue>();
  int started = 0;
  auto count = [&](std::size_t) {
    ++started;
    return std::make_unique<TwoTests>();
  };
  QueuedRequest empty(queue, 0, count);
  EXPECT_TRUE(empty.test());
  { QueuedRequest dropped(queue, 3, count); }
  EXPECT_EQ(started, 3);
  QueuedRequest next(queue, 1, count);  // nothing ahead of it any more: starts at once
  EXPECT_EQ(started, 4);
  next.wait();
}

}  // namespace
}  // namespace tripod
