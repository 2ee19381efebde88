#include "parallel/tp_regions.h"

#include "core/error.h"
#include "parallel/tp_group.h"

namespace tripod::tp {

void check_sequence_shapes(const char* what, int tp, const Tensor& local, const Tensor& full) {
  check(local.defined() && full.defined(), what, ": a tensor argument is undefined");
  TRIPOD_CHECK(local.rank() >= 1 && full.rank() >= 1, what, ": tensors need a leading token dimension, got ",
               shape_str(local.shape()), " and ", shape_str(full.shape()));
  const int64_t rows = sequence_shard_rows(full.dim(0), tp);
  const int64_t width = full.dim(0) ? full.numel() / full.dim(0) : 0;
  TRIPOD_CHECK(local.dim(0) == rows && local.numel() == rows * width, what, ": the local token block ",
               shape_str(local.shape()), " is not 1/", tp, " of the full activation ", shape_str(full.shape()),
               " (expected ", rows, " rows of ", width, " elements)");
}

// The blocking forms call the blocking collectives (not async + wait): Open MPI's blocking
// collectives use other, tuned algorithms (see Communicator::start).
void copy_to_tp_region_backward(Communicator& tp, const Tensor& grad) { tp.all_reduce(grad, grad, ReduceOp::Sum); }
std::unique_ptr<CommRequest> copy_to_tp_region_backward_async(Communicator& tp, const Tensor& grad) {
  return tp.all_reduce_async(grad, grad, ReduceOp::Sum);
}

void reduce_from_tp_region_forward(Communicator& tp, const Tensor& x) { tp.all_reduce(x, x, ReduceOp::Sum); }
std::unique_ptr<CommRequest> reduce_from_tp_region_forward_async(Communicator& tp, const Tensor& x) {
  return tp.all_reduce_async(x, x, ReduceOp::Sum);
}

void gather_from_sequence_region_forward(Communicator& tp, const Tensor& local, const Tensor& full) {
  check_sequence_shapes("gather_from_sequence_region forward", tp.size(), local, full);
  tp.all_gather(local, full);
}
std::unique_ptr<CommRequest> gather_from_sequence_region_forward_async(Communicator& tp, const Tensor& local,
                                                                       const Tensor& full) {
  check_sequence_shapes("gather_from_sequence_region forward", tp.size(), local, full);
  return tp.all_gather_async(local, full);
}

void gather_from_sequence_region_backward(Communicator& tp, const Tensor& dfull, const Tensor& dlocal) {
  check_sequence_shapes("gather_from_sequence_region backward", tp.size(), dlocal, dfull);
  tp.reduce_scatter(dfull, dlocal, ReduceOp::Sum);
}
std::unique_ptr<CommRequest> gather_from_sequence_region_backward_async(Communicator& tp, const Tensor& dfull,
                                                                        const Tensor& dlocal) {
  check_sequence_shapes("gather_from_sequence_region backward", tp.size(), dlocal, dfull);
  return tp.reduce_scatter_async(dfull, dlocal, ReduceOp::Sum);
}

void reduce_scatter_to_sequence_region_forward(Communicator& tp, const Tensor& full, const Tensor& local) {
  check_sequence_shapes("reduce_scatter_to_sequence_region forward", tp.size(), local, full);
  tp.reduce_scatter(full, local, ReduceOp::Sum);
}
std::unique_ptr<CommRequest> reduce_scatter_to_sequence_region_forward_async(Communicator& tp, const Tensor& full,
                                                                             const Tensor& local) {
  check_sequence_shapes("reduce_scatter_to_sequence_region forward", tp.size(), local, full);
  return tp.reduce_scatter_async(full, local, ReduceOp::Sum);
}

void reduce_scatter_to_sequence_region_backward(Communicator& tp, const Tensor& dlocal, const Tensor& dfull) {
  check_sequence_shapes("reduce_scatter_to_sequence_region backward", tp.size(), dlocal, dfull);
  tp.all_gather(dlocal, dfull);
}
std::unique_ptr<CommRequest> reduce_scatter_to_sequence_region_backward_async(Communicator& tp, const Tensor& dlocal,
                                                                              const Tensor& dfull) {
  check_sequence_shapes("reduce_scatter_to_sequence_region backward", tp.size(), dlocal, dfull);
  return tp.all_gather_async(dlocal, dfull);
}

}  // namespace tripod::tp
