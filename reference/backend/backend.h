// Backend: the tensor operations the model and the parallel layers are written in, for one device.
// Code above this interface never touches tensor memory that is not host memory: it calls these
// operations, moves bytes with upload/download, and reads scalars back when it needs them on the
// host. A backend knows nothing of the model (no layer names, no parameters) and nothing of
// parallelism: the vocabulary-sharded forms below take a window of the vocabulary, not a group.
//
// Backends (backend/backend_factory.h makes them by name):
//   cpu       host memory, OpenBLAS + OpenMP, fp32/fp64 kernels, bf16 emulated bit for bit
//   emulated  the CPU arithmetic on memory tagged as a device's: a host read outside a backend
//             fails, so every path a GPU needs (uploads, downloads, staged collectives) is run
//   cuda      cuBLASLt + CUDA kernels (backend/cuda/), built where nvcc is found
// What a new backend implements: every pure virtual below, for fp32 and fp64 (bf16 where stated),
// with results equal to the CPU backend's up to the reduction order it documents.
//
// Conventions: tensors are row-major and contiguous unless a leading dimension is given.
// "Accumulate" ops add into their output (gradients accumulate over micro-batches); the others
// overwrite it. Operations may run asynchronously on a device: a host read (download) waits for
// them, and timers call synchronize(). Scalars produced on the device (sums of squares, loss sums,
// counts) are fp64 tensors of one element, read back only when the host needs them.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace tripod {

// The accumulation type a GEMM with A/B of `ab` uses by default: fp64 for fp64, else fp32.
constexpr DType gemm_accumulate_dtype(DType ab) { return ab == DType::F64 ? DType::F64 : DType::F32; }

// A window of the vocabulary held by a tensor's rows (an embedding table) or columns (logits):
// row/column j holds vocabulary id start + j for j < valid; rows/columns from `valid` on are
// padding (never selected, never in a softmax, zero gradient). The whole vocabulary is {0, V, V}.
// Backends that can check ids against V do so (the CPU backends, naming the position); the model
// checks every id on the host before upload, so no backend ever indexes with a bad one.
// A run of AdamW's flat buffers: elements [offset, offset + length) of each, with its weight decay.
struct AdamWRun {
  int64_t offset = 0, length = 0;
  double weight_decay = 0;
};

struct VocabWindow {
  int64_t start = 0;
  int64_t valid = 0;
  int64_t vocab = 0;  // V: ids must be < V (token ids >= 0; targets < 0 are ignored)
};

// How a backend computes fp32 x fp32 -> fp32 GEMMs (a policy of the run, as PyTorch's
// torch.set_float32_matmul_precision is):
//   Exact         fp32 products and sums (the default: TF32 is never used unless asked for)
//   Tf32Operands  A and B rounded to TF32 (a 10-bit mantissa) first, products summed in fp32: the
//                 tf32 precision policy, a GPU's TF32 tensor cores
//   Bf16Operands  A and B rounded to bf16 (nearest even) first, products summed in fp32: the
//                 GEMMs of the bf16-mixed precision policy, on a GPU's bf16 tensor cores; fp32
//                 attention rounds its products' operands too (q, k, v, dout, probabilities and
//                 score gradients, where autocast does; the softmax stays fp32)
// The CPU backends round the operands and multiply the rounded values exactly in fp32 (11- and
// 8-bit significands: their products fit fp32's 24 bits), so they emulate a GPU up to the order
// of the sums (and, for TF32, the rounding of exact ties, which the hardware may break away from
// zero where the CPU breaks them to even).
enum class Fp32Matmul { Exact, Tf32Operands, Bf16Operands };
std::string fp32_matmul_name(Fp32Matmul mode);

// Bytes of this backend's allocations alive now, and the most alive at once since the last reset.
struct MemoryStats {
  std::size_t live = 0, peak = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual Device device() const = 0;
  // The physical device, for tools that see it from outside (NVML): a CUDA device's PCI bus id
  // ("0000:3B:00.0"); "" for host memory.
  virtual std::string device_bus_id() const { return ""; }
  // What the allocator holds (conform records each layout's peak against the memory accounting).
  virtual MemoryStats memory_stats() const = 0;
  virtual void reset_peak_memory() = 0;  // peak = live
  // The fp32 GEMM policy for the operations issued from now on.
  void set_fp32_matmul(Fp32Matmul mode) { fp32_matmul_ = mode; }
  Fp32Matmul fp32_matmul() const { return fp32_matmul_; }

  // ---- memory ----
  virtual Tensor alloc(const Shape& shape, DType dtype) = 0;  // zero-filled
  // A tensor every element of which the caller overwrites before reading it (gemm_operands' copies,
  // ZeRO-1/2's bf16 gather buffers): alloc's zero fill is a wasted pass, so a backend may skip it.
  virtual Tensor alloc_for_overwrite(const Shape& shape, DType dtype) { return alloc(shape, dtype); }
  virtual void fill(const Tensor& t, double value) = 0;
  virtual void copy(const Tensor& src, const Tensor& dst) = 0;      // equal numel and dtype
  virtual void upload(const void* host, const Tensor& dst) = 0;     // host bytes -> dst
  virtual void download(const Tensor& src, void* host) = 0;         // src -> host bytes (waits for it)
  // Returns once every operation issued so far has finished.
  virtual void synchronize() = 0;
  // dst = src in dst's dtype, equal numel: fp32/fp64 -> bf16 round to nearest even (core/bf16.h),
  // fp64 -> fp32 round to nearest, widening exactly; the same dtype copies.
  virtual void convert(const Tensor& src, const Tensor& dst) = 0;

  // ---- dense linear algebra ----
  // C[m,n] = alpha * op(A)[m,k] @ op(B)[k,n] + beta * C, with op(X) = X or X^T and leading dims;
  // products summed in `accumulate`, C rounded once to its dtype. Combinations (A and B alike):
  //   A, B   C      accumulate
  //   fp32   fp32   fp32
  //   fp64   fp64   fp64
  //   bf16   fp32   fp32
  //   bf16   bf16   fp32
  virtual void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                    const Tensor& a, int64_t lda, const Tensor& b, int64_t ldb, double beta,
                    const Tensor& c, int64_t ldc, DType accumulate) = 0;

  // c[m,n] = op(A)[m,k] @ op(B)[k,n] + bias[n] on every row (c contiguous, bias undefined for
  // none): the product rounded once to c's dtype, then the bias added and rounded, so the same
  // bits as gemm (alpha 1, beta 0) followed by bias_add, which is what this default does. A device
  // backend may fuse the two (cuBLASLt's bias epilogue: one pass over c instead of two).
  // A bf16 c with an fp32 bias (or fp32 A and B) holds the bf16 rounding of the fp32 result: the
  // product in fp32, the bias added in fp32, then one rounding to bf16, the bits of the fp32
  // gemm_bias followed by convert (this default's form); a device writes it from the GEMM's
  // epilogue (cuBLASLt: an fp32 bias into a bf16 D), so the fp32 result is never stored. What
  // attention_input_dtype's bf16 qkv is made by.
  virtual void gemm_bias(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const Tensor& a, int64_t lda,
                         const Tensor& b, int64_t ldb, const Tensor& c, const Tensor& bias, DType accumulate);
  // c[m,n] = op(A) @ op(B) + bias[n] + residual[m,n] (residual contiguous, of c's shape and dtype,
  // apart from c): the residual stream's add after a block's output projection. This default
  // is gemm_bias, then add(c, c, residual): those bits. A device backend may read the residual in
  // the GEMM's epilogue instead (cuBLASLt: C = residual, D = c, beta 1), which saves the add's pass
  // over three [m, n] tensors and sums in another order (the product plus the residual, then the
  // bias): the bits of the separate sums up to fp32 rounding.
  virtual void gemm_bias_residual(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const Tensor& a,
                                  int64_t lda, const Tensor& b, int64_t ldb, const Tensor& c, const Tensor& bias,
                                  const Tensor& residual, DType accumulate);

  // The multiple of elements that a GEMM output's row length (its leading dimension) should be for
  // the backend's fast GEMMs: 1 on the CPU; a device's tensor-core GEMMs want 16-byte aligned rows.
  // The model pads the rows of the logits to it (their vocabulary columns past V are padding), so
  // that GPT-2's 50257 columns need no aligned copy of the whole [N, V] output.
  virtual int64_t gemm_row_multiple() const { return 1; }

  // GEMM operands that several GEMMs share, prepared once: under Fp32Matmul::Bf16Operands, when
  // every one is a non-empty fp32 matrix, their bf16 copies, rounded as gemm would round them, so
  // that passing them in the originals' place gives the same bits (up to the order of the sums)
  // and converts each once instead of once a GEMM; otherwise the originals, all of them (a GEMM's A
  // and B share a dtype). Valid while the originals are unchanged. Tensors are matrices
  // [rows, cols] (rows = numel / last dim).
  // A copy may be zero-padded to [rows', cols'] >= [rows, cols], as the backend's GEMMs want their
  // rows aligned (the CPU backends pad nothing; CUDA pads both sizes to multiples of 8): a
  // caller takes each copy's last dimension as its leading dimension, and may run a product's
  // reduction over the padded extent that its two operands share, since zeros add nothing.
  // `dbias_of_first` (undefined for none): also bias_grad(dbias_of_first, operands[0]), the same
  // bits, in the pass that rounds operands[0] where a backend can (a linear layer's output
  // gradient is then read once for its bias gradient and its copy, not twice).
  std::vector<Tensor> gemm_operands(const std::vector<Tensor>& operands, const Tensor& dbias_of_first = Tensor());
  // gemm_operands({gelu(x)})[0], for a caller whose only use of gelu(x) is as a GEMM operand: under
  // the bf16-operand policy gelu(x)'s bf16 copy, which a device backend writes in the GELU's own
  // pass, so the fp32 gelu(x) is never stored; otherwise gelu(x) itself, a new fp32 tensor. The
  // same bits as gelu_forward followed by gemm_operands. x may be bf16 (gelu_forward's bf16 input):
  // then gelu(x) is fp32, and under the policy its copy is made as from an fp32 x.
  Tensor gelu_operand(const Tensor& x);
  // The same for a LayerNorm: gemm_operands({out})[0] for layernorm_forward(out, mean, rstd, inp,
  // weight, bias, eps), mean and rstd written as there: under the bf16-operand policy out's bf16
  // copy, which a device backend writes in the LayerNorm's own pass (out never stored); otherwise
  // out itself, a new tensor. The same bits as layernorm_forward followed by gemm_operands.
  Tensor layernorm_operand(const Tensor& mean, const Tensor& rstd, const Tensor& inp, const Tensor& weight,
                           const Tensor& bias, double eps);
  // The backward's counterpart: gemm_operands({d}, dbias)[0] for d = gelu_backward(inp, dout) (dbias
  // undefined for none), for a caller whose only uses of d are as a GEMM operand and its bias
  // gradient: under the bf16-operand policy d's bf16 copy, which a device backend writes in the
  // GELU backward's pass together with dbias += d's column sums, so d is never stored; otherwise d
  // itself, a new tensor. The same bits as gelu_backward followed by gemm_operands. inp, and with it
  // dout, may be bf16, as gelu_backward's.
  Tensor gelu_backward_operand(const Tensor& inp, const Tensor& dout, const Tensor& dbias);
  // The same for attention's output: gemm_operands({out})[0] for attention_forward(out, state,
  // qkv, n_head) with out [B, T, C] for qkv [B, T, 3C], the state written as there: under the
  // bf16-operand policy out's bf16 copy, which a device backend writes where its attention writes
  // out (out never stored); otherwise out itself, a new tensor. The same bits as attention_forward
  // followed by gemm_operands.
  Tensor attention_operand(const Tensor& state, const Tensor& qkv, int64_t n_head);
  // And for attention's backward: gemm_operands({dqkv}, dbias)[0] for dqkv = attention_backward's
  // [B, T, 3C] from dout, qkv and the state (dbias: c_attn's bias gradient, undefined for none), for
  // a caller whose only uses of dqkv are as c_attn's GEMM operand and its bias gradient: under the
  // bf16-operand policy (dbias defined) dqkv's bf16 copy, which a device backend writes, with dbias
  // += its column sums, where its attention would write dqkv (dqkv never stored in fp32);
  // otherwise dqkv itself, a new tensor. The same bits as attention_backward followed by
  // gemm_operands.
  Tensor attention_backward_operand(const Tensor& dout, const Tensor& qkv, const Tensor& state, int64_t n_head,
                                    const Tensor& dbias);

  // ---- elementwise and reductions ----
  virtual void add(const Tensor& out, const Tensor& a, const Tensor& b) = 0;  // out = a + b
  virtual void add_inplace(const Tensor& acc, const Tensor& x) = 0;           // acc += x
  virtual void scale(const Tensor& t, double factor) = 0;                    // t *= factor
  // Rows by id, for the packing of a sparse gradient's rows (parallel/gradient_buckets.h), with
  // table [N, C], packed [R, C], rows int32 [R] in [0, N):
  //   gather_rows       packed[r, :] = table[rows[r], :]
  //   scatter_add_rows  table[rows[r], :] += packed[r, :]; rows distinct, so each element is one addition
  virtual void gather_rows(const Tensor& packed, const Tensor& table, const Tensor& rows) = 0;
  virtual void scatter_add_rows(const Tensor& table, const Tensor& packed, const Tensor& rows) = 0;
  // acc[0] (fp64) += sum of t^2 accumulated in fp64, in blocks summed in a fixed order.
  virtual void sum_squares(const Tensor& acc, const Tensor& t) = 0;
  // acc[0] (fp64) += the number of elements of t that are infinite or NaN.
  virtual void count_nonfinite(const Tensor& acc, const Tensor& t) = 0;
  // out[0] (fp64) = sum over n with targets[n] >= 0 of losses[n], in fp64 and in a fixed order:
  // token order on the CPU, the device's own on a GPU (the same bits on every run; across the two
  // backends within rounding).
  virtual void sum_valid_losses(const Tensor& out, const Tensor& losses, const Tensor& targets) = 0;

  // ---- transformer kernels ----
  // out[N,C] = wte[tokens[N], :] + wpe[n % T, :] for N = B*T tokens.
  virtual void embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte,
                                 const Tensor& wpe, int64_t seq_len) = 0;
  // Accumulate: dwte[tokens[n]] += dout[n], dwpe[n % T] += dout[n].
  virtual void embedding_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout,
                                  const Tensor& tokens, int64_t seq_len) = 0;
  // out[N,C] = (inp - mean) * rstd * weight + bias, saving mean[N] and rstd[N].
  virtual void layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd,
                                 const Tensor& inp, const Tensor& weight, const Tensor& bias,
                                 double eps) = 0;
  // Accumulate into dinp[N,C], dweight[C], dbias[C].
  virtual void layernorm_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias,
                                  const Tensor& dout, const Tensor& inp, const Tensor& weight,
                                  const Tensor& mean, const Tensor& rstd) = 0;
  virtual void bias_add(const Tensor& out, const Tensor& bias) = 0;    // out[N,C] += bias[C]
  virtual void bias_grad(const Tensor& dbias, const Tensor& dout) = 0;  // dbias[C] += sum_n dout[n,C]
  // GELU, tanh approximation (GPT-2's "gelu_new"). inp may be bf16 with fp32 out and dinp:
  // bf16-mixed's pre-activation (Gpt::rounded_activation_dtype), read as the fp32 values it holds,
  // so the bits of the same call on its fp32 widening; with a bf16 inp, dout may be bf16 too
  // (bf16-mixed's gradient of gelu(fc)), read alike.
  virtual void gelu_forward(const Tensor& out, const Tensor& inp) = 0;
  virtual void gelu_backward(const Tensor& dinp, const Tensor& inp, const Tensor& dout) = 0;  // overwrite
  // Causal multi-head attention. qkv[B,T,3C] holds q|k|v, head h in columns [h*hd, (h+1)*hd) of
  // each third. out[B,T,C]; `probs` keeps for the backward pass what attention_state_shape says:
  // the softmax, [B,H,T,T], or where this backend takes flash attention for the sizes, the rows'
  // logsumexp and a copy of out, [B*H*T + B*T*C] (the CUDA backend and the emulated device under
  // TRIPOD_CUDA_ATTENTION=flash). Both answers hold under the precision policy in force when they
  // are asked, which must be the one of the attention calls (the model asks as it allocates its
  // activations). A state buffer at least B*H*T*T long serves either where T > the head size.
  virtual bool takes_flash_attention(DType dtype, int64_t seq_len, int64_t channels, int64_t n_head) const {
    (void)dtype, (void)seq_len, (void)channels, (void)n_head;
    return false;
  }
  // A fused form this backend ran apart because the device's library declined it (the first such,
  // in a sentence: the problem and the library's answer; "" for none so far): the results are the
  // same bits, the time is not, so a benchmark prints it beside its figures.
  virtual std::string library_declined() const { return ""; }
  // Where this backend was asked for flash attention (TRIPOD_CUDA_ATTENTION) but runs the GEMM
  // attention for these sizes under the policy in force: why, in a sentence; "" otherwise.
  virtual std::string attention_declined(DType dtype, int64_t seq_len, int64_t channels, int64_t n_head) const {
    (void)dtype, (void)seq_len, (void)channels, (void)n_head;
    return "";
  }
  virtual Shape attention_state_shape(DType dtype, int64_t batch, int64_t seq_len, int64_t channels,
                                      int64_t n_head) const;
  // The dtype the model stores attention's input qkv in for tensors of `dtype`: dtype itself, or
  // bf16 where this backend's attention, forward and backward, reads nothing of an fp32 qkv but its
  // bf16 rounding (flash-mma under bf16-mixed at head sizes up to 64: its kernels read bf16 copies).
  // Then qkv's GEMM writes that rounding directly (gemm_bias into a bf16 c) and the attention calls
  // take the bf16 qkv as the policy's fp32 one: the same bits, without the fp32 qkv's write, the
  // copies' reads of it in the forward and the backward, or half its memory (GPT-2 124M at B8 x
  // T1024: 75 MB of 151 a layer). Asked, like attention_state_shape, under the policy of the calls.
  // Where it says bf16, the backward reads nothing of the output gradient dout but its bf16
  // rounding either (the register kernels' copy, and delta = rowsum(bf16(dout) * out)): the
  // backward calls take a bf16 dout with the bf16 qkv (the model's: c_proj's dX product written in
  // bf16), the bits of its fp32 value, without that value's write and the copy's read of it.
  virtual DType attention_input_dtype(DType dtype, int64_t seq_len, int64_t channels, int64_t n_head) const {
    (void)seq_len, (void)channels, (void)n_head;
    return dtype;
  }
  virtual void attention_forward(const Tensor& out, const Tensor& probs, const Tensor& qkv,
                                 int64_t n_head) = 0;
  // Overwrites dqkv[B,T,3C].
  virtual void attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                                  const Tensor& probs, int64_t n_head) = 0;
  // losses[N] = logsumexp(logits[n]) - logits[n, targets[n]]; 0 where targets[n] < 0 (ignored).
  virtual void cross_entropy_forward(const Tensor& losses, const Tensor& logits,
                                     const Tensor& targets) = 0;
  // In place: logits[N,V] becomes grad_scale * (softmax(logits) - onehot(target)); 0 rows if ignored.
  virtual void cross_entropy_backward(const Tensor& logits, const Tensor& targets,
                                      double grad_scale) = 0;

  // ---- the same over a window of the vocabulary (rows of wte, columns of the logits) ----
  // out[N,C] = wte[tokens[n] - window.start] where the window holds the token, else 0.
  virtual void embedding_lookup_window(const Tensor& out, const Tensor& tokens, const Tensor& wte,
                                       VocabWindow window) = 0;
  // out[R,C] += wpe[(first_token + i) % seq_len] for row i: position embeddings of a run of tokens.
  virtual void position_add(const Tensor& out, const Tensor& wpe, int64_t first_token, int64_t seq_len) = 0;
  // Accumulate: dwte[tokens[n] - start] += dout[n] where the window holds the token, dwpe[n % T] +=
  // dout[n] for every n; each element sums its tokens in token order.
  virtual void embedding_backward_window(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout,
                                         const Tensor& tokens, VocabWindow window, int64_t seq_len) = 0;
  // row_max[N] = max of logits[n, :valid] (-inf when valid = 0). The CPU backend checks the
  // targets here, before the caller's first reduction; a device backend cannot without a host copy
  // and does not (the model checks every target on the host before uploading them).
  virtual void logits_row_max(const Tensor& row_max, const Tensor& logits, const Tensor& targets,
                              VocabWindow window) = 0;
  // sums[2,N]: sums[0,n] = sum_j<valid exp(logits[n,j] - row_max[n]);
  //            sums[1,n] = logits[n, targets[n] - start] if the window holds the target, else 0.
  virtual void logits_exp_sums(const Tensor& sums, const Tensor& logits, const Tensor& row_max,
                               const Tensor& targets, VocabWindow window) = 0;
  // logits_row_max then logits_exp_sums, for a caller that needs no reduction of the max between
  // them (the whole vocabulary on one device). A device backend may read the logits once: an online
  // max and sum, whose sums equal the two passes' up to rounding.
  virtual void logits_stats(const Tensor& row_max, const Tensor& sums, const Tensor& logits, const Tensor& targets,
                            VocabWindow window);
  // logsumexp[n] = row_max[n] + log(sums[0,n]); losses[n] = logsumexp[n] - sums[1,n] (0 if ignored).
  virtual void cross_entropy_from_sums(const Tensor& losses, const Tensor& logsumexp, const Tensor& row_max,
                                       const Tensor& sums, const Tensor& targets) = 0;
  // In place: logits[N, cols] become grad_scale * (exp(logits - logsumexp) - onehot(target in the
  // window)); padding columns and ignored rows become 0.
  virtual void cross_entropy_backward_window(const Tensor& logits, const Tensor& logsumexp,
                                             const Tensor& targets, VocabWindow window,
                                             double grad_scale) = 0;
  // gemm_operands({g})[0] for g the gradient cross_entropy_backward_window writes, for a caller
  // whose only use of it is as a GEMM operand (the LM head's backward): under the bf16-operand
  // policy g's bf16 copy, which a device backend writes from the logits in the same pass (the fp32
  // gradient never stored); otherwise g, in place of the logits. The logits are used up either way
  // (afterwards they hold g or are unchanged). The same bits as cross_entropy_backward_window
  // followed by gemm_operands.
  Tensor cross_entropy_backward_window_operand(const Tensor& logits, const Tensor& logsumexp, const Tensor& targets,
                                               VocabWindow window, double grad_scale);
  // The single-device loss and its gradient in one call, for a forward whose backward is known to
  // follow at grad_scale: losses[N] as logits_stats and cross_entropy_from_sums give them over the
  // whole vocabulary [0, vocab) (the rows' columns past it are padding), and the logits, in place,
  // cross_entropy_backward_window's gradient; no logsumexp is kept. The same bits as those calls
  // (this default makes them); a backend may read each row once for both, while it is in cache
  // (GPT-2 B8 x T1024: one pass over 0.82 GB of bf16 logits fewer). Only where the gradient is its
  // own GEMM operand (!rounded_as_gemm_operand(logits)): the logits are used up.
  virtual void cross_entropy_with_gradient(const Tensor& losses, const Tensor& logits, const Tensor& targets,
                                           int64_t vocab, double grad_scale);
  // Whether gemm_operands would give x a bf16 copy (an fp32 matrix under the bf16-operand policy).
  bool rounded_as_gemm_operand(const Tensor& x) const;

  // ---- optimizer ----
  // Decoupled AdamW (Loshchilov & Hutter) on one tensor; `step` counts from 1 for bias correction.
  // The gradient is used as grad * grad_scale (the clipping coefficient, fused to save a pass).
  virtual void adamw(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                     double lr, double beta1, double beta2, double eps, double weight_decay,
                     int64_t step, double grad_scale) = 0;
  // adamw over several runs of the same four flat buffers (1-D, one dtype, one device, as long as
  // each other), each run with its own weight decay: the bits of adamw on each run's views (this
  // default makes those calls; a device backend updates every run in one launch, GPT-2 124M's 98
  // runs instead of 98 launches). Runs may not overlap; a run past the buffers is an error.
  virtual void adamw_runs(const Tensor& params, const Tensor& grads, const Tensor& m, const Tensor& v,
                          const std::vector<AdamWRun>& runs, double lr, double beta1, double beta2, double eps,
                          int64_t step, double grad_scale);

 protected:
  // Throws naming `op` when the attention state buffer holds fewer elements than
  // attention_state_shape asks for qkv's shape under the policy in force (a buffer sized for the
  // other attention, or under another policy).
  void check_attention_state(const Tensor& state, const Tensor& qkv, int64_t n_head, const char* op) const;
  // The dtype of the tensors an attention call computes for: qkv's, or for a bf16 qkv the fp32 it
  // stands for, which attention_input_dtype must have said for its sizes (else throws naming `op`).
  DType attention_dtype(const Tensor& qkv, int64_t n_head, const char* op) const;
  // Throws unless the four buffers are as long as each other, of one dtype and device, and the runs
  // lie inside them without overlapping (adamw_runs).
  void check_adamw_runs(const Tensor& params, const Tensor& grads, const Tensor& m, const Tensor& v,
                        const std::vector<AdamWRun>& runs) const;
  // Throws unless `residual` is m x n elements of c's dtype on c's device, sharing no memory with c
  // (gemm_bias_residual: this default writes c before it reads the residual).
  void check_gemm_residual(const Tensor& c, const Tensor& residual, int64_t m, int64_t n) const;
  // Throws naming `op` unless cross_entropy_with_gradient's tensors fit: a loss and a target a row
  // of logits, the vocabulary within a row, and logits that are their gradient's own operand.
  void check_loss_with_gradient(const char* op, const Tensor& losses, const Tensor& logits, const Tensor& targets,
                                int64_t vocab) const;
  // gemm_bias's bf16 c that holds the rounding of an fp32 result (an fp32 bias, or fp32 A and B).
  static bool rounds_fp32_result(const Tensor& c, const Tensor& a, const Tensor& bias);
  // gemm_operands' copy of one fp32 matrix x [rows, cols] (rows = numel / last dim): rounded to
  // bf16, unpadded here; a device backend may zero-pad it (see gemm_operands).
  virtual Tensor bf16_operand_copy(const Tensor& x);
  // bias_grad(dbias, x), then bf16_operand_copy(x); a device backend may do both in one pass over x.
  virtual Tensor bf16_operand_copy_with_bias_grad(const Tensor& x, const Tensor& dbias);
  // bf16_operand_copy(gelu(x)) for an fp32 or bf16 x; a device backend may skip the fp32 gelu(x).
  virtual Tensor bf16_gelu_operand(const Tensor& x);
  // bf16_operand_copy of cross_entropy_backward_window's gradient (fp32 logits); a device backend may
  // write it without the fp32 gradient.
  virtual Tensor bf16_cross_entropy_operand(const Tensor& logits, const Tensor& logsumexp, const Tensor& targets,
                                            VocabWindow window, double grad_scale);
  // bf16_operand_copy of layernorm_forward's output for fp32 tensors; a device backend may skip the
  // fp32 output.
  virtual Tensor bf16_layernorm_operand(const Tensor& mean, const Tensor& rstd, const Tensor& inp, const Tensor& weight,
                                        const Tensor& bias, double eps);
  // bf16_operand_copy_with_bias_grad(gelu_backward(inp, dout), dbias) for an fp32 dbias (defined)
  // and inp and dout as gelu_backward takes them; a device backend may skip the fp32 gradient.
  virtual Tensor bf16_gelu_backward_operand(const Tensor& inp, const Tensor& dout, const Tensor& dbias);
  // attention_operand under the policy: attention_forward into an fp32 out, then its copy.
  virtual Tensor bf16_attention_operand(const Tensor& state, const Tensor& qkv, int64_t n_head);
  // attention_backward_operand under the policy: attention_backward into an fp32 dqkv, then
  // bf16_operand_copy_with_bias_grad.
  virtual Tensor bf16_attention_backward_operand(const Tensor& dout, const Tensor& qkv, const Tensor& state,
                                                 int64_t n_head, const Tensor& dbias);

 private:
  Fp32Matmul fp32_matmul_ = Fp32Matmul::Exact;
};

}  // namespace tripod
