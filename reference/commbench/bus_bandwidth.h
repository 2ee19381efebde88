// The arithmetic of nccl-tests (NVIDIA/nccl-tests src/*.cu and doc/PERFORMANCE.md), kept pure so
// that it is unit-tested against hand-computed numbers and shared by `tripod bench comm` and any
// report that reads its results. Each collective's file (all_reduce.cpp, ...) picks its counts and
// its factor from the pieces here; collective_spec.h looks them up by Collective.
//
// Sizes. nccl-tests turns a requested byte size into element counts per collective, and prints as
// "size" the larger of the send and receive buffers (count x element size):
//   all_reduce, broadcast, reduce, sendrecv   count = bytes / elem
//   all_gather, reduce_scatter, alltoall      per-rank block = (bytes/elem / n) rounded down to a
//       multiple of 16 bytes' worth of elements; the buffers hold n blocks; the printed size is the
//       total (n x block) and the printed count is the block
//
// Bandwidth. algbw = size / time (GB/s, 1 GB = 1e9 B); busbw = algbw x factor, where the factor
// makes busbw comparable with the hardware's link bandwidth whatever the rank count n:
//   all_reduce 2(n-1)/n; all_gather, reduce_scatter, alltoall (n-1)/n; broadcast, reduce, sendrecv 1
#pragma once
#include <cstdint>

namespace tripod::commbench {

// Element counts for one requested size on a group of n ranks (see the table above).
struct CollectiveCounts {
  int64_t send = 0;     // elements in each rank's send buffer
  int64_t recv = 0;     // elements in each rank's receive buffer
  int64_t printed = 0;  // nccl-tests' "count" column
  int64_t bytes = 0;    // nccl-tests' "size" column: max(send, recv) x element size
};

// all_reduce, broadcast, reduce, sendrecv: one buffer of bytes / elem elements, rounded down.
CollectiveCounts whole_buffer_counts(int64_t requested_bytes, int element_size, int n);
// all_gather, reduce_scatter, alltoall: the send and receive buffers hold `send_blocks` and
// `recv_blocks` per-rank blocks (1 or n each), the block rounded down to whole 16-byte units.
CollectiveCounts block_counts(int64_t requested_bytes, int element_size, int n, int send_blocks, int recv_blocks);

struct Bandwidth {
  double algbw = 0;  // GB/s
  double busbw = 0;  // GB/s
};
// `bytes` is the printed size (CollectiveCounts::bytes), `seconds` the time of one operation,
// `factor` the collective's bus factor for the group.
Bandwidth bandwidth(int64_t bytes, double seconds, double factor);

}  // namespace tripod::commbench
