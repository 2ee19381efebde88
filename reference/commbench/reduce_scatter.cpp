// reduce_scatter (nccl-tests src/reduce_scatter.cu): rank r ends with block r of the reduction
// over the group of every rank's n blocks. In place its input is the whole receive buffer and its
// result lands in block r of it.
#include "commbench/collective_spec.h"

namespace tripod::commbench {
namespace {

double factor(int n) { return static_cast<double>(n - 1) / n; }

CollectiveCounts counts(int64_t requested_bytes, int element_size, int n) {
  return block_counts(requested_bytes, element_size, n, n, 1);
}

BufferRoles roles(const CallContext& c) {
  const Buffer result = c.call.in_place ? Buffer::Block : Buffer::Recv;
  return {c.call.in_place ? Buffer::Whole : Buffer::Send, result, result, 0};
}

Source expected(int64_t j, const CallContext& c) { return {Source::kReduced, c.rank * c.block + j}; }

void run(const RunArgs& a) {
  a.blocking ? a.group.reduce_scatter(a.in, a.out, a.call.op)
             : a.group.reduce_scatter_async(a.in, a.out, a.call.op)->wait();
}

}  // namespace

const CollectiveSpec& reduce_scatter_spec() {
  static const CollectiveSpec spec{.collective = Collective::ReduceScatter, .name = "reduce_scatter",
                                   .program = "reduce_scatter_perf", .reduction = true, .rooted = false,
                                   .blocked = true, .needs_scratch = false, .bus_factor = factor,
                                   .counts = counts, .roles = roles, .expected = expected, .run = run};
  return spec;
}

}  // namespace tripod::commbench
