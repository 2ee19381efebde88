// Large reductions in pieces, one after another, so that what the library allocates for one call
// stays bounded. The pieces travel on a communicator of their own, in a queue (PieceQueue below).
//
// Why (measured, comm/mpi_communicator.h): Open MPI 4.1's non-blocking reductions (coll/libnbc)
// malloc a temporary as large as the whole message on every rank for every call: all_reduce one
// copy of the data, reduce_scatter two copies of the whole input (it is a binomial reduce to rank 0
// followed by a scatter). GPT-2's tied embedding is one 154 MiB gradient bucket, so its
// reduce-scatter alone briefly doubled ZeRO-3's parameter and gradient memory. In pieces of at
// most P bytes the temporaries stay under 2P.
//
// Every element is still reduced once over the same ranks. The order of its sum is the library's:
// Open MPI picks an algorithm by message size, group size and placement, so for three or more ranks
// a piece may be summed in another order than the whole message (same values on every rank; the
// non-blocking in-place all_reduce and reduce_scatter that gradient buckets use are binomial trees
// at any size); with two ranks a sum has one rounding, so pieces are bit-identical to the whole.
//
//   all_reduce      piece j: elements [first, first + length) of in and out, contiguous
//   reduce_scatter  piece j: columns [first, first + length) of each rank's block of in, packed
//                   rank by rank into a staging buffer of size * length elements, reduced into
//                   out[first, first + length). In place (out is in's own block) is safe: a piece
//                   writes only columns that were packed already.
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "comm/communicator.h"

namespace tripod {

struct ReductionPiece {
  int64_t first = 0;   // element offset: into in/out (all_reduce), into each block and out (reduce_scatter)
  int64_t length = 0;  // elements per block
};

// Cuts `block` elements per rank (all_reduce: the whole tensor, ranks_per_piece 1; reduce_scatter:
// out's size, ranks_per_piece = the group's size) into pieces whose input, ranks_per_piece * length
// * element_bytes, is at most max_piece_bytes (at least one element per piece). Equal lengths but
// the last; no pieces for block 0.
std::vector<ReductionPiece> reduction_pieces(int64_t block, int ranks_per_piece, std::size_t element_bytes,
                                             int64_t max_piece_bytes);

// Copies columns [piece.first, piece.first + piece.length) of each of `ranks` blocks of `block`
// elements in `in` into `staging` (ranks * piece.length elements), rank by rank. Host tensors.
void pack_piece(const Tensor& in, int64_t block, int ranks, const ReductionPiece& piece, const Tensor& staging);

// Sequences of operations (a large reduction's pieces) run one operation at a time, sequence after
// sequence in the order they were queued. A piece may start only when the one before it has
// completed, which happens inside some later test() or wait(), at a different moment on every rank;
// so pieces must not share a communicator with operations the caller issues (MPI and NCCL match
// collectives by their order on a communicator): the owner gives them one of their own. Every rank
// queues the same sequences in the same order, so every rank issues the pieces in the same order.
class PieceQueue {
 public:
  using Start = std::function<std::unique_ptr<CommRequest>(std::size_t index)>;
  struct Sequence {
    std::size_t count = 0, next = 0;
    Start start;
    std::unique_ptr<CommRequest> current;
    bool done = false;
  };
  // Queues `count` operations; the first starts at once if nothing is ahead of it.
  std::shared_ptr<Sequence> push(std::size_t count, Start start);
  bool test(const Sequence& sequence);  // advances without blocking; true once `sequence` is done
  void wait(const Sequence& sequence);  // runs the sequences ahead of it, then it

 private:
  void advance(bool block, const Sequence& until);
  std::deque<std::shared_ptr<Sequence>> queue_;
};

// One queued sequence as a request. Destroying it before it is done waits, as for any request.
class QueuedRequest final : public CommRequest {
 public:
  QueuedRequest(std::shared_ptr<PieceQueue> queue, std::size_t count, PieceQueue::Start start);
  ~QueuedRequest() override;
  void wait() override { queue_->wait(*sequence_); }
  bool test() override { return queue_->test(*sequence_); }

 private:
  std::shared_ptr<PieceQueue> queue_;
  std::shared_ptr<PieceQueue::Sequence> sequence_;
};

}  // namespace tripod
