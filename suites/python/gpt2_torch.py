"""GPT-2 in plain PyTorch: the independent reference Tripod's C++ model is checked against.

Parameters live in a dict keyed by the Hugging Face GPT-2 names and stored in the HF layout
(Conv1D weights are [in, out], y = x @ W + b), so a Tripod or HF checkpoint loads without renaming
or transposing. Only the forward pass is written here: autograd computes every gradient, and
torch.optim.AdamW / clip_grad_norm_ do the optimizer step, so nothing is shared with the C++ code.
Runs in whatever float dtype the weights have (float64 for tight checks, float32 otherwise).
Requires Debian's /usr/bin/python3 (python3-torch 1.13).
"""
import dataclasses
import math

import torch
import torch.nn.functional as F

from reports.golden.bundle import hf_param_shapes


@dataclasses.dataclass
class GPT2Config:
    n_layer: int
    n_head: int
    n_embd: int
    n_positions: int
    vocab_size: int
    n_inner: int  # MLP width F
    layer_norm_epsilon: float = 1e-5
    tie_word_embeddings: bool = True

    @staticmethod
    def from_hf(config):
        """From a Hugging Face config.json dict (n_inner null or absent means 4 * n_embd)."""
        act = config.get("activation_function", "gelu_new")
        if act != "gelu_new":
            raise ValueError(f"config.json: activation_function {act!r}, only gelu_new is implemented")
        if config["n_embd"] % config["n_head"]:
            raise ValueError("config.json: n_embd is not a multiple of n_head")
        return GPT2Config(
            n_layer=config["n_layer"], n_head=config["n_head"], n_embd=config["n_embd"],
            n_positions=config["n_positions"], vocab_size=config["vocab_size"],
            n_inner=config.get("n_inner") or 4 * config["n_embd"],
            layer_norm_epsilon=config.get("layer_norm_epsilon", 1e-5),
            tie_word_embeddings=config.get("tie_word_embeddings", True))

    def to_hf(self):
        return {"model_type": "gpt2", "activation_function": "gelu_new",
                **dataclasses.asdict(self)}


def param_shapes(cfg):
    """{HF name: shape} for every parameter, in the order HF stores them (the golden bundle's own
    table: names and shapes are the format, not arithmetic that this reference must redo)."""
    return hf_param_shapes(cfg)


def init_params(cfg, dtype=torch.float64, seed=0):
    """Random weights for self-tests. Biases and LayerNorm affines are non-trivial on purpose, so
    that a bug touching any of them changes the outputs."""
    g = torch.Generator().manual_seed(seed)
    params = {}
    for name, shape in param_shapes(cfg).items():
        noise = torch.randn(shape, generator=g, dtype=torch.float64)
        if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
            value = 1.0 + 0.1 * noise
        elif name.endswith("bias"):
            value = 0.02 * noise
        else:
            value = (0.3 if name.startswith(("wte", "wpe", "lm_head")) else 0.1) * noise
        params[name] = value.to(dtype)
    return params


def gelu_new(x):
    # The tanh approximation GPT-2 was trained with (HF "gelu_new").
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


def forward(p, cfg, tokens):
    """tokens [B, T] (integer) -> logits [B, T, V]."""
    B, T = tokens.shape
    C, nh = cfg.n_embd, cfg.n_head
    hd, eps = C // nh, cfg.layer_norm_epsilon
    tokens = tokens.long()
    x = p["wte.weight"][tokens] + p["wpe.weight"][:T]  # [B, T, C]
    causal = torch.ones(T, T, dtype=torch.bool, device=tokens.device).tril()
    for i in range(cfg.n_layer):
        h = f"h.{i}."
        a = F.layer_norm(x, (C,), p[h + "ln_1.weight"], p[h + "ln_1.bias"], eps)
        qkv = a @ p[h + "attn.c_attn.weight"] + p[h + "attn.c_attn.bias"]  # [B, T, 3C]: q | k | v
        # Head j owns columns [j*hd, (j+1)*hd) of each third.
        q, k, v = (t.view(B, T, nh, hd).transpose(1, 2) for t in qkv.split(C, dim=-1))  # [B, nh, T, hd]
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        att = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ p[h + "attn.c_proj.weight"] + p[h + "attn.c_proj.bias"]
        m = F.layer_norm(x, (C,), p[h + "ln_2.weight"], p[h + "ln_2.bias"], eps)
        m = gelu_new(m @ p[h + "mlp.c_fc.weight"] + p[h + "mlp.c_fc.bias"])
        x = x + m @ p[h + "mlp.c_proj.weight"] + p[h + "mlp.c_proj.bias"]
    x = F.layer_norm(x, (C,), p["ln_f.weight"], p["ln_f.bias"], eps)
    head = p["wte.weight"] if cfg.tie_word_embeddings else p["lm_head.weight"]
    return x @ head.T


def lm_loss(logits, targets):
    """Mean cross-entropy over the targets that are not -1 (sum / count, as Tripod defines it)."""
    targets = targets.long().reshape(-1)
    count = int((targets != -1).sum())
    if count == 0:
        raise ValueError("every target is ignored (-1): the loss is undefined")
    total = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets, ignore_index=-1, reduction="sum")
    return total / count


def train(params, cfg, hp, tokens, targets, noise_rtol=0.0):
    """Runs hp["steps"] steps of forward / backward / clip / AdamW in place on `params` (leaf
    tensors), one batch tokens[k], targets[k] per step. hp holds the Tripod dump's "tripod" config:
    lrs, beta1, beta2, eps, weight_decay, decay (names), grad_clip (0 = none).

    Returns (losses, grad_norms, adam_slack): grad_norms are before clipping. adam_slack[name] is a
    per-element bound on how far the final parameter may drift if every gradient carries an error
    of up to noise_rtol * max|grad| of its tensor (see adam_drift_bound)."""
    names = list(params)
    for name in hp["decay"]:
        if name not in params:
            raise ValueError(f"config.json: decay lists '{name}', which is not a parameter")
    decay = set(hp["decay"])
    groups = [{"params": [params[n] for n in names if n in decay], "weight_decay": hp["weight_decay"]},
              {"params": [params[n] for n in names if n not in decay], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=hp["lrs"][0], betas=(hp["beta1"], hp["beta2"]), eps=hp["eps"])
    max_norm = hp["grad_clip"] if hp["grad_clip"] > 0 else math.inf  # inf: coef clamps to 1, no clip
    losses, norms = [], []
    slack = {n: torch.zeros_like(params[n]) for n in names}
    for k in range(hp["steps"]):
        for group in opt.param_groups:
            group["lr"] = hp["lrs"][k]
        opt.zero_grad(set_to_none=True)
        loss = lm_loss(forward(params, cfg, tokens[k]), targets[k])
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_([params[n] for n in names], max_norm)
        opt.step()
        losses.append(loss.item())
        norms.append(norm.item())
        for n in names:
            p = params[n]
            v_hat = opt.state[p]["exp_avg_sq"] / (1 - hp["beta2"] ** (k + 1))
            slack[n] += hp["lrs"][k] * adam_drift_bound(noise_rtol * p.grad.abs().max(), v_hat, hp, k + 1)
    return losses, norms, slack


def adam_drift_bound(grad_error, v_hat, hp, step):
    """How much one AdamW update u = m_hat / (sqrt(v_hat) + eps) can change (in units of lr) when
    every gradient so far is off by up to grad_error. m_hat and sqrt(v_hat) are weighted averages
    (mean and RMS) of the gradients, so each moves by at most ~grad_error; a first-order expansion
    gives |du| <= (1 + u_max) * grad_error / (sqrt(v_hat) + eps), u_max bounding |u| (below).
    Where sqrt(v_hat) is far below the gradient noise (gradients that are ~0, e.g. the attention
    key bias, whose gradient is exactly zero in exact arithmetic because softmax ignores a per-row
    constant) the update is rounding noise normalised to O(1), so the change is capped at twice
    the largest possible |u|: by
    Cauchy-Schwarz |m_t| <= (1-b1)/sqrt(1-b2) * sqrt(sum_{j<t} (b1^2/b2)^j) * sqrt(v_t), and the
    bias corrections scale that by sqrt(1-b2^t)/(1-b1^t) (so |u| <= 1 at step 1)."""
    b1, b2 = hp["beta1"], hp["beta2"]
    r = b1 * b1 / b2
    u_max = (1 - b1) / math.sqrt(1 - b2) * math.sqrt(sum(r ** j for j in range(step)))
    u_max *= math.sqrt(1 - b2 ** step) / (1 - b1 ** step)
    return torch.clamp((1 + u_max) * grad_error / (v_hat.sqrt() + hp["eps"]), max=2 * u_max)
