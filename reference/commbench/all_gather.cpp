// all_gather (nccl-tests src/all_gather.cu): every rank ends with block s from rank s. Rank r's
// input is indexed from r*block in the group-wide layout, so a block delivered to the wrong place
// is caught. In place its input is block r of the receive buffer.
#include "commbench/collective_spec.h"

namespace tripod::commbench {
namespace {

double factor(int n) { return static_cast<double>(n - 1) / n; }

CollectiveCounts counts(int64_t requested_bytes, int element_size, int n) {
  return block_counts(requested_bytes, element_size, n, 1, n);
}

BufferRoles roles(const CallContext& c) {
  return {c.call.in_place ? Buffer::Block : Buffer::Send, Buffer::Recv, Buffer::Recv, c.rank * c.block};
}

// Block s came from rank s, which indexed it from s*block.
Source expected(int64_t j, const CallContext& c) { return {static_cast<int>(j / c.block), j}; }

void run(const RunArgs& a) {
  a.blocking ? a.group.all_gather(a.in, a.out) : a.group.all_gather_async(a.in, a.out)->wait();
}

}  // namespace

const CollectiveSpec& all_gather_spec() {
  static const CollectiveSpec spec{.collective = Collective::AllGather, .name = "all_gather",
                                   .program = "all_gather_perf", .reduction = false, .rooted = false,
                                   .blocked = true, .needs_scratch = false, .bus_factor = factor,
                                   .counts = counts, .roles = roles, .expected = expected, .run = run};
  return spec;
}

}  // namespace tripod::commbench
