// all_reduce (nccl-tests src/all_reduce.cu): every rank ends with the reduction over the group of
// every rank's buffer. In place it reads and writes one buffer (the receive buffer).
#include "commbench/collective_spec.h"

namespace tripod::commbench {
namespace {

// Each element crosses the links twice (reduce-scatter then all-gather), n-1 of n blocks each time.
double factor(int n) { return 2.0 * (n - 1) / n; }

CollectiveCounts counts(int64_t requested_bytes, int element_size, int n) {
  return whole_buffer_counts(requested_bytes, element_size, n);
}

BufferRoles roles(const CallContext& c) {
  return {c.call.in_place ? Buffer::Recv : Buffer::Send, Buffer::Recv, Buffer::Recv, 0};
}

Source expected(int64_t j, const CallContext&) { return {Source::kReduced, j}; }

void run(const RunArgs& a) {
  a.blocking ? a.group.all_reduce(a.in, a.out, a.call.op) : a.group.all_reduce_async(a.in, a.out, a.call.op)->wait();
}

}  // namespace

const CollectiveSpec& all_reduce_spec() {
  static const CollectiveSpec spec{.collective = Collective::AllReduce, .name = "all_reduce",
                                   .program = "all_reduce_perf", .reduction = true, .rooted = false,
                                   .blocked = false, .needs_scratch = false, .bus_factor = factor,
                                   .counts = counts, .roles = roles, .expected = expected, .run = run};
  return spec;
}

}  // namespace tripod::commbench
