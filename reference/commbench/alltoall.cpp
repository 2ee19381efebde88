// alltoall (nccl-tests src/alltoall.cu): block j of rank i goes to block i of rank j. In place it
// reads and writes one buffer (the receive buffer).
#include "commbench/collective_spec.h"

namespace tripod::commbench {
namespace {

double factor(int n) { return static_cast<double>(n - 1) / n; }

CollectiveCounts counts(int64_t requested_bytes, int element_size, int n) {
  return block_counts(requested_bytes, element_size, n, n, n);
}

BufferRoles roles(const CallContext& c) {
  return {c.call.in_place ? Buffer::Recv : Buffer::Send, Buffer::Recv, Buffer::Recv, 0};
}

// Block s came from rank s's block `rank`.
Source expected(int64_t j, const CallContext& c) {
  return {static_cast<int>(j / c.block), c.rank * c.block + j % c.block};
}

void run(const RunArgs& a) {
  a.blocking ? a.group.all_to_all(a.in, a.out) : a.group.all_to_all_async(a.in, a.out)->wait();
}

}  // namespace

const CollectiveSpec& alltoall_spec() {
  static const CollectiveSpec spec{.collective = Collective::AllToAll, .name = "alltoall",
                                   .program = "alltoall_perf", .reduction = false, .rooted = false,
                                   .blocked = true, .needs_scratch = false, .bus_factor = factor,
                                   .counts = counts, .roles = roles, .expected = expected, .run = run};
  return spec;
}

}  // namespace tripod::commbench
