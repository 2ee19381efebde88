// Column- and row-parallel linear layers (Megatron), y = x W^T + b with W stored [out, in] as in
// model/linear.h, each with the conjugate collective of tp_regions.h built in. N = B*T tokens;
// Ns = N/tp under sequence parallelism (SP), N without; I/O = the layer's logical in/out features.
//
// Column-parallel: this rank holds W rows [o0, o1) and bias entries [o0, o1) (Ol = O/tp outputs).
//   forward   x[N,I]   = f(inp) = inp[N,I]             (no SP: the replicated input itself)
//                      = ḡ(inp) = all_gather(inp[Ns,I]) into inp_gathered[N,I]    (SP)
//             out[N,Ol] = x @ W^T + b
//   backward  dx[N,I]  = dout[N,Ol] @ W                (this rank's output features' share)
//             dinp     = all_reduce(dx) [N,I]  (f's backward; in place in dinp)     (no SP)
//                      = reduce_scatter(dx) [Ns,I] (ḡ's backward; dx in dinp_full[N,I])  (SP)
//             dW += dout^T @ x ; db += sum_n dout      (computed while the collective runs)
//
// Row-parallel: this rank holds W columns [i0, i1) (Il = I/tp inputs) and the FULL bias, added once
// after the reduction so it is not counted tp times.
//   forward   partial[N,O] = inp[N,Il] @ W^T           (this rank's input features' share)
//             out = all_reduce(partial) [N,O]  (g; partial computed in out itself)     (no SP)
//                 = reduce_scatter(partial) [Ns,O] (ḡ*; partial in out_partial[N,O])   (SP)
//             out += b
//   backward  g[N,O] = dout[N,O]                         (g's backward: identity)  (no SP)
//                    = all_gather(dout[Ns,O]) into dout_gathered[N,O] (ḡ*'s backward)  (SP)
//             dinp[N,Il] = g @ W ; dW += g^T @ inp ; db += sum over this rank's rows of dout
//   Under SP db is a partial sum over this rank's tokens: the caller all-reduces the accumulated
//   gradient over TP once per step, with the other sequence-parallel replicated parameters
//   (tp_shard.h: tp_grad_needs_allreduce).
//
// Gradients accumulate (dW, db: +=) like linear_backward; dinp is overwritten, because the
// collective that completes it must not reduce what an earlier call left there. Biases may be
// undefined (no bias). Arguments marked (SP) are scratch or saved buffers used only under SP and
// may be undefined without it. The same arguments on every rank give the same errors, thrown
// before any communication.
#pragma once
#include "backend/backend.h"
#include "parallel/tp_group.h"

namespace tripod::tp {

// out[N,Ol]; inp[N,I] (no SP) or [Ns,I] (SP); inp_gathered[N,I] (SP: written here, and kept by the
// caller for backward); weight[Ol,I]; bias[Ol].
void column_parallel_linear_forward(Backend& be, const TpGroup& tp, const Tensor& out, const Tensor& inp,
                                    const Tensor& inp_gathered, const Tensor& weight, const Tensor& bias);

// dinp[N,I] (no SP) or [Ns,I] (SP); dinp_full[N,I] (SP scratch); dweight[Ol,I]; dbias[Ol];
// dout[N,Ol]; x[N,I] the input forward multiplied: inp without SP, inp_gathered with SP (which
// must still hold the gathered input, or be refilled by gather_from_sequence_region_forward);
// weight[Ol,I]. `x_arriving`, when given, is the all-gather still filling x: it is waited for
// after the input-gradient GEMM, which does not read x, so the gather overlaps it.
void column_parallel_linear_backward(Backend& be, const TpGroup& tp, const Tensor& dinp, const Tensor& dinp_full,
                                     const Tensor& dweight, const Tensor& dbias, const Tensor& dout, const Tensor& x,
                                     const Tensor& weight, CommRequest* x_arriving = nullptr);

// out[N,O] (no SP) or [Ns,O] (SP); out_partial[N,O] (SP scratch); inp[N,Il]; weight[O,Il]; bias[O].
void row_parallel_linear_forward(Backend& be, const TpGroup& tp, const Tensor& out, const Tensor& out_partial,
                                 const Tensor& inp, const Tensor& weight, const Tensor& bias);

// dinp[N,Il]; dweight[O,Il]; dbias[O]; dout[N,O] (no SP) or [Ns,O] (SP); dout_gathered[N,O] (SP
// scratch); inp[N,Il] as passed to forward; weight[O,Il].
void row_parallel_linear_backward(Backend& be, const TpGroup& tp, const Tensor& dinp, const Tensor& dweight,
                                  const Tensor& dbias, const Tensor& dout, const Tensor& dout_gathered,
                                  const Tensor& inp, const Tensor& weight);

}  // namespace tripod::tp
