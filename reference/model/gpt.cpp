#include "model/gpt.h"


namespace tripod {
namespace {

// The per-layer parameter (or gradient) tensors, looked up by name once per call.
struct LayerTensors {
  Tensor ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, fcproj_w, fcproj_b;
};

// get(name) is ParamAccess::param or ParamAccess::grad.
template <typename Get>
LayerTensors layer_tensors(Get&& get, int64_t layer) {
  const std::string h = "h." + std::to_string(layer) + ".";
  return {get(h + "ln_1.weight"),       get(h + "ln_1.bias"),       get(h + "attn.c_attn.weight"),
          get(h + "attn.c_attn.bias"),  get(h + "attn.c_proj.weight"), get(h + "attn.c_proj.bias"),
          get(h + "ln_2.weight"),       get(h + "ln_2.bias"),       get(h + "mlp.c_fc.weight"),
          get(h + "mlp.c_fc.bias"),     get(h + "mlp.c_proj.weight"), get(h + "mlp.c_proj.bias")};
}

const char* lm_head_name(const ModelConfig& c) { return c.tie_embeddings ? "wte.weight" : "lm_head.weight"; }

}  // namespace

// Everything the backward pass needs, for one (B, T).
struct Gpt::Activations {
  int64_t batch = 0, seq_len = 0;
  Tensor tokens, targets;  // [B,T] int32
  Tensor encoded;          // [N,C] embedding output = input of layer 0
  struct Layer {
    Tensor ln1, ln1_mean, ln1_rstd;  // [N,C], [N], [N]
    Tensor qkv;                      // [N,3C]
    Tensor probs;                    // [B,H,T,T]
    Tensor atty;                     // [N,C] attention output before c_proj
    Tensor res2;                     // [N,C] residual after attention
    Tensor ln2, ln2_mean, ln2_rstd;  // [N,C], [N], [N]
    Tensor fc, fc_gelu;              // [N,F]
    Tensor res3;                     // [N,C] layer output
  };
  std::vector<Layer> layers;
  Tensor lnf, lnf_mean, lnf_rstd;  // [N,C], [N], [N]
  Tensor logits;                   // [N,V]; becomes dlogits in backward
  Tensor losses;                   // [N]
  // Backward scratch, reused by every layer.
  Tensor dres, dln, datty, dqkv, dfc, dfc_gelu;  // [N,C] x3, [N,3C], [N,F] x2
  std::size_t bytes = 0;
};

Gpt::Gpt(const ModelConfig& config, Backend& backend, DType dtype, LayerOps* layers)
    : config_(config),
      backend_(backend),
      dtype_(dtype),
      specs_(gpt_param_specs(config)),
      own_layers_(layers ? nullptr : std::make_unique<SingleDeviceLayers>()),
      layers_(layers ? layers : own_layers_.get()) {
  config_.validate();
}

int64_t Gpt::local_heads() const {
  return config_.n_head * layers_->local_width(LinearRole::AttnOut, config_.d_model) / config_.d_model;
}

Gpt::~Gpt() = default;

void Gpt::ensure_activations(int64_t B, int64_t T) {
  if (acts_ && acts_->batch == B && acts_->seq_len == T) return;
  check(T <= config_.context, "sequence length ", T, " exceeds the model's context (position table) of ",
        config_.context);
  // Split layers produce only this rank's share of some activations (see LayerOps::local_width).
  const int64_t N = B * T, C = config_.d_model, F = layers_->local_width(LinearRole::Fc, config_.d_ff),
                V = layers_->local_width(LinearRole::LmHead, config_.vocab_size), H = local_heads();
  const int64_t A = layers_->local_width(LinearRole::AttnOut, C);  // attention width: H heads of C / n_head
  const int64_t R = layers_->local_tokens(N);  // residual-stream rows on this rank
  auto a = std::make_unique<Activations>();
  a->batch = B;
  a->seq_len = T;
  auto make = [&](Shape shape, DType dt) {
    Tensor t = backend_.alloc(shape, dt);
    a->bytes += t.bytes();
    return t;
  };
  auto act = [&](Shape shape) { return make(std::move(shape), dtype_); };
  a->tokens = make({B, T}, DType::I32);
  a->targets = make({B, T}, DType::I32);
  a->encoded = act({R, C});
  for (int64_t l = 0; l < config_.n_layer; ++l) {
    a->layers.push_back({act({R, C}), act({R}), act({R}), act({B, T, 3 * A}), act({B, H, T, T}), act({B, T, A}),
                         act({R, C}), act({R, C}), act({R}), act({R}), act({N, F}), act({N, F}), act({R, C})});
  }
  a->lnf = act({R, C});
  a->lnf_mean = act({R});
  a->lnf_rstd = act({R});
  a->logits = act({N, V});
  a->losses = act({N});
  a->dres = act({R, C});
  a->dln = act({R, C});
  a->datty = act({B, T, A});
  a->dqkv = act({B, T, 3 * A});
  a->dfc = act({N, F});
  a->dfc_gelu = act({N, F});
  acts_ = std::move(a);
}

std::size_t Gpt::activation_bytes() const { return acts_ ? acts_->bytes : 0; }

Tensor Gpt::logits() const {
  check(acts_ != nullptr, "logits() called before forward()");
  return acts_->logits.reshape({acts_->batch, acts_->seq_len, config_.vocab_size});
}

LossSum Gpt::forward(const ParamSet& params, const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T) {
  ResidentParams access(params, nullptr);
  return forward(access, tokens, targets, B, T);
}

void Gpt::backward(const ParamSet& params, const ParamSet& grads, double grad_scale) {
  ResidentParams access(params, &grads);
  backward(access, grad_scale);
}

LossSum Gpt::forward(ParamAccess& p, const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T) {
  ensure_activations(B, T);
  Activations& a = *acts_;
  Backend& be = backend_;
  const double eps = config_.layernorm_eps;
  be.upload(tokens, a.tokens);
  be.upload(targets, a.targets);

  const int64_t L = config_.n_layer;
  auto param = [&](const std::string& name) -> Tensor { return p.param(name); };
  // encoded[N,C] = wte[tokens] + wpe[t]
  p.acquire_params(embedding_group());
  layers_->embedding_forward(be, a.encoded, a.tokens, p.param("wte.weight"), p.param("wpe.weight"), T);
  p.release_params(embedding_group());
  Tensor residual = a.encoded;
  for (int64_t l = 0; l < L; ++l) {
    p.acquire_params(block_group(l));
    const LayerTensors w = layer_tensors(param, l);
    Activations::Layer& x = a.layers[static_cast<std::size_t>(l)];
    // attention half: res2 = residual + c_proj(attn(c_attn(ln_1(residual))))
    be.layernorm_forward(x.ln1, x.ln1_mean, x.ln1_rstd, residual, w.ln1_w, w.ln1_b, eps);
    layers_->linear_forward(be, LinearRole::Qkv, x.qkv, x.ln1, w.qkv_w, w.qkv_b);         // [N,3C]
    be.attention_forward(x.atty, x.probs, x.qkv, local_heads());                         // [N,C]
    layers_->linear_forward(be, LinearRole::AttnOut, x.res2, x.atty, w.proj_w, w.proj_b);  // [N,C]
    be.add(x.res2, x.res2, residual);
    // MLP half: res3 = res2 + c_proj(gelu(c_fc(ln_2(res2))))
    be.layernorm_forward(x.ln2, x.ln2_mean, x.ln2_rstd, x.res2, w.ln2_w, w.ln2_b, eps);
    layers_->linear_forward(be, LinearRole::Fc, x.fc, x.ln2, w.fc_w, w.fc_b);              // [N,F]
    be.gelu_forward(x.fc_gelu, x.fc);
    layers_->linear_forward(be, LinearRole::FcOut, x.res3, x.fc_gelu, w.fcproj_w, w.fcproj_b);  // [N,C]
    be.add(x.res3, x.res3, x.res2);
    p.release_params(block_group(l));
    residual = x.res3;
  }
  p.acquire_params(head_group(L));
  if (config_.tie_embeddings) p.acquire_params(embedding_group());
  be.layernorm_forward(a.lnf, a.lnf_mean, a.lnf_rstd, residual, p.param("ln_f.weight"), p.param("ln_f.bias"), eps);
  layers_->linear_forward(be, LinearRole::LmHead, a.logits, a.lnf, p.param(lm_head_name(config_)), Tensor());  // [N,V]
  if (config_.tie_embeddings) p.release_params(embedding_group());
  p.release_params(head_group(L));
  layers_->loss_forward(be, a.losses, a.logits, a.targets);

  // Sum on the host in token order, in fp64, so the result does not depend on the device.
  LossSum result;
  std::vector<double> losses = to_host_f64(be, a.losses);
  for (int64_t n = 0; n < B * T; ++n) {
    if (targets[n] < 0) continue;
    result.sum += losses[static_cast<std::size_t>(n)];
    ++result.n_valid;
  }
  return result;
}

void Gpt::backward(ParamAccess& p, double grad_scale) {
  check(acts_ != nullptr, "backward() called before forward()");
  Activations& a = *acts_;
  Backend& be = backend_;
  const int64_t T = a.seq_len;

  const int64_t L = config_.n_layer;
  const bool tied = config_.tie_embeddings;
  auto param = [&](const std::string& name) -> Tensor { return p.param(name); };
  auto grad = [&](const std::string& name) -> Tensor { return p.grad(name); };

  // dlogits[N,V] = grad_scale * (softmax - onehot), in place of the logits.
  layers_->loss_backward(be, a.logits, a.targets, grad_scale);
  p.acquire_params(head_group(L));
  p.acquire_grads(head_group(L));
  if (tied) {  // the head writes into wte's gradient, final only after the embedding backward
    p.acquire_params(embedding_group());
    p.acquire_grads(embedding_group());
  }
  // dlnf[N,C] = dlogits @ W_head ; dW_head += dlogits^T @ lnf  (dln is the scratch for dlnf)
  layers_->linear_backward(be, LinearRole::LmHead, a.dln, p.grad(lm_head_name(config_)), Tensor(), a.logits, a.lnf,
                           p.param(lm_head_name(config_)));
  const Tensor& last = L > 0 ? a.layers.back().res3 : a.encoded;
  be.fill(a.dres, 0.0);
  be.layernorm_backward(a.dres, p.grad("ln_f.weight"), p.grad("ln_f.bias"), a.dln, last, p.param("ln_f.weight"),
                        a.lnf_mean, a.lnf_rstd);
  if (tied) p.release_params(embedding_group());
  p.release_params(head_group(L));
  p.grads_ready(head_group(L));

  // a.dres holds d(loss)/d(residual stream) at the current depth, walking down the layers.
  for (int64_t l = L - 1; l >= 0; --l) {
    p.acquire_params(block_group(l));
    p.acquire_grads(block_group(l));
    const LayerTensors w = layer_tensors(param, l);
    const LayerTensors g = layer_tensors(grad, l);
    Activations::Layer& x = a.layers[static_cast<std::size_t>(l)];
    const Tensor& residual = l == 0 ? a.encoded : a.layers[static_cast<std::size_t>(l - 1)].res3;
    // MLP half (dres = d res3 flows unchanged to res2, plus through the MLP)
    layers_->linear_backward(be, LinearRole::FcOut, a.dfc_gelu, g.fcproj_w, g.fcproj_b, a.dres, x.fc_gelu, w.fcproj_w);
    be.gelu_backward(a.dfc, x.fc, a.dfc_gelu);
    layers_->linear_backward(be, LinearRole::Fc, a.dln, g.fc_w, g.fc_b, a.dfc, x.ln2, w.fc_w);
    be.layernorm_backward(a.dres, g.ln2_w, g.ln2_b, a.dln, x.res2, w.ln2_w, x.ln2_mean, x.ln2_rstd);
    // attention half (dres = d res2 flows unchanged to the layer input, plus through attention)
    layers_->linear_backward(be, LinearRole::AttnOut, a.datty, g.proj_w, g.proj_b, a.dres, x.atty, w.proj_w);
    be.attention_backward(a.dqkv, a.datty, x.qkv, x.probs, local_heads());
    layers_->linear_backward(be, LinearRole::Qkv, a.dln, g.qkv_w, g.qkv_b, a.dqkv, x.ln1, w.qkv_w);
    be.layernorm_backward(a.dres, g.ln1_w, g.ln1_b, a.dln, residual, w.ln1_w, x.ln1_mean, x.ln1_rstd);
    p.release_params(block_group(l));
    p.grads_ready(block_group(l));
  }
  // The embedding backward reads no parameters, only the token ids.
  if (!tied) p.acquire_grads(embedding_group());
  layers_->embedding_backward(be, p.grad("wte.weight"), p.grad("wpe.weight"), a.dres, a.tokens, T);
  p.grads_ready(embedding_group());
}

}  // namespace tripod
