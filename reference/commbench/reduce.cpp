// reduce (nccl-tests src/reduce.cu): the root ends with the reduction over the group of every
// rank's buffer; only the root's result is checked (the others' receive buffers are not written).
// In place it reads and writes one buffer (the receive buffer).
#include "commbench/collective_spec.h"

namespace tripod::commbench {
namespace {

double factor(int) { return 1.0; }

CollectiveCounts counts(int64_t requested_bytes, int element_size, int n) {
  return whole_buffer_counts(requested_bytes, element_size, n);
}

BufferRoles roles(const CallContext& c) {
  return {c.call.in_place ? Buffer::Recv : Buffer::Send, Buffer::Recv,
          c.rank == c.call.root ? Buffer::Recv : Buffer::None, 0};
}

Source expected(int64_t j, const CallContext&) { return {Source::kReduced, j}; }

void run(const RunArgs& a) {
  a.blocking ? a.group.reduce(a.in, a.out, a.call.op, a.call.root)
             : a.group.reduce_async(a.in, a.out, a.call.op, a.call.root)->wait();
}

}  // namespace

const CollectiveSpec& reduce_spec() {
  static const CollectiveSpec spec{.collective = Collective::Reduce, .name = "reduce", .program = "reduce_perf",
                                   .reduction = true, .rooted = true, .blocked = false, .needs_scratch = false,
                                   .bus_factor = factor, .counts = counts, .roles = roles, .expected = expected,
                                   .run = run};
  return spec;
}

}  // namespace tripod::commbench
