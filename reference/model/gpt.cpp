#include "model/gpt.h"

#include <algorithm>
#include <array>
#include <utility>

#include "model/gpt_activations.h"

namespace tripod {
namespace {

// The per-layer parameter (or gradient) tensors, by their positions in the span's specs.
struct LayerTensors {
  Tensor ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, fcproj_w, fcproj_b;
};

// get(index) is ParamAccess::param or ParamAccess::grad; `at` the block's 12 indices in role order.
template <typename Get>
LayerTensors layer_tensors(Get&& get, const std::array<std::size_t, kBlockRoles>& at) {
  return {get(at[0]), get(at[1]), get(at[2]), get(at[3]), get(at[4]),  get(at[5]),
          get(at[6]), get(at[7]), get(at[8]), get(at[9]), get(at[10]), get(at[11])};
}

// Where a linear layer's forward keeps its weight's prepared copy: the slot's `handle`, shared
// through `copies` (null: not kept) as the copy of the span's tensor `weight`.
struct KeptWeight {
  SharedWeightCopies* copies;
  std::size_t weight;
  Tensor* handle;
};

// The linear layer `role` on an activation that only its GEMMs read: made into `input` and passed
// as it is where it is stored, else made as the GEMM operand alone (`make_operand`: a bf16 copy
// written by the producer's own pass, BlockActivations::keep_operands), which `kept` then holds
// for the backward where non-null, and `kept_weight` the weight's prepared copy: the one a
// micro-batch in flight holds, else a new one, then held by this one too. `residual` (undefined
// for none) is added to the output.
template <class MakeInput, class MakeOperand>
void linear_on(LayerOps& layers, Backend& be, LinearRole role, const Tensor& out, const Tensor& input,
               const Tensor& weight, const Tensor& bias, const Tensor& residual, Tensor* kept, KeptWeight weight_copy,
               MakeInput&& make_input, MakeOperand&& make_operand) {
  // A weight's copy is kept with its input's only.
  Tensor* kept_weight = kept != nullptr && weight_copy.copies != nullptr ? weight_copy.handle : nullptr;
  if (kept_weight != nullptr) *kept_weight = weight_copy.copies->find(weight_copy.weight);
  if (input.defined()) {
    make_input();
    if (residual.defined())
      layers.linear_forward_residual(be, role, out, input, weight, bias, residual, kept, kept_weight);
    else
      layers.linear_forward(be, role, out, input, weight, bias, kept, kept_weight);
  } else {
    const Tensor operand = make_operand();
    layers.linear_forward_from_operand(be, role, out, operand, weight, bias, residual, kept_weight);
    if (kept != nullptr) *kept = operand;
  }
  if (kept_weight != nullptr && kept_weight->defined()) weight_copy.copies->hold(weight_copy.weight, *kept_weight);
}

}  // namespace

std::vector<ParamSpec> span_param_specs(const ModelConfig& config, const StageSpan& span) {
  const int64_t end_layer = span.end_layer < 0 ? config.n_layer : span.end_layer;
  check(span.first_layer >= 0 && span.first_layer <= end_layer && end_layer <= config.n_layer,
        "stage span of layers [", span.first_layer, ", ", end_layer, ") is outside the model's ", config.n_layer,
        " layers");
  std::vector<ParamSpec> out;
  for (const ParamSpec& spec : gpt_param_specs(config)) {
    bool keep = false;
    switch (spec.role) {
      case ParamRole::TokenEmbedding: keep = span.embedding || (span.head && config.tie_embeddings); break;  // tied: the LM head
      case ParamRole::PositionEmbedding: keep = span.embedding; break;
      case ParamRole::LnFWeight:
      case ParamRole::LnFBias:
      case ParamRole::LmHead: keep = span.head; break;
      default: keep = spec.layer >= span.first_layer && spec.layer < end_layer; break;  // a block's
    }
    if (keep) out.push_back(spec);
  }
  return out;
}

Gpt::ParamIndex::ParamIndex(const std::vector<ParamSpec>& specs, const StageSpan& span, bool tied) {
  std::array<std::size_t, kParamRoles> of_role{};  // by role, for the roles outside the blocks
  blocks.assign(static_cast<std::size_t>(span.end_layer - span.first_layer), {});
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const ParamSpec& s = specs[i];
    if (is_block_role(s.role)) blocks[static_cast<std::size_t>(s.layer - span.first_layer)][static_cast<std::size_t>(block_position(s.role))] = i;
    else of_role[static_cast<std::size_t>(s.role)] = i;
  }
  wte = of_role[static_cast<std::size_t>(ParamRole::TokenEmbedding)];
  wpe = of_role[static_cast<std::size_t>(ParamRole::PositionEmbedding)];
  lnf_w = of_role[static_cast<std::size_t>(ParamRole::LnFWeight)];
  lnf_b = of_role[static_cast<std::size_t>(ParamRole::LnFBias)];
  head = tied ? wte : of_role[static_cast<std::size_t>(ParamRole::LmHead)];
}

Gpt::Gpt(const ModelConfig& config, Backend& backend, DType dtype, LayerOps* layers, StageSpan span,
         Recompute recompute)
    : config_(config),
      backend_(backend),
      dtype_(dtype),
      span_(span),
      own_layers_(layers ? nullptr
                         : std::make_unique<SingleDeviceLayers>(config.vocab_size, backend.gemm_row_multiple())),
      layers_(layers ? layers : own_layers_.get()),
      recompute_(recompute) {
  config_.validate();
  if (span_.end_layer < 0) span_.end_layer = config_.n_layer;
  specs_ = span_param_specs(config_, span_);
  index_ = ParamIndex(specs_, span_, config_.tie_embeddings);
}

int64_t Gpt::local_heads() const {
  return config_.n_head * layers_->local_width(LinearRole::AttnOut, config_.d_model) / config_.d_model;
}

Gpt::~Gpt() = default;

bool Gpt::bf16_mixed() const {
  return dtype_ == DType::F32 && backend_.fp32_matmul() == Fp32Matmul::Bf16Operands;
}

bool Gpt::keeps_operands() const { return layers_->keeps_prepared_inputs() && bf16_mixed(); }

DType Gpt::rounded_activation_dtype() const { return bf16_mixed() ? DType::BF16 : dtype_; }

LossSum Gpt::forward(const ParamSet& params, const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T,
                     std::optional<double> loss_grad_scale) {
  ResidentParams access(params, nullptr);
  return forward(access, tokens, targets, B, T, loss_grad_scale);
}

void Gpt::backward(const ParamSet& params, const ParamSet& grads, double grad_scale) {
  ResidentParams access(params, &grads);
  backward(access, grad_scale);
}

LossSum Gpt::forward(ParamAccess& p, const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T,
                     std::optional<double> loss_grad_scale) {
  ensure_activations(B, T);
  check(!slot_used_[0], "forward(): activation slot 0 holds a micro-batch in flight (use forward_slot)");
  return forward_slot(p, 0, tokens, targets, loss_grad_scale);
}

void Gpt::backward(ParamAccess& p, double grad_scale) {
  check(!slots_.empty(), "backward() called before forward()");
  backward_slot(p, 0, grad_scale);
}

namespace {
// Ids are checked here, on the host, so that no backend ever indexes a table with a bad one (a GPU
// kernel could not say which); every rank sees the same batch, so every rank fails alike.
void check_ids(const char* kind, const int32_t* ids, int64_t n, int64_t vocab, bool allow_ignored) {
  for (int64_t i = 0; i < n; ++i)
    if (!(ids[i] < vocab && (allow_ignored || ids[i] >= 0)))
      fail(kind, " id ", ids[i], " at position ", i, " is outside the model's vocabulary of ", vocab);
}
}  // namespace

LossSum Gpt::forward_slot(ParamAccess& p, int index, const int32_t* tokens, const int32_t* targets,
                          std::optional<double> loss_grad_scale) {
  Activations& a = slot(index);
  release_weight_copies(a);  // any the slot's previous forward kept for a backward that never ran
  a.dlogits_written_at.reset();
  Backend& be = backend_;
  const double eps = config_.layernorm_eps;
  const int64_t B = batch_, T = seq_len_;
  if (span_.embedding) {
    check_ids("token", tokens, B * T, config_.vocab_size, false);
    be.upload(tokens, a.tokens);
    std::copy(tokens, tokens + B * T, a.host_tokens.data<int32_t>());
  }
  if (span_.head) {
    check_ids("target", targets, B * T, config_.vocab_size, true);
    be.upload(targets, a.targets);
  }

  const int64_t L = config_.n_layer;
  const ParamIndex& at = index_;
  if (span_.embedding) {  // encoded[R,C] = wte[tokens] + wpe[t]; otherwise it was received
    p.acquire_params(embedding_group());
    layers_->embedding_forward(be, a.encoded, a.tokens, p.param(at.wte), p.param(at.wpe), T);
    p.release_params(embedding_group());
  }
  Tensor residual = a.encoded;
  for (int64_t l = span_.first_layer; l < span_.end_layer; ++l) {
    const std::size_t k = static_cast<std::size_t>(l - span_.first_layer);
    p.acquire_params(block_group(l));
    block_forward(p, k, residual, a.layers[k]);
    p.release_params(block_group(l));
    residual = a.layers[k].res3;
  }
  LossSum result;
  if (!span_.head) return result;
  p.acquire_params(head_group(L));
  if (config_.tie_embeddings) p.acquire_params(embedding_group());
  linear_on(
      *layers_, be, LinearRole::LmHead, a.logits, a.lnf, p.param(at.head), Tensor(), Tensor(),  // [N,V]
      keeps_operands() && !forward_only_ ? &a.lnf_op : nullptr,
      KeptWeight{keep_weight_copies_ ? &weight_copies_ : nullptr, at.head, &a.head_w_op},
      [&] { be.layernorm_forward(a.lnf, a.lnf_mean, a.lnf_rstd, residual, p.param(at.lnf_w), p.param(at.lnf_b), eps); },
      [&] { return be.layernorm_operand(a.lnf_mean, a.lnf_rstd, residual, p.param(at.lnf_w), p.param(at.lnf_b), eps); });
  if (config_.tie_embeddings) p.release_params(embedding_group());
  p.release_params(head_group(L));
  // A backward to follow at a known scale: the loss may write its gradient in the same pass.
  if (loss_grad_scale && !forward_only_ &&
      layers_->loss_forward_with_gradient(be, a.losses, a.logits, a.targets, *loss_grad_scale))
    a.dlogits_written_at = loss_grad_scale;
  else
    layers_->loss_forward(be, a.losses, a.logits, a.targets);

  // Summed on the device in fp64 and a fixed order (backend.h: token order on the CPU), so a rerun
  // gives the same bits; no host copy of the losses is needed.
  be.sum_valid_losses(a.loss_sum, a.losses, a.targets);
  result.sum = a.loss_sum;
  for (int64_t n = 0; n < B * T; ++n) result.n_valid += targets[n] >= 0;
  return result;
}

void Gpt::block_forward(ParamAccess& p, std::size_t k, const Tensor& residual, BlockActivations& x) {
  Backend& be = backend_;
  const double eps = config_.layernorm_eps;
  const LayerTensors w = layer_tensors([&](std::size_t i) -> Tensor { return p.param(i); }, index_.blocks[k]);
  const BlockActivations& shared = scratch_->recomputed;
  auto keep = [&](const Tensor& recomputed, Tensor& op) {
    return x.keep_operands && !forward_only_ && !recomputed.defined() ? &op : nullptr;
  };
  const std::array<std::size_t, kBlockRoles>& at = index_.blocks[k];  // positions 2, 4, 8, 10: the weights
  auto kept_weight = [&](std::size_t position, Tensor& handle) {
    return KeptWeight{keep_weight_copies_ ? &weight_copies_ : nullptr, at[position], &handle};
  };
  LayerOps& layers = *layers_;
  // attention half: res2 = residual + c_proj(attn(c_attn(ln_1(residual))))
  linear_on(
      layers, be, LinearRole::Qkv, x.qkv, x.ln1, w.qkv_w, w.qkv_b, Tensor(), keep(shared.ln1, x.ln1_op),  // [N,3A]
      kept_weight(2, x.qkv_w_op), [&] { be.layernorm_forward(x.ln1, x.ln1_mean, x.ln1_rstd, residual, w.ln1_w, w.ln1_b, eps); },
      [&] { return be.layernorm_operand(x.ln1_mean, x.ln1_rstd, residual, w.ln1_w, w.ln1_b, eps); });
  linear_on(
      layers, be, LinearRole::AttnOut, x.res2, x.atty, w.proj_w, w.proj_b, residual, keep(shared.atty, x.atty_op),
      kept_weight(4, x.proj_w_op), [&] { be.attention_forward(x.atty, x.probs, x.qkv, local_heads()); },  // atty [N,A]
      [&] { return be.attention_operand(x.probs, x.qkv, local_heads()); });              // res2 [R,C]
  // MLP half: res3 = res2 + c_proj(gelu(c_fc(ln_2(res2))))
  linear_on(
      layers, be, LinearRole::Fc, x.fc, x.ln2, w.fc_w, w.fc_b, Tensor(), keep(shared.ln2, x.ln2_op),  // [N,F]
      kept_weight(8, x.fc_w_op), [&] { be.layernorm_forward(x.ln2, x.ln2_mean, x.ln2_rstd, x.res2, w.ln2_w, w.ln2_b, eps); },
      [&] { return be.layernorm_operand(x.ln2_mean, x.ln2_rstd, x.res2, w.ln2_w, w.ln2_b, eps); });
  linear_on(
      layers, be, LinearRole::FcOut, x.res3, x.fc_gelu, w.fcproj_w, w.fcproj_b, x.res2,
      keep(shared.fc_gelu, x.fc_gelu_op), kept_weight(10, x.fcproj_w_op), [&] { be.gelu_forward(x.fc_gelu, x.fc); },
      [&] { return be.gelu_operand(x.fc); });  // [R,C]
}

void Gpt::backward_slot(ParamAccess& p, int index, double grad_scale) {
  Activations& a = slot(index);
  Scratch& s = *scratch_;
  Backend& be = backend_;
  const int64_t T = seq_len_;

  const int64_t L = config_.n_layer;
  const bool tied = config_.tie_embeddings;
  auto param = [&](std::size_t i) -> Tensor { return p.param(i); };
  auto grad = [&](std::size_t i) -> Tensor { return p.grad(i); };
  const ParamIndex& at = index_;

  if (span_.head) {
    // dlogits[N,V] = grad_scale * (softmax - onehot), in place of the logits, or (keeps_operands)
    // only as the LM head's bf16 operand; or written by the forward already, in place (bf16-mixed's
    // bf16 logits: their own operand).
    Tensor dlogits_op;
    if (a.dlogits_written_at) {
      TRIPOD_CHECK(*a.dlogits_written_at == grad_scale, "backward at grad_scale ", grad_scale,
                   " after a forward that wrote the loss gradient at ", *a.dlogits_written_at);
      a.dlogits_written_at.reset();
      if (keeps_operands()) dlogits_op = a.logits;
    } else {
      dlogits_op = keeps_operands() ? layers_->loss_backward_operand(be, a.logits, a.targets, grad_scale) : Tensor();
      if (!dlogits_op.defined()) layers_->loss_backward(be, a.logits, a.targets, grad_scale);
    }
    p.acquire_params(head_group(L));
    p.acquire_grads(head_group(L));
    if (tied) {  // the head writes into wte's gradient, final only after the embedding backward
      p.acquire_params(embedding_group());
      p.acquire_grads(embedding_group());
    }
    // dlnf[R,C] = dlogits @ W_head ; dW_head += dlogits^T @ lnf  (dln is the scratch for dlnf)
    if (dlogits_op.defined())
      layers_->linear_backward_from_operand(be, LinearRole::LmHead, s.dln, p.grad(at.head), dlogits_op,
                                            a.lnf_mean.numel(), a.lnf, p.param(at.head), a.lnf_op, a.head_w_op);
    else
      layers_->linear_backward(be, LinearRole::LmHead, s.dln, p.grad(at.head), Tensor(), a.logits, a.lnf,
                               p.param(at.head), a.lnf_op, a.head_w_op);
    a.lnf_op = Tensor();  // used: its memory goes back now, and the head weight's copy with its last holder
    release_weight_copies(a, a.layers.size());
    be.fill(s.dres, 0.0);
    be.layernorm_backward(s.dres, p.grad(at.lnf_w), p.grad(at.lnf_b), s.dln, output(index), p.param(at.lnf_w),
                          a.lnf_mean, a.lnf_rstd);
    if (tied) p.release_params(embedding_group());
    p.release_params(head_group(L));
    p.grads_ready(head_group(L));
    // A pipeline stage holding the tied wte only for the head has its gradient final now; one that
    // also holds the embedding adds the lookup's part, to the rows of the batch's tokens, last.
    if (tied && !span_.embedding) p.grads_ready(embedding_group());
    if (tied && span_.embedding) p.grads_ready_except_rows(embedding_group(), at.wte, a.host_tokens);
  }  // otherwise s.dres holds the received d(output)

  // s.dres holds d(loss)/d(residual stream) at the current depth, walking down the layers.
  for (int64_t l = span_.end_layer - 1; l >= span_.first_layer; --l) {
    p.acquire_params(block_group(l));
    p.acquire_grads(block_group(l));
    const std::size_t k = static_cast<std::size_t>(l - span_.first_layer);
    const LayerTensors w = layer_tensors(param, at.blocks[k]);
    const LayerTensors g = layer_tensors(grad, at.blocks[k]);
    BlockActivations& x = a.layers[k];
    const Tensor& residual = k == 0 ? a.encoded : a.layers[k - 1].res3;
    // Recomputation refills what the forward did not keep, by the forward's own arithmetic.
    if (recompute_ == Recompute::Full) {
      block_forward(p, k, residual, x);  // x.res3 is rewritten with the values it holds
    } else if (recompute_ == Recompute::Selective) {
      be.gelu_forward(x.fc_gelu, x.fc);
      be.attention_forward(s.datty, x.probs, x.qkv, local_heads());  // s.datty is overwritten before it is read
    }
    // MLP half (dres = d res3 flows unchanged to res2, plus through the MLP)
    layers_->linear_backward(be, LinearRole::FcOut, s.dfc_gelu, g.fcproj_w, g.fcproj_b, s.dres, x.fc_gelu, w.fcproj_w,
                             x.fc_gelu_op, x.fcproj_w_op);
    if (x.keep_operands) {  // d fc only as c_fc's bf16 operand, with its bias gradient: never stored in fp32
      const Tensor dfc_op = be.gelu_backward_operand(x.fc, s.dfc_gelu, g.fc_b);
      layers_->linear_backward_from_operand(be, LinearRole::Fc, s.dln, g.fc_w, dfc_op, x.fc.numel() / x.fc.dim(-1),
                                            x.ln2, w.fc_w, x.ln2_op, x.fc_w_op);
    } else {
      be.gelu_backward(s.dfc, x.fc, s.dfc_gelu);
      layers_->linear_backward(be, LinearRole::Fc, s.dln, g.fc_w, g.fc_b, s.dfc, x.ln2, w.fc_w, x.ln2_op, x.fc_w_op);
    }
    be.layernorm_backward(s.dres, g.ln2_w, g.ln2_b, s.dln, x.res2, w.ln2_w, x.ln2_mean, x.ln2_rstd);
    // attention half (dres = d res2 flows unchanged to the layer input, plus through attention)
    layers_->linear_backward(be, LinearRole::AttnOut, s.datty, g.proj_w, g.proj_b, s.dres, x.atty, w.proj_w,
                             x.atty_op, x.proj_w_op);
    if (x.keep_operands) {  // d qkv only as c_attn's bf16 operand, with its bias gradient: never stored in fp32
      const Tensor dqkv_op = be.attention_backward_operand(s.datty, x.qkv, x.probs, local_heads(), g.qkv_b);
      layers_->linear_backward_from_operand(be, LinearRole::Qkv, s.dln, g.qkv_w, dqkv_op,
                                            x.qkv.numel() / x.qkv.dim(-1), x.ln1, w.qkv_w, x.ln1_op, x.qkv_w_op);
    } else {
      be.attention_backward(s.dqkv, s.datty, x.qkv, x.probs, local_heads());
      layers_->linear_backward(be, LinearRole::Qkv, s.dln, g.qkv_w, g.qkv_b, s.dqkv, x.ln1, w.qkv_w, x.ln1_op,
                               x.qkv_w_op);
    }
    be.layernorm_backward(s.dres, g.ln1_w, g.ln1_b, s.dln, residual, w.ln1_w, x.ln1_mean, x.ln1_rstd);
    x.ln1_op = x.atty_op = x.ln2_op = x.fc_gelu_op = Tensor();  // used: their memory goes back now
    release_weight_copies(a, k);  // and the weights' copies with their last holders
    p.release_params(block_group(l));
    p.grads_ready(block_group(l));
  }
  if (!span_.embedding) return;  // s.dres is d(input), for the previous stage
  // An untied embedding's gradient gets only the lookup's additions, to the rows of the batch's
  // tokens (and wpe): said before its owner provides the storage they go to.
  if (!tied) p.grads_ready_except_rows(embedding_group(), at.wte, a.host_tokens);
  // The embedding backward reads no parameters, only the token ids.
  if (!tied || !span_.head) p.acquire_grads(embedding_group());
  layers_->embedding_backward(be, p.grad(at.wte), p.grad(at.wpe), s.dres, a.tokens, T);
  p.grads_ready(embedding_group());
}

}  // namespace tripod
