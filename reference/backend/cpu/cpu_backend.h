// The CPU backend class, shared by two backends: "cpu" (host memory) and "emulated" (the same
// arithmetic on memory tagged as a device's, so that any host access outside a backend fails and
// every upload, download and staged collective a GPU needs is exercised on a machine without one).
// Both give bit-identical results. Every operation checks that its tensors live on this backend's
// device: a host tensor handed to the emulated backend is as wrong as one handed to a GPU.
#pragma once
#include <atomic>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "backend/cuda/host/attention_choice.h"

namespace tripod::cpu {

class CpuBackend : public Backend {  // not final: a test derives a padding backend
 public:
  // The emulated device runs the CUDA backend's flash attention where TRIPOD_CUDA_ATTENTION=flash
  // asks for it (backend/cuda/host/attention_choice.h; its name then says so).
  CpuBackend(Device device, std::string name);
  std::string name() const override { return name_; }
  Device device() const override { return device_; }
  MemoryStats memory_stats() const override { return {counters_->live.load(), counters_->peak.load()}; }
  void reset_peak_memory() override { counters_->peak.store(counters_->live.load()); }

  // The emulated device pads GEMM output rows to 8 elements as the CUDA backend does, so that CI
  // trains through the padded logits; the cpu backend pads nothing. The same bits either way.
  int64_t gemm_row_multiple() const override { return device_ == Device::Emulated ? 8 : 1; }
  Tensor alloc(const Shape& shape, DType dtype) override;
  void fill(const Tensor& t, double value) override;
  void copy(const Tensor& src, const Tensor& dst) override;
  void upload(const void* host, const Tensor& dst) override;
  void download(const Tensor& src, void* host) override;
  void synchronize() override {}  // every operation has finished when it returns
  void convert(const Tensor& src, const Tensor& dst) override;

  void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const Tensor& a, int64_t lda,
            const Tensor& b, int64_t ldb, double beta, const Tensor& c, int64_t ldc, DType accumulate) override;

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
  // The emulated device's flash attention, as the CUDA backend's on an H200 (the device its kernels
  // were written for).
  bool takes_flash_attention(DType dtype, int64_t seq_len, int64_t channels, int64_t n_head) const override;
  std::string attention_declined(DType dtype, int64_t seq_len, int64_t channels, int64_t n_head) const override;
  DType attention_input_dtype(DType dtype, int64_t seq_len, int64_t channels, int64_t n_head) const override;
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
  void cross_entropy_from_sums(const Tensor& losses, const Tensor& logsumexp, const Tensor& row_max,
                               const Tensor& sums, const Tensor& targets) override;
  void cross_entropy_backward_window(const Tensor& logits, const Tensor& logsumexp, const Tensor& targets,
                                     VocabWindow window, double grad_scale) override;
  // Each row's statistics, loss and gradient in turn, while it is in cache (cpu::cross_entropy_with_gradient).
  void cross_entropy_with_gradient(const Tensor& losses, const Tensor& logits, const Tensor& targets, int64_t vocab,
                                   double grad_scale) override;

  void adamw(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, double lr, double beta1,
             double beta2, double eps, double weight_decay, int64_t step, double grad_scale) override;

  // gelu(x) rounded to bf16 in one pass (cpu::gelu_forward_to_bf16): no fp32 temporary. Unpadded,
  // as this backend's bf16_operand_copy (a subclass that pads its copies overrides both).
  Tensor bf16_gelu_operand(const Tensor& x) override;
  // flash-mma's output written as its bf16 rounding by the forward itself (cpu::flash_attention_
  // forward_mma's out16, as the CUDA backend's kernel), no fp32 out; other attentions: Backend's.
  Tensor bf16_attention_operand(const Tensor& state, const Tensor& qkv, int64_t n_head) override;
  // flash-mma's register backward writing dqkv as its bf16 operand with the bias gradient's partial
  // sums, which bias_grad adds (the CUDA backend's form, the same code); other attentions: Backend's.
  Tensor bf16_attention_backward_operand(const Tensor& dout, const Tensor& qkv, const Tensor& state, int64_t n_head,
                                         const Tensor& dbias) override;
  // The LayerNorm's output rounded to bf16 as it is written (cpu::layernorm_forward_to_bf16).
  Tensor bf16_layernorm_operand(const Tensor& mean, const Tensor& rstd, const Tensor& inp, const Tensor& weight,
                                const Tensor& bias, double eps) override;
  // The typed pointer to a tensor of this backend (the device checked, then the dtype).
  template <typename T>
  T* ptr(const Tensor& t, const char* op) const {
    if (t.device() != device_) wrong_device(t, op);
    return t.device_data<T>(op);
  }

 protected:
  // alloc without its zero fill (a reused block keeps its old bytes): the caller overwrites every
  // element (gemm_operands' copies, the operand producers' transients), so the fill was a wasted pass.
  Tensor alloc_for_overwrite(const Shape& shape, DType dtype) override;

 private:
  [[noreturn]] void wrong_device(const Tensor& t, const char* op) const;
  Tensor allocate(const Shape& shape, DType dtype, bool zero_fill);
  // Shared with every allocation's release, which may run after the backend is gone.
  struct Counters {
    std::atomic<std::size_t> live{0}, peak{0};
  };
  Device device_;
  std::string name_;
  cuda::AttentionKernel attention_kernel_;  // Flash only on the emulated device, when asked
  bool poison_unwritten_;  // TRIPOD_POISON_UNWRITTEN (the emulated device only): alloc_for_overwrite fills 0xFF
  std::shared_ptr<Counters> counters_ = std::make_shared<Counters>();
};

// Calls fn(T{}) with T = float or double, the floating dtype of an operation; others are an error.
template <typename Fn>
void dispatch_float(DType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case DType::F32: fn(float{}); return;
    case DType::F64: fn(double{}); return;
    default: fail(op, ": the CPU backend runs this operation in fp32 or fp64, not ", dtype_name(dtype));
  }
}

}  // namespace tripod::cpu
