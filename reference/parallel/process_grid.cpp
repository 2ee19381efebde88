#include "parallel/process_grid.h"

#include <algorithm>
#include <sstream>
#include <vector>

namespace tripod {

namespace {

constexpr int kTp = 0, kDp = 1, kPp = 2;
constexpr const char* kAxisNames[3] = {"tp", "dp", "pp"};

// "tp-pp-dp" -> {kTp, kPp, kDp}, fastest first; empty if it is not a permutation of the three.
std::vector<int> parse_order(const std::string& order) {
  std::vector<int> axes;
  std::stringstream in(order);
  std::string token;
  while (std::getline(in, token, '-')) {
    const auto* found = std::find(std::begin(kAxisNames), std::end(kAxisNames), token);
    if (found == std::end(kAxisNames)) return {};
    axes.push_back(static_cast<int>(found - std::begin(kAxisNames)));
  }
  std::vector<int> sorted = axes;
  std::sort(sorted.begin(), sorted.end());
  if (sorted != std::vector<int>{kTp, kDp, kPp}) return {};
  return axes;
}

std::array<int, 3> sizes_of(const GridShape& s) { return {s.tp, s.dp, s.pp}; }

}  // namespace

std::string describe(const GridShape& shape) {
  return str_cat("tp=", shape.tp, " pp=", shape.pp, " dp=", shape.dp);
}

void check_grid_layout(const GridShape& shape, int world_size, const std::string& order) {
  TRIPOD_CHECK(shape.tp >= 1 && shape.pp >= 1 && shape.dp >= 1, "layout ", describe(shape),
               ": every dimension must be at least 1");
  TRIPOD_CHECK(!parse_order(order).empty(), "layout ", describe(shape), ": order '", order,
               "' is not a permutation of tp, dp and pp joined by '-' (e.g. tp-dp-pp)");
  const long long needed = static_cast<long long>(shape.tp) * shape.pp * shape.dp;
  TRIPOD_CHECK(needed == world_size, "layout ", describe(shape), " needs ", needed, " ranks but the world has ",
               world_size);
}

ProcessGrid::ProcessGrid(const Communicator& world, GridShape shape, const std::string& order)
    : world_(&world), shape_(shape), order_(order) {
  check_grid_layout(shape_, world.size(), order_);
  const std::array<int, 3> sizes = sizes_of(shape_);
  int stride = 1;
  for (int axis : parse_order(order_)) {
    stride_[axis] = stride;
    stride *= sizes[axis];
  }
  coord_ = coord_of(world.rank());
  const GridCoord c = coord_;
  // Each group's color is the world rank of its member with coordinate 0 along the group's axis;
  // the key is the coordinate itself, so the group rank equals it.
  const std::string prefix = world.name() + "/";
  tp_ = world.split(global_rank_of(0, c.dp, c.pp), c.tp, prefix + "tp");
  dp_ = world.split(global_rank_of(c.tp, 0, c.pp), c.dp, prefix + "dp");
  pp_ = world.split(global_rank_of(c.tp, c.dp, 0), c.pp, prefix + "pp");
  const bool holds_embedding = is_first_stage() || is_last_stage();
  embedding_ = world.split(holds_embedding ? global_rank_of(c.tp, c.dp, 0) : -1, c.pp, prefix + "embedding");
}

int ProcessGrid::global_rank_of(int tp, int dp, int pp) const {
  TRIPOD_CHECK(tp >= 0 && tp < shape_.tp && dp >= 0 && dp < shape_.dp && pp >= 0 && pp < shape_.pp,
               "grid coordinate tp=", tp, " dp=", dp, " pp=", pp, " is outside the layout ", describe(shape_));
  return tp * stride_[kTp] + dp * stride_[kDp] + pp * stride_[kPp];
}

GridCoord ProcessGrid::coord_of(int global_rank) const {
  const std::array<int, 3> sizes = sizes_of(shape_);
  TRIPOD_CHECK(global_rank >= 0 && global_rank < sizes[0] * sizes[1] * sizes[2], "rank ", global_rank,
               " is outside the layout ", describe(shape_));
  auto along = [&](int axis) { return global_rank / stride_[axis] % sizes[axis]; };
  return GridCoord{along(kTp), along(kDp), along(kPp)};
}

}  // namespace tripod
