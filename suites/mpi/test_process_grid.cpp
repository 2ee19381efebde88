// ProcessGrid: the rank formula of every axis order, group membership for every layout that fits
// the world, and layout errors that every rank throws identically without communicating.
#include <gtest/gtest.h>

#include "support/test_backend.h"
#include "mpi_test_util.h"

namespace tripod::testing {
namespace {

const std::vector<std::string> kOrders = {"tp-dp-pp", "tp-pp-dp", "dp-tp-pp", "dp-pp-tp", "pp-tp-dp", "pp-dp-tp"};

// Written out per order rather than derived, so it checks the grid instead of repeating it.
int expected_rank(const GridShape& s, const std::string& order, int tp, int dp, int pp) {
  if (order == "tp-dp-pp") return tp + dp * s.tp + pp * s.tp * s.dp;  // Megatron's default
  if (order == "tp-pp-dp") return tp + pp * s.tp + dp * s.tp * s.pp;
  if (order == "dp-tp-pp") return dp + tp * s.dp + pp * s.dp * s.tp;
  if (order == "dp-pp-tp") return dp + pp * s.dp + tp * s.dp * s.pp;
  if (order == "pp-tp-dp") return pp + tp * s.pp + dp * s.pp * s.tp;
  if (order == "pp-dp-tp") return pp + dp * s.pp + tp * s.pp * s.dp;
  fail("no formula for order ", order);
}

std::vector<GridShape> layouts_of(int n) {
  std::vector<GridShape> shapes;
  for (int tp = 1; tp <= n; ++tp)
    for (int pp = 1; tp * pp <= n; ++pp)
      if (n % (tp * pp) == 0) shapes.push_back(GridShape{tp, pp, n / (tp * pp)});
  return shapes;
}

// The world ranks of a group's members, in group-rank order.
std::vector<int> members(Communicator& group, int world_rank) {
  Tensor mine = host_tensor(1, DType::I32), all = host_tensor(group.size(), DType::I32);
  set(mine, 0, world_rank);
  group.all_gather(mine, all);
  std::vector<int> ranks;
  for (int64_t i = 0; i < all.numel(); ++i) ranks.push_back(static_cast<int>(get(all, i)));
  return ranks;
}

TEST(ProcessGrid, EveryLayoutAndOrder) {
  std::unique_ptr<Communicator> world = testing::test_world();
  const int me = world->rank();
  for (const GridShape& s : layouts_of(world->size()))
    for (const std::string& order : kOrders) {
      SCOPED_TRACE(describe(s) + " order " + order);
      const ProcessGrid grid(*world, s, order);
      for (int p = 0; p < s.pp; ++p)
        for (int d = 0; d < s.dp; ++d)
          for (int t = 0; t < s.tp; ++t) {
            const int g = expected_rank(s, order, t, d, p);
            ASSERT_EQ(grid.global_rank_of(t, d, p), g);
            const GridCoord c = grid.coord_of(g);
            ASSERT_TRUE(c.tp == t && c.dp == d && c.pp == p) << "coord_of(" << g << ")";
          }
      const int t = grid.tp_rank(), d = grid.dp_rank(), p = grid.pp_rank();
      EXPECT_EQ(expected_rank(s, order, t, d, p), me);

      std::vector<int> tp_group, dp_group, pp_group;
      for (int i = 0; i < s.tp; ++i) tp_group.push_back(expected_rank(s, order, i, d, p));
      for (int i = 0; i < s.dp; ++i) dp_group.push_back(expected_rank(s, order, t, i, p));
      for (int i = 0; i < s.pp; ++i) pp_group.push_back(expected_rank(s, order, t, d, i));
      EXPECT_EQ(grid.tp().rank(), t);
      EXPECT_EQ(grid.dp().rank(), d);
      EXPECT_EQ(grid.pp().rank(), p);
      EXPECT_EQ(members(grid.tp(), me), tp_group);
      EXPECT_EQ(members(grid.dp(), me), dp_group);
      EXPECT_EQ(members(grid.pp(), me), pp_group);

      if (grid.is_first_stage() || grid.is_last_stage()) {
        ASSERT_NE(grid.embedding(), nullptr);
        std::vector<int> expected = {pp_group.front()};
        if (s.pp > 1) expected.push_back(pp_group.back());
        EXPECT_EQ(members(*grid.embedding(), me), expected);
      } else {
        EXPECT_EQ(grid.embedding(), nullptr) << "middle stage " << p;
      }
    }
}

TEST(ProcessGrid, DefaultOrderIsTensorFastestThenDataThenPipeline) {
  std::unique_ptr<Communicator> world = testing::test_world();
  const int n = world->size();
  GridShape s;
  s.tp = n % 2 == 0 ? 2 : 1;
  s.dp = (n / s.tp) % 2 == 0 ? 2 : 1;
  s.pp = n / (s.tp * s.dp);
  const ProcessGrid grid(*world, s);
  EXPECT_EQ(grid.order(), "tp-dp-pp");
  EXPECT_EQ(world->rank(), grid.tp_rank() + grid.dp_rank() * s.tp + grid.pp_rank() * s.tp * s.dp);
}

TEST(ProcessGrid, BadLayoutsThrowTheSameErrorEverywhereWithoutHanging) {
  std::unique_ptr<Communicator> world = testing::test_world();
  const int n = world->size();
  auto message_of = [&](GridShape s, const std::string& order) -> std::string {
    try {
      ProcessGrid grid(*world, s, order);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_EQ(message_of({2, 2, 1}, "tp-dp-pp"),
            n == 4 ? "no error" : str_cat("layout tp=2 pp=2 dp=1 needs 4 ranks but the world has ", n));
  EXPECT_EQ(message_of({n, 2, 1}, "tp-dp-pp"),
            str_cat("layout tp=", n, " pp=2 dp=1 needs ", 2 * n, " ranks but the world has ", n));
  EXPECT_EQ(message_of({0, 1, n}, "tp-dp-pp"), str_cat("layout tp=0 pp=1 dp=", n, ": every dimension must be at least 1"));
  EXPECT_EQ(message_of({1, -1, 1}, "tp-dp-pp"), "layout tp=1 pp=-1 dp=1: every dimension must be at least 1");
  for (const std::string order : {"tp-xx-pp", "tp-dp", "tp-dp-pp-tp", "tp-tp-pp", "", "TP-DP-PP", "tp,dp,pp"}) {
    EXPECT_EQ(message_of({1, 1, n}, order), str_cat("layout tp=1 pp=1 dp=", n, ": order '", order,
                                                   "' is not a permutation of tp, dp and pp joined by '-' (e.g. tp-dp-pp)"));
  }
  const ProcessGrid grid(*world, GridShape{1, 1, n});
  EXPECT_THROW(grid.global_rank_of(0, n, 0), Error);
  EXPECT_THROW(grid.coord_of(n), Error);
  world->barrier();  // every rank got here: nobody is stuck in a split
}

}  // namespace
}  // namespace tripod::testing
