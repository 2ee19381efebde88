// ProcessGrid: the world's ranks arranged as a tp x dp x pp grid, and the groups along each axis.
//
// The order string lists the axes from fastest- to slowest-varying. The default "tp-dp-pp" is
// Megatron's: global_rank = tp_rank + dp_rank*tp + pp_rank*tp*dp, so the ranks of one TP group
// are consecutive (on one node, where TP's frequent all-reduces want the fast links) and a
// pipeline stage is a contiguous block. Any permutation ("tp-pp-dp", "dp-tp-pp", ...) is accepted.
//
// Groups (each a sub-communicator whose rank is this process's coordinate along that axis):
//   tp()  same dp and pp coordinates      dp()  same tp and pp      pp()  same tp and dp
//   embedding()  the first and the last pipeline stage of the same tp and dp coordinates, which
//     both hold the (tied) token embedding and sum its gradient; on middle stages it is nullptr.
//     With pp = 1 the first stage is the last and the group is this rank alone (size 1).
//
// Construction is collective over the world (four splits). The layout is checked first, from
// arguments every rank has, so a bad layout throws the same error on every rank before any
// communication and nothing hangs.
#pragma once
#include <array>
#include <memory>
#include <string>

#include "comm/communicator.h"

namespace tripod {

struct GridShape {
  int tp = 1;
  int pp = 1;
  int dp = 1;
};

struct GridCoord {
  int tp = 0;
  int dp = 0;
  int pp = 0;
};

std::string describe(const GridShape& shape);  // "tp=2 pp=2 dp=1"

// Throws tripod::Error for a dimension below 1, an order that is not a permutation of tp, dp, pp,
// or tp*pp*dp != world_size ("layout tp=2 pp=2 dp=1 needs 4 ranks but the world has 8").
void check_grid_layout(const GridShape& shape, int world_size, const std::string& order = "tp-dp-pp");

class ProcessGrid {
 public:
  // `world` must outlive the grid.
  ProcessGrid(const Communicator& world, GridShape shape, const std::string& order = "tp-dp-pp");

  const GridShape& shape() const { return shape_; }
  const std::string& order() const { return order_; }
  const Communicator& world() const { return *world_; }

  int tp_rank() const { return coord_.tp; }
  int dp_rank() const { return coord_.dp; }
  int pp_rank() const { return coord_.pp; }
  GridCoord coord() const { return coord_; }
  bool is_first_stage() const { return coord_.pp == 0; }
  bool is_last_stage() const { return coord_.pp == shape_.pp - 1; }

  int global_rank_of(int tp, int dp, int pp) const;  // throws for coordinates outside the grid
  GridCoord coord_of(int global_rank) const;

  Communicator& tp() const { return *tp_; }
  Communicator& dp() const { return *dp_; }
  Communicator& pp() const { return *pp_; }
  Communicator* embedding() const { return embedding_.get(); }  // nullptr on middle stages

 private:
  const Communicator* world_;
  GridShape shape_;
  std::string order_;
  std::array<int, 3> stride_{};  // world-rank stride of the tp, dp and pp coordinates
  GridCoord coord_;
  std::unique_ptr<Communicator> tp_, dp_, pp_, embedding_;
};

}  // namespace tripod
