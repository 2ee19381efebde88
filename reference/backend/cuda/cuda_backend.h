// The CUDA backend: device memory from cudaMalloc (never managed memory), every operation issued
// in order on one stream, GEMMs through cuBLASLt, the other operations as kernels of
// backend/cuda/kernels/. It implements backend/backend.h for fp32 and fp64 (bf16 where stated),
// with results equal to the CPU backend's up to reduction order (fp64 ~1e-13 relative; the
// embedding backward is bit-identical). Tensors it makes live on Device::Cuda: host code cannot
// read them except through download.
#pragma once
#include <atomic>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "backend/cuda/cuda_context.h"
#include "backend/cuda/host/attention_choice.h"
#include "backend/cuda/host/fusion_choice.h"
#include "backend/unwritten_poison.h"

namespace tripod::cuda {

class CudaBackend final : public Backend {
 public:
  // `device`: the CUDA device index to use (backend/cuda/host/device_choice.h picks it).
  explicit CudaBackend(int device);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string name() const override { return name_; }
  Device device() const override { return Device::Cuda; }
  std::string device_bus_id() const override;
  MemoryStats memory_stats() const override { return {counters_->live.load(), counters_->peak.load()}; }
  void reset_peak_memory() override { counters_->peak.store(counters_->live.load()); }
  const CudaContext& context() const { return ctx_; }

  Tensor alloc(const Shape& shape, DType dtype) override;
  void fill(const Tensor& t, double value) override;
  void copy(const Tensor& src, const Tensor& dst) override;
  void upload(const void* host, const Tensor& dst) override;
  void download(const Tensor& src, void* host) override;
  void synchronize() override;
  void convert(const Tensor& src, const Tensor& dst) override;

  void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const Tensor& a, int64_t lda,
            const Tensor& b, int64_t ldb, double beta, const Tensor& c, int64_t ldc, DType accumulate) override;
  // Fused through cuBLASLt's bias epilogue for an fp32 C where it applies (gemm_with_bias says where).
  void gemm_bias(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const Tensor& a, int64_t lda,
                 const Tensor& b, int64_t ldb, const Tensor& c, const Tensor& bias, DType accumulate) override;
  // The residual as cuBLASLt's C (D = c, beta 1), with the bias in the same epilogue where it is
  // fp32: no separate add (residual_in_epilogue says where; elsewhere Backend's three passes).
  void gemm_bias_residual(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const Tensor& a, int64_t lda,
                          const Tensor& b, int64_t ldb, const Tensor& c, const Tensor& bias, const Tensor& residual,
                          DType accumulate) override;
  // 8 elements: bf16 rows of 16 bytes, fp32 rows of 32 (cuBLASLt's tensor-core kernels want 16).
  int64_t gemm_row_multiple() const override { return 8; }

  void add(const Tensor& out, const Tensor& a, const Tensor& b) override;
  void add_inplace(const Tensor& acc, const Tensor& x) override { add(acc, acc, x); }
  void scale(const Tensor& t, double factor) override;
  void sum_squares(const Tensor& acc, const Tensor& t) override;
  void count_nonfinite(const Tensor& acc, const Tensor& t) override;
  void sum_valid_losses(const Tensor& out, const Tensor& losses, const Tensor& targets) override;
  void gather_rows(const Tensor& packed, const Tensor& table, const Tensor& rows) override;
  void scatter_add_rows(const Tensor& table, const Tensor& packed, const Tensor& rows) override;

  void embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                         int64_t seq_len) override;
  void embedding_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout, const Tensor& tokens,
                          int64_t seq_len) override;
  void layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& inp,
                         const Tensor& weight, const Tensor& bias, double eps) override;
  void layernorm_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias, const Tensor& dout,
                          const Tensor& inp, const Tensor& weight, const Tensor& mean, const Tensor& rstd) override;
  void bias_add(const Tensor& out, const Tensor& bias) override;
  void bias_grad(const Tensor& dbias, const Tensor& dout) override;
  void gelu_forward(const Tensor& out, const Tensor& inp) override;
  void gelu_backward(const Tensor& dinp, const Tensor& inp, const Tensor& dout) override;
  // Under TRIPOD_CUDA_ATTENTION=flash, fp32 attention under the bf16-operand policy runs the flash
  // kernels where they take the shape and the device's shared memory (host/attention_choice.h).
  bool takes_flash_attention(DType dtype, int64_t seq_len, int64_t channels, int64_t n_head) const override;
  std::string attention_declined(DType dtype, int64_t seq_len, int64_t channels, int64_t n_head) const override;
  // bf16 where flash-mma reads only qkv's rounding (host/attention_choice.h's reads_bf16_qkv) and the
  // qkv-bf16 fusion is on; the bf16-bias epilogue writes it (gemm_bias).
  DType attention_input_dtype(DType dtype, int64_t seq_len, int64_t channels, int64_t n_head) const override;
  std::string library_declined() const override { return library_declined_; }
  void attention_forward(const Tensor& out, const Tensor& probs, const Tensor& qkv, int64_t n_head) override;
  void attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& probs,
                          int64_t n_head) override;
  void cross_entropy_forward(const Tensor& losses, const Tensor& logits, const Tensor& targets) override;
  void cross_entropy_backward(const Tensor& logits, const Tensor& targets, double grad_scale) override;

  void embedding_lookup_window(const Tensor& out, const Tensor& tokens, const Tensor& wte,
                               VocabWindow window) override;
  void position_add(const Tensor& out, const Tensor& wpe, int64_t first_token, int64_t seq_len) override;
  void embedding_backward_window(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout, const Tensor& tokens,
                                 VocabWindow window, int64_t seq_len) override;
  void logits_row_max(const Tensor& row_max, const Tensor& logits, const Tensor& targets,
                      VocabWindow window) override;
  void logits_exp_sums(const Tensor& sums, const Tensor& logits, const Tensor& row_max, const Tensor& targets,
                       VocabWindow window) override;
  // One pass over the logits (cuda::logits_stats: an online max and sum).
  void logits_stats(const Tensor& row_max, const Tensor& sums, const Tensor& logits, const Tensor& targets,
                    VocabWindow window) override;
  void cross_entropy_from_sums(const Tensor& losses, const Tensor& logsumexp, const Tensor& row_max,
                               const Tensor& sums, const Tensor& targets) override;
  // One kernel (cuda::cross_entropy_with_gradient), unless the loss-gradient fusion is off.
  void cross_entropy_with_gradient(const Tensor& losses, const Tensor& logits, const Tensor& targets, int64_t vocab,
                                   double grad_scale) override;
  void cross_entropy_backward_window(const Tensor& logits, const Tensor& logsumexp, const Tensor& targets,
                                     VocabWindow window, double grad_scale) override;

  void adamw(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, double lr, double beta1,
             double beta2, double eps, double weight_decay, int64_t step, double grad_scale) override;
  // Every run in one launch (a launch per 64 runs): backend/cuda/kernels/adamw_runs.cu.
  void adamw_runs(const Tensor& params, const Tensor& grads, const Tensor& m, const Tensor& v,
                  const std::vector<AdamWRun>& runs, double lr, double beta1, double beta2, double eps, int64_t step,
                  double grad_scale) override;

  // The typed device pointer of a tensor of this backend (the device checked, then the dtype).
  template <typename T>
  T* ptr(const Tensor& t, const char* op) const {
    if (t.device() != Device::Cuda) wrong_device(t, op);
    return t.device_data<T>(op);
  }
  void* raw(const Tensor& t, const char* op) const {
    if (t.device() != Device::Cuda) wrong_device(t, op);
    return t.device_raw();
  }

 private:
  [[noreturn]] void wrong_device(const Tensor& t, const char* op) const;
  void* pool_alloc(std::size_t bytes, const Shape& shape);  // `bytes` from the pool, or an error naming `shape`
  // A row-major operand as the caller stores it: [rows, row_length] with leading dimension ld,
  // spanning `span` elements.
  struct StoredMatrix {
    int64_t rows, row_length, ld, span;
  };
  // fp32 x rounded to bf16 in `scratch` (grown to fit) as a [rows_padded, row_length_padded]
  // matrix with 16-byte aligned rows, zeros past x's own (ld_copy: its leading dimension, x's own
  // where nothing needs padding); its device address.
  const void* bf16_copy(const Tensor& x, const StoredMatrix& stored, int64_t rows_padded, int64_t row_length_padded,
                        Tensor& scratch, int64_t& ld_copy);
  // gemm, with an fp32 `bias` (nullable) added by the GEMM's epilogue where one applies: C fp32 and
  // computed in place (no padded scratch), beta 0, the bias 16-byte aligned, cuBLASLt offering an
  // algorithm. Returns whether the bias was added; if not, the caller adds it. `c_in` (nullable):
  // beta * C read from there instead of c (cuda::gemm's), where residual_in_epilogue said yes.
  bool gemm_with_bias(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const Tensor& a,
                      int64_t lda, const Tensor& b, int64_t ldb, double beta, const Tensor& c, int64_t ldc,
                      DType accumulate, const float* bias, const Tensor* c_in = nullptr);
  // Whether gemm_bias_residual's product can read the residual as cuBLASLt's C: a product (m, n,
  // k > 0), C contiguous, and under the bf16-operand policy C computed in place (m and n multiples
  // of 8, C and the residual 16-byte aligned: no padded scratch for C).
  bool residual_in_epilogue(int64_t m, int64_t n, int64_t k, const Tensor& a, const Tensor& c, const Tensor& residual,
                            DType accumulate) const;
  // gemm_with_bias's bf16-operand product when only n needs padding, C's rows are aligned and
  // there is no bias (the LM head into logits whose rows the model padded): columns [0, n8) (n
  // rounded down to 8) in place, the last n - n8 through an [m, 8] scratch, instead of the whole
  // [m, n] through a padded C and back.
  void ragged_columns_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t kp, double alpha,
                           const void* a16, int64_t lda16, const void* b16, int64_t ldb16, double beta, float* c32,
                           int64_t ldc);
  Tensor alloc_for_overwrite(const Shape& shape, DType dtype) override;  // alloc without its zero fill
  // gemm_operands' copies zero-padded to [rows, cols] rounded up to multiples of 8 (backend.h
  // allows it), so that a shared operand of any size (GPT-2's vocabulary of 50257) is converted
  // once, not once a GEMM, and multiplies with aligned rows.
  Tensor bf16_operand_copy(const Tensor& x) override;
  // The unpadded copy and the bias gradient in one pass over x (bias_grad_and_bf16_copy); a copy
  // that needs padding takes the two passes.
  Tensor bf16_operand_copy_with_bias_grad(const Tensor& x, const Tensor& dbias) override;
  // gelu(x)'s bf16 copy in one pass (cuda::gelu_to_bf16) where the copy needs no padding.
  Tensor bf16_gelu_operand(const Tensor& x) override;
  // The GELU's input gradient's copy and bias gradient in one pass over inp and dout
  // (gelu_backward_bias_grad_and_bf16_copy) where the copy needs no padding.
  Tensor bf16_gelu_backward_operand(const Tensor& inp, const Tensor& dout, const Tensor& dbias) override;
  // The LayerNorm's output rounded to bf16 as it is stored (layernorm_forward_to_bf16) where the copy
  // needs no padding.
  Tensor bf16_layernorm_operand(const Tensor& mean, const Tensor& rstd, const Tensor& inp, const Tensor& weight,
                                const Tensor& bias, double eps) override;
  // The loss gradient written straight to its bf16 copy (cross_entropy_backward_window_to_bf16),
  // the logits left as they are, where the copy needs no padding (the model pads the logits' rows).
  Tensor bf16_cross_entropy_operand(const Tensor& logits, const Tensor& logsumexp, const Tensor& targets,
                                    VocabWindow window, double grad_scale) override;
  // The GEMM attention's output copied back to token-major rows as bf16 (cuda::attention_forward's
  // out16), and flash-mma's written as bf16 by its forward (no fp32 out: its state keeps its own
  // copy), where the copy needs no padding; the flash block kernels keep the two passes.
  Tensor bf16_attention_operand(const Tensor& state, const Tensor& qkv, int64_t n_head) override;
  Tensor bf16_attention_backward_operand(const Tensor& dout, const Tensor& qkv, const Tensor& state, int64_t n_head,
                                         const Tensor& dbias) override;
  // `buffer`, reallocated when it is undefined, of another dtype or smaller than `elements`: kept
  // from call to call (every layer has the same shapes, and a free through cudaFree would wait for
  // the whole device), counted by the allocator like any tensor.
  Tensor& grown(Tensor& buffer, int64_t elements, DType dtype);
  bf16* attention_bf16_scratch(DType dtype, int64_t batch, int64_t seq_len, int64_t channels, int64_t n_head);
  Tensor flash_mma_copies(int64_t batch, int64_t seq_len, int64_t channels, bool backward, bool qkv_given,
                          bool dout_given = false);
  // flash-mma's forward into out (fp32) or its bf16 rounding out16 (the other null), and the state,
  // from qkv as it is (bf16: attention_input_dtype's) or from its bf16 copy.
  void flash_mma_forward(float* out, bf16* out16, const Tensor& state, const Tensor& qkv, int64_t n_head,
                         const char* op);
  // The flash backward (TRIPOD_CUDA_ATTENTION's kernels) into dqkv (fp32), or where dqkv16 is given
  // (flash-mma's register backward) as c_attn's bf16 operand and the bias gradient's partial sums
  // (kernels::flash_mma::OperandOut), dqkv null; qkv and dout as attention_backward takes them.
  void flash_backward(float* dqkv, bf16* dqkv16, float* partials, const Tensor& dout, const Tensor& qkv,
                      const Tensor& state, int64_t n_head, const char* op);
  // What every tensor's deleter needs, shared with it: the byte counts, and the stream its memory
  // goes back on (cudaFreeAsync), which therefore lives until the last tensor is gone.
  struct DeviceMemory {
    std::atomic<std::size_t> live{0}, peak{0};
    cudaStream_t stream = nullptr;
    ~DeviceMemory();
  };
  int device_;
  cudaMemPool_t pool_ = nullptr;  // the device's default pool, which alloc draws from
  std::string name_;
  CudaContext ctx_;
  std::shared_ptr<DeviceMemory> counters_ = std::make_shared<DeviceMemory>();
  Tensor scratch_a_, scratch_b_;  // bf16 operands of fp32 GEMMs under Fp32Matmul::Bf16Operands
  Tensor scratch_c_;              // their fp32 C where the caller's rows are not 16-byte aligned
  Tensor score_grads_;            // attention backward's B*H*T*T score gradients
  Tensor attention_scratch_;      // attention's head-major copies of qkv, out/dout and dqkv (7*B*T*C)
  Tensor attention_scratch16_;    // its bf16 operand copies under Fp32Matmul::Bf16Operands
  cuda::AttentionKernel attention_kernel_ = cuda::choose_attention_kernel();  // TRIPOD_CUDA_ATTENTION
  bool poison_unwritten_ = choose_unwritten_poison();  // TRIPOD_POISON_UNWRITTEN: alloc_for_overwrite fills 0xFF
  cuda::CudaFusions fusions_ = cuda::choose_cuda_fusions();                   // TRIPOD_CUDA_FUSIONS
  std::string library_declined_;  // the first fused form cuBLASLt declined (library_declined)
};

}  // namespace tripod::cuda
