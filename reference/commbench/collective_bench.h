// One collective of `tripod bench comm` on one group: its buffers, the call itself (out of place
// and in place, through the Communicator exactly as training code makes it), deterministic inputs
// (check_values.h) and the check of every received element against the value computed locally.
// What differs between collectives (which buffer is read, written and checked, the expected
// values, the call) comes from the collective's description (collective_spec.h); this is the
// harness they share.
//
// Outputs are set to -1, never a valid result, before each checked call, so an element the
// collective failed to write is counted as wrong.
#pragma once
#include <array>
#include <cstdint>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "commbench/collective_spec.h"

namespace tripod::commbench {

class CollectiveBench {
 public:
  // Allocates buffers for the largest size once; `blocking` picks the blocking forms (MPI's
  // tuned algorithms, what MPI_Allreduce-style loops measure) or `_async` + wait().
  CollectiveBench(Communicator& group, Backend& backend, Collective collective, DType dtype, int64_t max_bytes,
                  bool blocking);
  // The bytes of those buffers (send, receive, scratch) on each rank of a group of `n`.
  static int64_t buffer_bytes(Collective collective, DType dtype, int64_t max_bytes, int n);

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
  struct BufferElements {
    int64_t send, recv, scratch;
  };
  // What the constructor allocates and buffer_bytes counts: one rule for both.
  static BufferElements buffer_elements(const CollectiveSpec& spec, DType dtype, int64_t max_bytes, int n);
  CallContext context(const CollectiveCall& call) const;
  const Tensor& view(Buffer buffer) const { return views_[static_cast<int>(buffer)]; }

  Communicator& group_;
  Backend& backend_;  // where the buffers live; filled and checked through upload/download
  const CollectiveSpec& spec_;
  DType dtype_;
  bool blocking_;
  int rank_, size_;
  Tensor send_buffer_, recv_buffer_, scratch_buffer_;  // full-size allocations
  CollectiveCounts counts_;
  std::array<Tensor, 6> views_;  // one per Buffer, for the current size (None: undefined)
};

}  // namespace tripod::commbench
