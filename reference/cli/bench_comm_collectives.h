// One collective of `tripod bench comm` on one group: its buffers, the call itself (out of place
// and in place, through the Communicator exactly as training code makes it), deterministic
// inputs and the check of every received element against the value computed locally.
//
// Inputs: element `index` of group rank r is 1 + (index + 7r + 13*seed) mod 61. Small positive
// integers make sums over up to ~275,000 ranks exact in float and int32, so sum, min and max are
// compared exactly; avg (a sum divided by n) is compared with a relative tolerance of a few ulps,
// since another backend may scale before summing. `index` is the element's position in the
// group-wide layout (block r of an all_gather input is indexed from r*k), so a block delivered to
// the wrong place is caught too. Outputs are set to -1, never a valid result, before each checked
// call, so an element the collective failed to write is counted as wrong.
//
// In place, as described in comm/communicator.h: all_reduce, reduce and alltoall read and write
// one buffer; reduce_scatter's input is the whole buffer and its result lands in block r;
// all_gather's input is block r of the output; broadcast uses one buffer on every rank. Out of
// place, broadcast sends from the root's send buffer and receives into the others' receive
// buffers (MPI_Bcast has a single buffer). sendrecv (a ring: send to r+1, receive from r-1) has
// no in-place form in MPI (a pending send buffer may not be received into); in place it does
// what MPI_Sendrecv_replace does: receive into a scratch buffer, then copy it over the sent one.
#pragma once
#include <cstdint>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "perf/bus_bandwidth.h"

namespace tripod::cli {

// nccl-tests' type names: "float", "double", "int32".
std::string nccl_type_name(DType dtype);
DType parse_nccl_type(const std::string& name);  // throws for other names ("prod"-like requests)

struct CollectiveCall {
  ReduceOp op = ReduceOp::Sum;  // reductions only
  int root = 0;                 // broadcast and reduce only (a rank of the group)
  bool in_place = false;
};

class CollectiveBench {
 public:
  // Allocates buffers for the largest size once; `blocking` picks the blocking forms (MPI's
  // tuned algorithms, what MPI_Allreduce-style loops measure) or `_async` + wait().
  CollectiveBench(Communicator& group, Backend& backend, Collective collective, DType dtype, int64_t max_bytes,
                  bool blocking);

  // Selects the size for the calls that follow (nccl-tests' counts for `requested_bytes`).
  void set_size(int64_t requested_bytes);
  const CollectiveCounts& counts() const { return counts_; }

  void run(const CollectiveCall& call);                     // one operation
  void fill(const CollectiveCall& call, int seed);          // inputs for `call`, outputs to -1
  int64_t count_wrong(const CollectiveCall& call, int seed) const;  // after fill + run
  // Debug: corrupts the first element this rank checks (if it checks any), as a faulty transport
  // would, to prove the check fails. Returns whether an element was corrupted.
  bool corrupt_result(const CollectiveCall& call);

 private:
  Tensor input(const CollectiveCall& call) const;   // what this rank sends
  Tensor result(const CollectiveCall& call) const;  // what this rank checks (undefined: nothing)

  Communicator& group_;
  Backend& backend_;  // where the buffers live; filled and checked through upload/download
  Collective collective_;
  DType dtype_;
  bool blocking_;
  int rank_, size_;
  Tensor send_buffer_, recv_buffer_, scratch_buffer_;  // full-size allocations
  CollectiveCounts counts_;
  Tensor send_, recv_, block_, whole_, scratch_;  // views for the current size
};

}  // namespace tripod::cli
