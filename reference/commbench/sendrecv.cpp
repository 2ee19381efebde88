// sendrecv (nccl-tests src/sendrecv.cu): a ring, each rank sends to r+1 and receives from r-1.
// It has no in-place form in MPI (a pending send buffer may not be received into); in place it
// does what MPI_Sendrecv_replace does: receive into a scratch buffer, then copy it over the sent one.
#include "commbench/collective_spec.h"

namespace tripod::commbench {
namespace {

double factor(int) { return 1.0; }

CollectiveCounts counts(int64_t requested_bytes, int element_size, int n) {
  return whole_buffer_counts(requested_bytes, element_size, n);
}

BufferRoles roles(const CallContext& c) {
  const bool in_place = c.call.in_place;
  return {in_place ? Buffer::Recv : Buffer::Send, in_place ? Buffer::Scratch : Buffer::Recv, Buffer::Recv, 0};
}

Source expected(int64_t j, const CallContext& c) { return {(c.rank - 1 + c.size) % c.size, j}; }

// Both directions must be in flight at once (a blocking send first would deadlock the ring), so
// sendrecv always uses the async forms.
void run(const RunArgs& a) {
  const int rank = a.group.rank(), size = a.group.size();
  auto sent = a.group.send_async(a.in, (rank + 1) % size, 0);
  auto received = a.group.recv_async(a.out, (rank - 1 + size) % size, 0);
  sent->wait();
  received->wait();
  if (a.call.in_place && a.out.bytes() > 0) a.backend.copy(a.out, a.in);
}

}  // namespace

const CollectiveSpec& sendrecv_spec() {
  static const CollectiveSpec spec{.collective = Collective::SendRecv, .name = "sendrecv",
                                   .program = "sendrecv_perf", .reduction = false, .rooted = false,
                                   .blocked = false, .needs_scratch = true, .bus_factor = factor,
                                   .counts = counts, .roles = roles, .expected = expected, .run = run};
  return spec;
}

}  // namespace tripod::commbench
