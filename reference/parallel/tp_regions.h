// The conjugate operators of tensor parallelism (Megatron core's mappings): every collective a
// tensor-parallel layer performs is one of these, in its forward or its backward, so each can be
// tested on its own and a model's communication can be read off its forward function.
//
//   operator                            forward                      backward
//   f  copy_to_tp_region                identity                     all-reduce (sum)
//   g  reduce_from_tp_region            all-reduce (sum)             identity
//   ḡ  gather_from_sequence_region      all-gather along tokens      reduce-scatter along tokens
//   ḡ* reduce_scatter_to_sequence_region reduce-scatter along tokens  all-gather along tokens
//
// f sits where a replicated activation enters a column-parallel layer (its gradient is a partial
// sum from each rank's output features); g where a row-parallel layer's partial sums leave. With
// sequence parallelism ḡ replaces f (the activation arrives split by tokens) and ḡ* replaces g.
// Token blocks: rank r holds tokens [r*N/tp, (r+1)*N/tp) of the token-major [N, ...] activation
// (see tp_group.h). All operators act on contiguous tensors of any dtype the communicator reduces;
// the identity halves are spelled out so that forward and backward code read symmetrically.
#pragma once
#include <memory>

#include "comm/communicator.h"

namespace tripod::tp {

// ---- f: copy_to_tp_region ----
// Forward: the replicated input is used as it is.
inline const Tensor& copy_to_tp_region_forward(const Tensor& x) { return x; }
// Backward: grad[N, C] holds this rank's partial input gradient; summed over the group in place.
void copy_to_tp_region_backward(Communicator& tp, const Tensor& grad);
std::unique_ptr<CommRequest> copy_to_tp_region_backward_async(Communicator& tp, const Tensor& grad);

// ---- g: reduce_from_tp_region ----
// Forward: x[N, C] holds this rank's partial sum; summed over the group in place.
void reduce_from_tp_region_forward(Communicator& tp, const Tensor& x);
std::unique_ptr<CommRequest> reduce_from_tp_region_forward_async(Communicator& tp, const Tensor& x);
// Backward: the (replicated) output gradient passes through unchanged.
inline const Tensor& reduce_from_tp_region_backward(const Tensor& grad) { return grad; }

// ---- ḡ: gather_from_sequence_region (sequence parallelism) ----
// Forward: full[N, ...] = concatenation over ranks of local[N/tp, ...] (rank order = token order).
void gather_from_sequence_region_forward(Communicator& tp, const Tensor& local, const Tensor& full);
std::unique_ptr<CommRequest> gather_from_sequence_region_forward_async(Communicator& tp, const Tensor& local,
                                                                       const Tensor& full);
// Backward: dlocal[N/tp, ...] = this rank's token block of the sum over ranks of dfull[N, ...].
void gather_from_sequence_region_backward(Communicator& tp, const Tensor& dfull, const Tensor& dlocal);
std::unique_ptr<CommRequest> gather_from_sequence_region_backward_async(Communicator& tp, const Tensor& dfull,
                                                                        const Tensor& dlocal);

// ---- ḡ*: reduce_scatter_to_sequence_region (sequence parallelism) ----
// Forward: local[N/tp, ...] = this rank's token block of the sum over ranks of full[N, ...].
void reduce_scatter_to_sequence_region_forward(Communicator& tp, const Tensor& full, const Tensor& local);
std::unique_ptr<CommRequest> reduce_scatter_to_sequence_region_forward_async(Communicator& tp, const Tensor& full,
                                                                             const Tensor& local);
// Backward: dfull[N, ...] = concatenation over ranks of dlocal[N/tp, ...].
void reduce_scatter_to_sequence_region_backward(Communicator& tp, const Tensor& dlocal, const Tensor& dfull);
std::unique_ptr<CommRequest> reduce_scatter_to_sequence_region_backward_async(Communicator& tp, const Tensor& dlocal,
                                                                              const Tensor& dfull);

// Throws (the same message on every rank) unless full is [N, ...] and local [N/tp, ...] with the
// same row width and tp dividing N. `what` names the operation in the message.
void check_sequence_shapes(const char* what, int tp_size, const Tensor& local, const Tensor& full);

}  // namespace tripod::tp
