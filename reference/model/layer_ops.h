// The layers the GPT is written in, as one replaceable strategy: embedding, the five linear
// layers (named by their role in the block, not by how they are split) and the loss. The model
// calls these and nothing else for them; SingleDeviceLayers does the plain computation, and a
// parallel strategy (parallel/tp_layers.h) declares from outside how each role is split — the
// model never learns. Activation widths come from the strategy too, since a split layer produces
// only its share of the outputs.
#pragma once
#include <map>

#include "backend/backend.h"

namespace tripod {

enum class LinearRole { Qkv, AttnOut, Fc, FcOut, LmHead };

class LayerOps {
 public:
  virtual ~LayerOps() = default;
  // The width of the activation a role works on, on this rank: the output width of Qkv, Fc and
  // LmHead, the input width of AttnOut and FcOut. `full` is the unsplit width.
  virtual int64_t local_width(LinearRole role, int64_t full) const = 0;
  // Rows of the residual stream (embedding output, LayerNorms, residual adds) on this rank, of
  // n_tokens = B*T: all of them unless the strategy splits the sequence.
  virtual int64_t local_tokens(int64_t n_tokens) const { return n_tokens; }

  virtual void embedding_forward(Backend& be, const Tensor& out, const Tensor& tokens, const Tensor& wte,
                                 const Tensor& wpe, int64_t seq_len) = 0;
  virtual void embedding_backward(Backend& be, const Tensor& dwte, const Tensor& dwpe, const Tensor& dout,
                                  const Tensor& tokens, int64_t seq_len) = 0;
  // out = inp @ weight^T + bias (bias may be undefined). `kept_input` non-null: the strategy may
  // set it to inp's prepared GEMM operand (under bf16-mixed, Backend::gemm_operands' bf16 copy),
  // for linear_backward to take instead of preparing inp again; else it stays undefined.
  // `kept_weight` likewise for the weight's prepared operand (set only where kept_input is); a
  // copy there on entry (another micro-batch's, model/weight_copies.h) is used, not made again.
  virtual void linear_forward(Backend& be, LinearRole role, const Tensor& out, const Tensor& inp,
                              const Tensor& weight, const Tensor& bias, Tensor* kept_input = nullptr,
                              Tensor* kept_weight = nullptr) = 0;
  // linear_forward, then the residual stream's add: out = residual + (inp @ weight^T + bias), after
  // a block's output projections (AttnOut, FcOut). This default adds in a second pass
  // (Backend::add); SingleDeviceLayers reads the residual in the GEMM (Backend::gemm_bias_residual).
  virtual void linear_forward_residual(Backend& be, LinearRole role, const Tensor& out, const Tensor& inp,
                                       const Tensor& weight, const Tensor& bias, const Tensor& residual,
                                       Tensor* kept_input = nullptr, Tensor* kept_weight = nullptr);
  // Whether linear_forward may set a kept input (the model accounts for their memory if so); such a
  // strategy also takes an input as its prepared operand (linear_forward_from_operand).
  virtual bool keeps_prepared_inputs() const { return false; }
  // linear_forward from inp's prepared operand (Backend::gelu_operand's), which linear_backward then
  // takes as the kept input, with no inp; `residual` as linear_forward_residual's (undefined for
  // none); `kept_weight` as linear_forward's. Only where keeps_prepared_inputs(); an error otherwise.
  virtual void linear_forward_from_operand(Backend& be, LinearRole role, const Tensor& out, const Tensor& inp_operand,
                                           const Tensor& weight, const Tensor& bias, const Tensor& residual,
                                           Tensor* kept_weight = nullptr);
  // linear_backward from dout's prepared operand (Backend::gelu_backward_operand's, which also added
  // the bias gradient) for `rows` rows. Only where keeps_prepared_inputs(); an error otherwise.
  virtual void linear_backward_from_operand(Backend& be, LinearRole role, const Tensor& dinp, const Tensor& dweight,
                                            const Tensor& dout_operand, int64_t rows, const Tensor& inp,
                                            const Tensor& weight, const Tensor& kept_input,
                                            const Tensor& kept_weight = Tensor());
  // dinp is overwritten; dweight and dbias accumulate. `kept_input`, `kept_weight`: what
  // linear_forward set for this inp and weight, unchanged since (undefined for none).
  virtual void linear_backward(Backend& be, LinearRole role, const Tensor& dinp, const Tensor& dweight,
                               const Tensor& dbias, const Tensor& dout, const Tensor& inp, const Tensor& weight,
                               const Tensor& kept_input = Tensor(), const Tensor& kept_weight = Tensor()) = 0;
  // losses[N] per token (0 where ignored); then, in place, logits become the loss gradient.
  virtual void loss_forward(Backend& be, const Tensor& losses, const Tensor& logits, const Tensor& targets) = 0;
  virtual void loss_backward(Backend& be, const Tensor& logits, const Tensor& targets, double grad_scale) = 0;
  // loss_backward's gradient as the LM head's prepared operand (Backend::
  // cross_entropy_backward_window_operand), for linear_backward_from_operand; the logits are used
  // up. Only where keeps_prepared_inputs(); an error otherwise.
  virtual Tensor loss_backward_operand(Backend& be, const Tensor& logits, const Tensor& targets, double grad_scale);
  // loss_forward for a forward whose backward will follow at grad_scale: where the strategy can, it
  // also writes the loss gradient in place of the logits (the gradient loss_backward would write,
  // and loss_backward_operand's operand: the logits themselves), reading them once for both, and
  // returns true; then no loss_backward follows. This default writes the losses only (false).
  virtual bool loss_forward_with_gradient(Backend& be, const Tensor& losses, const Tensor& logits,
                                          const Tensor& targets, double grad_scale);
};

class SingleDeviceLayers final : public LayerOps {
 public:
  // `logits_row_multiple` (Backend::gemm_row_multiple): the logits' rows are padded to a multiple
  // of it, columns past `vocab` being padding that no softmax reads and whose gradient is zero.
  SingleDeviceLayers(int64_t vocab, int64_t logits_row_multiple);
  int64_t local_width(LinearRole role, int64_t full) const override;
  bool keeps_prepared_inputs() const override { return true; }
  void linear_forward_from_operand(Backend& be, LinearRole role, const Tensor& out, const Tensor& inp_operand,
                                   const Tensor& weight, const Tensor& bias, const Tensor& residual,
                                   Tensor* kept_weight = nullptr) override;
  void linear_backward_from_operand(Backend& be, LinearRole role, const Tensor& dinp, const Tensor& dweight,
                                    const Tensor& dout_operand, int64_t rows, const Tensor& inp, const Tensor& weight,
                                    const Tensor& kept_input, const Tensor& kept_weight = Tensor()) override;
  void embedding_forward(Backend& be, const Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                         int64_t seq_len) override;
  void embedding_backward(Backend& be, const Tensor& dwte, const Tensor& dwpe, const Tensor& dout,
                          const Tensor& tokens, int64_t seq_len) override;
  void linear_forward(Backend& be, LinearRole role, const Tensor& out, const Tensor& inp, const Tensor& weight,
                      const Tensor& bias, Tensor* kept_input = nullptr, Tensor* kept_weight = nullptr) override;
  void linear_forward_residual(Backend& be, LinearRole role, const Tensor& out, const Tensor& inp,
                               const Tensor& weight, const Tensor& bias, const Tensor& residual,
                               Tensor* kept_input = nullptr, Tensor* kept_weight = nullptr) override;
  void linear_backward(Backend& be, LinearRole role, const Tensor& dinp, const Tensor& dweight, const Tensor& dbias,
                       const Tensor& dout, const Tensor& inp, const Tensor& weight,
                       const Tensor& kept_input = Tensor(), const Tensor& kept_weight = Tensor()) override;
  // The whole vocabulary as one window of the Backend's windowed cross-entropy (padding columns
  // past it where the rows are padded): the forward keeps each row's logsumexp (per logits
  // tensor, for every micro-batch in flight, until its backward), so the backward reads the
  // logits once instead of recomputing their max and sum (GPT-2: three passes over 1.6 GB of
  // logits become one). The forward's max and sum come from Backend::logits_stats (one pass on a
  // device). On the CPU the same arithmetic in the same order as the backend's whole-vocabulary
  // kernels, bit for bit (backend/kernels/cross_entropy_math.h, the CPU's vocab_window_kernels.cpp).
  void loss_forward(Backend& be, const Tensor& losses, const Tensor& logits, const Tensor& targets) override;
  void loss_backward(Backend& be, const Tensor& logits, const Tensor& targets, double grad_scale) override;
  Tensor loss_backward_operand(Backend& be, const Tensor& logits, const Tensor& targets, double grad_scale) override;
  // Backend::cross_entropy_with_gradient, one pass over each row for its loss and gradient (GPT-2
  // B8 x T1024 bf16-mixed: one read of 0.82 GB of logits fewer a micro-batch), unless the logits
  // are rounded to a separate operand.
  bool loss_forward_with_gradient(Backend& be, const Tensor& losses, const Tensor& logits, const Tensor& targets,
                                  double grad_scale) override;

 private:
  // Throws naming `op` unless a loss and a target go with each row of logits of the LM head's width.
  void check_loss_shapes(const char* op, const Tensor& losses, const Tensor& logits, const Tensor& targets) const;
  // The forward's logsumexp of these logits, dropped from the map (a backward uses it up).
  Tensor take_logsumexp(const Tensor& logits);
  VocabWindow whole_vocabulary() const { return {0, vocab_, vocab_}; }
  int64_t vocab_, logits_row_multiple_;
  std::map<const void*, Tensor> logsumexp_;
};

}  // namespace tripod
