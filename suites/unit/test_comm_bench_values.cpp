// The values `tripod bench comm` sends must tell every block from every other, at every size: as
// (index + 7 rank + 13 seed) mod 61 they repeated with period 61, and an all_gather that put rank 0's
// block in every slot passed its check at 4 MiB on 2 ranks (2^19 floats, 2^19 + 7 = 61 * 8595), as
// did an alltoall that sent block 0 everywhere at 244 floats a block.
#include <gtest/gtest.h>

#include <vector>

#include "commbench/check_values.h"

namespace tripod::commbench {
namespace {

std::vector<int64_t> block_of(int rank, int64_t first_index, int64_t length, int seed) {
  std::vector<int64_t> values;
  for (int64_t i = 0; i < length; ++i) values.push_back(input_value(rank, first_index + i, seed));
  return values;
}

std::vector<int64_t> block_sizes() {
  std::vector<int64_t> sizes;
  for (int64_t b = 8; b <= 4096; ++b) sizes.push_back(b);
  for (int64_t b = 8192; b <= (int64_t{1} << 30); b *= 2) sizes.push_back(b);
  sizes.push_back(1 << 19);  // the 4 MiB all_gather of 2 ranks, already among the powers: the case that passed
  return sizes;
}

TEST(CommBenchValues, TwoRanksBlocksDifferAtEveryBlockSize) {
  // all_gather: rank r's block is indexed from r * block; 64 elements of each are compared.
  for (int64_t block : block_sizes())
    for (int seed : {0, 1})
      for (int r = 1; r < 8; ++r)
        ASSERT_NE(block_of(0, 0, 64, seed), block_of(r, r * block, 64, seed)) << "block " << block << ", rank " << r;
}

TEST(CommBenchValues, OneRanksBlocksDifferAtEveryBlockSize) {
  // alltoall and reduce_scatter: block j of one rank's buffer starts at j * block.
  for (int64_t block : block_sizes())
    for (int j = 1; j < 8; ++j)
      ASSERT_NE(block_of(3, 0, 64, 0), block_of(3, j * block, 64, 0)) << "block " << block << ", block index " << j;
}

TEST(CommBenchValues, ValuesStaySmallPositiveIntegers) {
  // 1..61: sums over ~275,000 ranks stay exact in float and int32.
  for (int r = 0; r < 4; ++r)
    for (int64_t i = 0; i < 10000; ++i) {
      const int64_t v = input_value(r, i, 2);
      ASSERT_GE(v, 1);
      ASSERT_LE(v, 61);
    }
}

}  // namespace
}  // namespace tripod::commbench
