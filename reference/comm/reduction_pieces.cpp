#include "comm/reduction_pieces.h"

#include <algorithm>
#include <cstring>

namespace tripod {

std::vector<ReductionPiece> reduction_pieces(int64_t block, int ranks_per_piece, std::size_t element_bytes,
                                             int64_t max_piece_bytes) {
  check(ranks_per_piece > 0 && element_bytes > 0 && max_piece_bytes > 0, "reduction_pieces: ", ranks_per_piece,
        " ranks, ", element_bytes, "-byte elements, pieces of ", max_piece_bytes, " bytes");
  const int64_t row_bytes = static_cast<int64_t>(ranks_per_piece) * static_cast<int64_t>(element_bytes);
  const int64_t length = std::max<int64_t>(1, max_piece_bytes / row_bytes);
  std::vector<ReductionPiece> pieces;
  for (int64_t first = 0; first < block; first += length) pieces.push_back({first, std::min(length, block - first)});
  return pieces;
}

void pack_piece(const Tensor& in, int64_t block, int ranks, const ReductionPiece& piece, const Tensor& staging) {
  TRIPOD_CHECK(in.numel() == block * ranks && staging.numel() >= piece.length * ranks &&
                   staging.dtype() == in.dtype() && piece.first + piece.length <= block,
               "pack_piece: ", in.describe(), " as ", ranks, " blocks of ", block, ", columns ", piece.first, "+",
               piece.length, " into ", staging.describe());
  const std::size_t element = dtype_size(in.dtype());
  const char* from = static_cast<const char*>(in.raw());
  char* to = static_cast<char*>(staging.raw());
  const std::size_t bytes = static_cast<std::size_t>(piece.length) * element;
  for (int r = 0; r < ranks; ++r)
    std::memcpy(to + static_cast<std::size_t>(r) * bytes,
                from + static_cast<std::size_t>(r * block + piece.first) * element, bytes);
}

std::shared_ptr<PieceQueue::Sequence> PieceQueue::push(std::size_t count, Start start) {
  auto sequence = std::make_shared<Sequence>();
  sequence->count = count;
  sequence->start = std::move(start);
  sequence->done = count == 0;
  if (sequence->done) return sequence;
  queue_.push_back(sequence);
  if (queue_.size() == 1) sequence->current = sequence->start(sequence->next++);
  return sequence;
}

bool PieceQueue::test(const Sequence& sequence) {
  if (!sequence.done) advance(false, sequence);
  return sequence.done;
}

void PieceQueue::wait(const Sequence& sequence) {
  while (!sequence.done) advance(true, sequence);
}

// Completes the head's current operation (waiting for it when `block`, else only if test() says
// so), starts the next one, and moves on to the next sequence when the head is done; stops when an
// operation is still in flight (not blocking) or once `until` is done.
void PieceQueue::advance(bool block, const Sequence& until) {
  while (!queue_.empty()) {
    Sequence& head = *queue_.front();
    if (!head.current) head.current = head.start(head.next++);
    if (block) head.current->wait();
    else if (!head.current->test()) return;
    head.current.reset();
    if (head.next < head.count) continue;
    head.done = true;
    head.start = nullptr;  // drops what the pieces held (staging buffers, tensors)
    const bool reached = &head == &until;
    queue_.pop_front();
    if (reached) return;
  }
}

QueuedRequest::QueuedRequest(std::shared_ptr<PieceQueue> queue, std::size_t count, PieceQueue::Start start)
    : queue_(std::move(queue)), sequence_(queue_->push(count, std::move(start))) {}

QueuedRequest::~QueuedRequest() {
  // Unwinding from an error: the pieces in flight decide for themselves (an MPI request does not
  // wait then) and the rest never start. Otherwise destruction waits, as for any request.
  if (sequence_->done || std::uncaught_exceptions() > 0) return;
  try {
    wait();
  } catch (const Error&) {  // dropped without a wait: nobody is left to tell
  }
}

}  // namespace tripod
