// broadcast (nccl-tests src/broadcast.cu): every rank ends with the root's buffer. In place it uses
// one buffer on every rank (the receive buffer). Out of place the root sends from its send buffer
// and the others receive into their receive buffers (MPI_Bcast has a single buffer, so the call
// is given the one buffer each rank uses); only the root has data to fill.
#include "commbench/collective_spec.h"

namespace tripod::commbench {
namespace {

double factor(int) { return 1.0; }

CollectiveCounts counts(int64_t requested_bytes, int element_size, int n) {
  return whole_buffer_counts(requested_bytes, element_size, n);
}

BufferRoles roles(const CallContext& c) {
  const bool root = c.rank == c.call.root;
  const Buffer buffer = !c.call.in_place && root ? Buffer::Send : Buffer::Recv;
  return {root ? buffer : Buffer::None, buffer, buffer, 0};
}

Source expected(int64_t j, const CallContext& c) { return {c.call.root, j}; }

void run(const RunArgs& a) {
  a.blocking ? a.group.broadcast(a.out, a.call.root) : a.group.broadcast_async(a.out, a.call.root)->wait();
}

}  // namespace

const CollectiveSpec& broadcast_spec() {
  static const CollectiveSpec spec{.collective = Collective::Broadcast, .name = "broadcast",
                                   .program = "broadcast_perf", .reduction = false, .rooted = true,
                                   .blocked = false, .needs_scratch = false, .bus_factor = factor,
                                   .counts = counts, .roles = roles, .expected = expected, .run = run};
  return spec;
}

}  // namespace tripod::commbench
