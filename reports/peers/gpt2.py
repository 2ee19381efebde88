"""GPT-2 as a PyTorch user writes it, plus loading from and exporting to a bundle's HF layout.

nn.Embedding for tokens and positions, pre-LayerNorm blocks (nn.LayerNorm with the bundle's eps),
causal self-attention with scale 1/sqrt(head size) written out as a masked softmax, an MLP of two
nn.Linear with the tanh GELU (nn.GELU(approximate="tanh") = HF "gelu_new"), a final LayerNorm and
an LM head without bias, tied to wte unless the bundle says untied. No dropout.

Module attribute names are chosen so that named_parameters() yields exactly the Hugging Face
GPT-2 names of the bundle (wte.weight, h.0.attn.c_attn.weight, ...); the one difference is the
layout of the four Conv1D weights (c_attn, attn.c_proj, c_fc, mlp.c_proj): HF stores them
[in, out] (y = x @ W + b) while nn.Linear holds [out, in] (y = x @ W.T + b), so loading and
exporting transpose them. A framework whose names differ (Megatron-LM's fused qkv, torchtitan's
wq/wk/wv) maps them here; c_attn's columns are q | k | v, head j owning columns [j*hd, (j+1)*hd)
of each third.

Attention is the explicit masked softmax rather than a fused kernel: the same on torch 1.13 and
2.x, any device and fp64 (fused kernels may skip or reorder work; they are fine in fp32 within the
check's tolerance but are not needed here).
"""
import math

import numpy as np
import torch
import torch.nn as nn

# The weights HF GPT-2 stores as Conv1D, [in, out].
CONV1D_SUFFIXES = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)  # -> q | k | v
        self.c_proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):  # x [B, T, C]
        B, T, C = x.shape
        hd = C // self.n_head
        q, k, v = self.c_attn(x).split(C, dim=-1)  # each [B, T, C]
        q, k, v = (t.view(B, T, self.n_head, hd).transpose(1, 2) for t in (q, k, v))  # [B, nh, T, hd]
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(hd)  # [B, nh, T, T]
        # True where query t may attend to key s (s <= t). Made here rather than kept as a bool
        # buffer: DDP broadcasts buffers at construction, and gloo cannot broadcast bool tensors.
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
        y = torch.softmax(scores, dim=-1) @ v  # [B, nh, T, hd]
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))


class MLP(nn.Module):
    def __init__(self, n_embd, n_inner):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, n_inner)
        self.gelu = nn.GELU(approximate="tanh")  # GPT-2's gelu_new, not the erf GELU
        self.c_proj = nn.Linear(n_inner, n_embd)

    def forward(self, x):  # [B, T, C] -> [B, T, C]
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)
        self.attn = CausalSelfAttention(cfg.n_embd, cfg.n_head)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)
        self.mlp = MLP(cfg.n_embd, cfg.n_inner)

    def forward(self, x):  # pre-LayerNorm residual block, [B, T, C]
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2(nn.Module):
    """cfg: reports.golden.bundle.ModelConfig (n_layer, n_head, n_embd, n_inner, n_positions,
    vocab_size, layer_norm_epsilon, tie_word_embeddings)."""

    def __init__(self, cfg):
        super().__init__()
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.n_positions, cfg.n_embd)
        self.h = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            # One Parameter under two names: named_parameters() reports it once, as wte.weight, and
            # its gradient is the sum of the embedding's and the head's.
            self.lm_head.weight = self.wte.weight

    def forward(self, tokens):  # tokens [B, T] int64 -> logits [B, T, V]
        T = tokens.shape[1]
        positions = torch.arange(T, device=tokens.device)
        x = self.wte(tokens) + self.wpe(positions)  # [B, T, C]
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def is_conv1d(name):
    return name.endswith(CONV1D_SUFFIXES)


def load_hf_weights(model, tensors):
    """Copies {HF name: ndarray} (HF layout, any float dtype) into the model's parameters, converting
    to their dtype; every parameter must be given, and nothing else."""
    params = dict(model.named_parameters())
    missing, extra = sorted(set(params) - set(tensors)), sorted(set(tensors) - set(params))
    if missing or extra:
        raise ValueError(f"weights do not fit the model: missing {missing[:4]}, unexpected {extra[:4]}")
    with torch.no_grad():
        for name, p in params.items():
            value = torch.from_numpy(np.ascontiguousarray(tensors[name]))
            value = value.T if is_conv1d(name) else value  # HF [in, out] -> nn.Linear [out, in]
            if value.shape != p.shape:
                raise ValueError(f"weights: {name} has shape {list(tensors[name].shape)}, the model needs "
                                 f"{list(p.T.shape if is_conv1d(name) else p.shape)} (HF layout)")
            p.copy_(value)


def export_hf_weights(model):
    """{HF name: ndarray} in HF order and layout, in the parameters' dtype: copies on the host
    (a CPU tensor's .numpy() shares memory, which the next optimizer step would overwrite)."""
    out = {}
    for name, p in model.named_parameters():
        value = p.detach().cpu()
        out[name] = np.array((value.T if is_conv1d(name) else value).numpy(), copy=True, order="C")
    return out
