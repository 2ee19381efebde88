#include "commbench/group.h"

#include "core/error.h"

namespace tripod::commbench {

namespace {

std::string ranks_text(int n) { return str_cat(n, n == 1 ? " rank" : " ranks"); }

}  // namespace

BenchGroup make_group(const CommBenchPlan& plan, Communicator& world) {
  BenchGroup g;
  g.comm = &world;
  g.description = str_cat("1 group of ", ranks_text(world.size()), " (the world)");
  if (!plan.use_grid) return g;
  g.grid = std::make_unique<ProcessGrid>(world, plan.grid);
  const GridShape& s = plan.grid;
  const GridCoord c = g.grid->coord();
  // Groups are numbered along the other two axes, the faster-varying one first.
  if (plan.group_axis == "tp") {
    g.comm = &g.grid->tp();
    g.index = c.dp + c.pp * s.dp;
  } else if (plan.group_axis == "dp") {
    g.comm = &g.grid->dp();
    g.index = c.tp + c.pp * s.tp;
  } else {
    g.comm = &g.grid->pp();
    g.index = c.tp + c.dp * s.tp;
  }
  g.count = world.size() / g.comm->size();
  g.description = str_cat(g.count, " ", plan.group_axis, " group", g.count > 1 ? "s" : "", " of ",
                          ranks_text(g.comm->size()), " (layout ", describe(s), ", order ", g.grid->order(), "), all running concurrently");
  return g;
}

}  // namespace tripod::commbench
