// Gpt's activation slots: their allocation for a micro-batch shape, claiming and releasing them,
// the weight copies they hold, and the accounting of activation memory.
#include "model/gpt_activations.h"

#include <algorithm>
#include <utility>

#include "core/host_memory.h"

namespace tripod {
namespace {

// Gives back the copy of the span's tensor `weight` that `handle` holds, if it holds one.
void give_back(SharedWeightCopies& copies, std::size_t weight, Tensor& handle) {
  if (!handle.defined()) return;
  copies.release(weight);
  handle = Tensor();
}

}  // namespace

std::unique_ptr<Gpt::Activations> Gpt::make_slot() const {
  const int64_t B = batch_, T = seq_len_;
  // Split layers produce only this rank's share of some activations (see LayerOps::local_width).
  const int64_t N = B * T, C = config_.d_model, F = layers_->local_width(LinearRole::Fc, config_.d_ff),
                V = layers_->local_width(LinearRole::LmHead, config_.vocab_size), H = local_heads();
  const int64_t A = layers_->local_width(LinearRole::AttnOut, C);  // attention width: H heads of C / n_head
  const int64_t R = layers_->local_tokens(N);  // residual-stream rows on this rank
  auto a = std::make_unique<Activations>();
  auto make = [&](Shape shape, DType dt) {
    Tensor t = backend_.alloc(shape, dt);
    a->bytes += t.bytes();
    return t;
  };
  auto act = [&](Shape shape) { return make(std::move(shape), dtype_); };
  a->tokens = make({B, T}, DType::I32);
  a->host_tokens = host_alloc({B, T}, DType::I32);
  a->targets = make({B, T}, DType::I32);
  a->encoded = act({R, C});
  // A recomputed tensor is the shared one; every other is the micro-batch's own.
  const BlockActivations& shared = scratch_->recomputed;
  auto own_as = [&](const Tensor& recomputed, Shape shape, DType dt) {
    return recomputed.defined() ? recomputed : make(std::move(shape), dt);
  };
  auto own = [&](const Tensor& recomputed, Shape shape) { return own_as(recomputed, std::move(shape), dtype_); };
  const bool keep_operands = keeps_operands();
  // bf16 where the backend's attention reads nothing of qkv but its bf16 rounding (backend.h).
  const DType qkv_dtype = backend_.attention_input_dtype(dtype_, T, A, H);
  // A kept bf16 copy is half its fp32 activation (unpadded; a device may pad rows to 8).
  auto kept_bytes = [&](const Tensor& recomputed, int64_t numel) {
    return keep_operands && !recomputed.defined() ? static_cast<std::size_t>(numel) * sizeof(bf16) : 0;
  };
  for (int64_t l = span_.first_layer; l < span_.end_layer; ++l) {
    BlockActivations x;
    // What only a GEMM reads is made as its operand alone where the layers keep operands.
    auto own_unless_operand = [&](const Tensor& recomputed, Shape shape) {
      return !keep_operands || recomputed.defined() ? own(recomputed, std::move(shape)) : Tensor();
    };
    x.ln1 = own_unless_operand(shared.ln1, {R, C});
    x.ln1_mean = own(shared.ln1_mean, {R});
    x.ln1_rstd = own(shared.ln1_rstd, {R});
    x.qkv = own_as(shared.qkv, {B, T, 3 * A}, qkv_dtype);
    x.probs = own(shared.probs, backend_.attention_state_shape(dtype_, B, T, A, H));  // [B,H,T,T] on the CPU
    x.atty = own_unless_operand(shared.atty, {B, T, A});
    x.res2 = own(shared.res2, {R, C});
    x.ln2 = own_unless_operand(shared.ln2, {R, C});
    x.ln2_mean = own(shared.ln2_mean, {R});
    x.ln2_rstd = own(shared.ln2_rstd, {R});
    x.fc = own_as(shared.fc, {N, F}, rounded_activation_dtype());
    x.fc_gelu = own_unless_operand(shared.fc_gelu, {N, F});
    x.res3 = act({R, C});
    x.keep_operands = keep_operands;
    a->bytes += kept_bytes(shared.ln1, R * C) + kept_bytes(shared.atty, N * A) + kept_bytes(shared.ln2, R * C) +
                kept_bytes(shared.fc_gelu, N * F);  // (their GEMMs' weights' copies: ensure_activations)
    a->layers.push_back(x);
  }
  if (span_.head) {
    if (!keep_operands) a->lnf = act({R, C});  // else made only as the LM head's operand
    a->bytes += kept_bytes(Tensor(), R * C);   // lnf's copy
    a->lnf_mean = act({R});
    a->lnf_rstd = act({R});
    a->logits = make({N, V}, rounded_activation_dtype());
    a->losses = act({N});
    a->loss_sum = make({1}, DType::F64);
  }
  return a;
}

void Gpt::ensure_activations(int64_t B, int64_t T) {
  if (scratch_ && batch_ == B && seq_len_ == T) {
    if (slots_.empty()) {
      slots_.push_back(make_slot());
      slot_used_.push_back(false);
    }
    return;
  }
  check(T <= config_.context, "sequence length ", T, " exceeds the model's context (position table) of ",
        config_.context);
  check(std::find(slot_used_.begin(), slot_used_.end(), true) == slot_used_.end(),
        "the micro-batch shape changed from [", batch_, ",", seq_len_, "] to [", B, ",", T,
        "] while micro-batches are in flight");
  batch_ = B;
  seq_len_ = T;
  slots_.clear();
  slot_used_.clear();
  const int64_t N = B * T, C = config_.d_model, F = layers_->local_width(LinearRole::Fc, config_.d_ff);
  const int64_t A = layers_->local_width(LinearRole::AttnOut, C), R = layers_->local_tokens(N);
  auto s = std::make_unique<Scratch>();
  auto make = [&](Shape shape, DType dt) {
    Tensor t = backend_.alloc(shape, dt);
    s->bytes += t.bytes();
    return t;
  };
  auto act = [&](Shape shape) { return make(std::move(shape), dtype_); };
  s->dres = act({R, C});
  s->dln = act({R, C});
  // d atty in the dtype of attention's qkv (Backend::attention_input_dtype: bf16 where the attention
  // reads nothing of either but its bf16 rounding), unless selective recomputation writes the
  // recomputed attention's (discarded) fp32 output there.
  s->datty = make({B, T, A}, recompute_ == Recompute::Selective
                                 ? dtype_
                                 : backend_.attention_input_dtype(dtype_, T, A, local_heads()));
  if (!keeps_operands()) {  // else d qkv and d fc are made only as their bf16 operands
    s->dqkv = act({B, T, 3 * A});
    s->dfc = act({N, F});
  }
  s->dfc_gelu = make({N, F}, rounded_activation_dtype());  // c_proj's dX, bf16 under bf16-mixed
  if (span_.end_layer > span_.first_layer && recompute_ != Recompute::None) {
    const int64_t H = local_heads();
    BlockActivations& r = s->recomputed;
    r.probs = act(backend_.attention_state_shape(dtype_, B, T, A, H));
    r.fc_gelu = act({N, F});
    if (recompute_ == Recompute::Full) {  // all but the block output
      r.ln1 = act({R, C});
      r.ln1_mean = act({R});
      r.ln1_rstd = act({R});
      r.qkv = make({B, T, 3 * A}, backend_.attention_input_dtype(dtype_, T, A, H));
      r.atty = act({B, T, A});
      r.res2 = act({R, C});
      r.ln2 = act({R, C});
      r.ln2_mean = act({R});
      r.ln2_rstd = act({R});
      r.fc = make({N, F}, rounded_activation_dtype());
    }
  }
  if (keeps_operands() && keep_weight_copies_) {
    // The weights' copies kept for the backward, once for every slot (model/weight_copies.h): a
    // weight's with its input's, so none for a recomputed input. c_attn [3A, C], c_proj [C, A],
    // c_fc [F, C], c_proj [C, F]; the LM head's [V, C] (unpadded; a device may pad rows to 8).
    const BlockActivations& r = s->recomputed;
    auto copy_bytes = [](const Tensor& recomputed, int64_t numel) {
      return recomputed.defined() ? 0 : static_cast<std::size_t>(numel) * sizeof(bf16);
    };
    s->bytes += static_cast<std::size_t>(span_.end_layer - span_.first_layer) *
                (copy_bytes(r.ln1, 3 * A * C) + copy_bytes(r.atty, C * A) + copy_bytes(r.ln2, F * C) +
                 copy_bytes(r.fc_gelu, C * F));
    if (span_.head) s->bytes += copy_bytes(Tensor(), config_.vocab_size * C);
  }
  scratch_ = std::move(s);
  slots_.push_back(make_slot());
  slot_used_.push_back(false);
}

int Gpt::claim_slot(int64_t B, int64_t T) {
  ensure_activations(B, T);
  for (std::size_t i = 0; i < slots_.size(); ++i)
    if (!slot_used_[i]) {
      slot_used_[i] = true;
      return static_cast<int>(i);
    }
  slots_.push_back(make_slot());  // one more micro-batch in flight than ever before
  slot_used_.push_back(true);
  return static_cast<int>(slots_.size()) - 1;
}

void Gpt::release_slot(int index) {
  check(index >= 0 && static_cast<std::size_t>(index) < slots_.size() && slot_used_[static_cast<std::size_t>(index)],
        "release_slot(", index, "): not a claimed activation slot");
  slot_used_[static_cast<std::size_t>(index)] = false;
  release_weight_copies(slot(index));  // a slot given up without its backward holds them still
}

void Gpt::release_weight_copies(Activations& a, std::size_t k) {
  if (k == a.layers.size()) return give_back(weight_copies_, index_.head, a.head_w_op);
  BlockActivations& x = a.layers[k];
  const std::array<std::size_t, kBlockRoles>& at = index_.blocks[k];  // positions 2, 4, 8, 10: the weights
  give_back(weight_copies_, at[2], x.qkv_w_op);
  give_back(weight_copies_, at[4], x.proj_w_op);
  give_back(weight_copies_, at[8], x.fc_w_op);
  give_back(weight_copies_, at[10], x.fcproj_w_op);
}

void Gpt::release_weight_copies(Activations& a) {
  for (std::size_t k = 0; k <= a.layers.size(); ++k) release_weight_copies(a, k);
}

void Gpt::set_keep_weight_copies(bool keep) {
  check(slots_.empty() && weight_copies_.held() == 0,
        "set_keep_weight_copies: the activations are allocated already (set it before the first forward)");
  keep_weight_copies_ = keep;
}

Gpt::Activations& Gpt::slot(int index) const {
  check(index >= 0 && static_cast<std::size_t>(index) < slots_.size(),
        "activation slot ", index, " does not exist (forward must run first)");
  return *slots_[static_cast<std::size_t>(index)];
}

Tensor Gpt::input(int index) const { return slot(index).encoded; }
Tensor Gpt::output(int index) const {
  const Activations& a = slot(index);
  return a.layers.empty() ? a.encoded : a.layers.back().res3;
}
Tensor Gpt::output_grad() const {
  check(scratch_ != nullptr, "output_grad() called before any forward");
  return scratch_->dres;
}
Tensor Gpt::input_grad() const { return output_grad(); }  // backward leaves d(input) where d(output) was

std::size_t Gpt::activation_bytes() const {
  std::size_t bytes = scratch_ ? scratch_->bytes : 0;
  for (const auto& s : slots_) bytes += s->bytes;
  return bytes;
}

Tensor Gpt::logits() const {
  check(!slots_.empty() && span_.head, "logits() called before forward() (or on a stage without the LM head)");
  const Tensor& logits = slots_[0]->logits;  // [N, local vocabulary width]: padded or split by the layers
  return logits.reshape({batch_, seq_len_, logits.numel() / (batch_ * seq_len_)});
}

}  // namespace tripod
