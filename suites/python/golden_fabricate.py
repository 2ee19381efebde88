"""Fabricates a golden bundle (reports/FORMATS.md section 1) with torch standing in for Tripod, so
that the golden check and the PyTorch peers can be tested without the C++ program.

The fp64 reference is gpt2_torch.train in float64 (an independent functional GPT-2 that matches
Tripod's fp64 run to ~1e-15 on real bundles); the fp32 reference is the same code in float32; the
slack files are what Tripod writes: for a peer of precision P, the sum over steps k <= s of
lr_k * adam_drift_bound(rtol_P * max|clipped grad_k of the tensor|, v_hat_k), from the fp64 run.
The model is small (2 layers, C=32, 4 heads, F=96, vocab 64, B=4, T=16, K=4 by default), some
targets are -1 (more in the first half of the rows), and the clip threshold is set so that the
first step clips.

    fabricate_bundle(directory, tied=True, steps=4, seed=0) -> directory
"""
import json
import pathlib

import numpy as np
import torch

import gpt2_torch as ref
from reports import safetensors_np as st

# Tripod's tolerances (reference/golden/bundle.h kRtolFp64, kRtolFp32); the slack is computed for these.
RTOL = {"fp64": 1e-10, "fp32": 1e-4}  # as reference/golden/bundle.h
CLIP_RULE = ("torch.nn.utils.clip_grad_norm_: global L2 norm over all gradients, multiplied by "
             "min(1, grad_clip / (norm + 1e-6)); 0 means no clipping")
ADAMW_RULE = "torch.optim.AdamW: decoupled weight decay p -= lr*wd*p, then bias-corrected Adam"
TOLERANCE_RULE = ("a peer of precision P is compared with the fp64 reference: per step |loss/ref - 1| <= rtol_P and "
                  "|grad_norm/ref - 1| <= rtol_P; per parameter tensor after a recorded step s, elementwise "
                  "|p - ref| <= rtol_P * max|ref| + slack_P(s) (reference/slack-P-step<s>.safetensors)")


def small_config(tied=True):
    return ref.GPT2Config(n_layer=2, n_head=4, n_embd=32, n_positions=16, vocab_size=64, n_inner=96,
                          layer_norm_epsilon=1e-5, tie_word_embeddings=tied)


def random_batches(cfg, steps, batch, seq_len, seed):
    """tokens, targets int32 [K, B, T]: targets are the next tokens, some -1: about 40% in the first
    half of the rows and 10% in the second, so that data-parallel ranks count different numbers of
    targets (a per-rank mean averaged over ranks is then visibly wrong)."""
    g = torch.Generator().manual_seed(seed)
    stream = torch.randint(0, cfg.vocab_size, (steps, batch, seq_len + 1), generator=g, dtype=torch.int32)
    targets = stream[..., 1:].clone()
    ignore_rate = torch.where(torch.arange(batch) < batch // 2, 0.4, 0.1).view(1, batch, 1)
    targets[torch.rand(targets.shape, generator=g) < ignore_rate] = -1
    targets[:, :, 0] = stream[:, :, 1]  # never a row (or step) without a counted target
    return stream[..., :-1].contiguous().numpy(), targets.numpy()


def run(weights, cfg, hp, tokens, targets, dtype, steps, noise_rtol=0.0):
    """gpt2_torch.train for the first `steps` steps from the float32 `weights`, in `dtype`;
    returns (losses, grad_norms, {name: params}, {name: slack}) as numpy."""
    params = {n: torch.tensor(w, dtype=dtype, requires_grad=True) for n, w in weights.items()}
    losses, norms, slack = ref.train(params, cfg, dict(hp, steps=steps), torch.from_numpy(tokens),
                                     torch.from_numpy(targets), noise_rtol)
    return (losses, norms, {n: p.detach().numpy().copy() for n, p in params.items()},
            {n: s.double().numpy() for n, s in slack.items()})


def write_reference(directory, precision, losses, norms, params_by_step, slack_by_step):
    """reference/<precision>.json with its parameter and slack files, as Tripod writes them."""
    d = pathlib.Path(directory) / "reference"
    d.mkdir(parents=True, exist_ok=True)
    params, slacks = {}, {}
    for step, tensors in params_by_step.items():
        params[str(step)] = f"{precision}-step{step}.safetensors"
        st.save(d / params[str(step)], tensors)
        slacks[str(step)] = f"slack-{precision}-step{step}.safetensors"
        st.save(d / slacks[str(step)], slack_by_step[step])
    doc = {"precision": precision, "steps": len(losses), "losses": losses, "grad_norms": norms,
           "params": params, "slack": slacks}
    (d / f"{precision}.json").write_text(json.dumps(doc, indent=1) + "\n")


def fabricate_bundle(directory, tied=True, steps=4, seed=0, batch=4, seq_len=16):
    d = pathlib.Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    cfg = small_config(tied)
    weights = {n: w.to(torch.float32).numpy() for n, w in ref.init_params(cfg, seed=seed).items()}
    tokens, targets = random_batches(cfg, steps, batch, seq_len, seed + 1)
    decay = [n for n, shape in ref.param_shapes(cfg).items() if len(shape) == 2]  # the matrices
    hp = {"lrs": [3e-3 * (k + 1) / steps for k in range(steps)], "beta1": 0.9, "beta2": 0.95, "eps": 1e-8,
          "weight_decay": 0.1, "decay": decay, "grad_clip": 0.0}
    # Clip at 0.8 of the first step's gradient norm, so that clipping happens at least once.
    hp["grad_clip"] = 0.8 * run(weights, cfg, hp, tokens, targets, torch.float64, 1)[1][0]

    recorded = sorted({1, steps})
    by_step = {p: {} for p in ("fp64", "fp32")}
    slack = {p: {} for p in ("fp64", "fp32")}
    for s in recorded:
        for p in ("fp64", "fp32"):  # the slack of a peer of precision p, from the fp64 run
            losses64, norms64, by_step["fp64"][s], slack[p][s] = run(weights, cfg, hp, tokens, targets,
                                                                      torch.float64, s, RTOL[p])
        losses32, norms32, by_step["fp32"][s], _ = run(weights, cfg, hp, tokens, targets, torch.float32, s)
    write_reference(d, "fp64", losses64, norms64, by_step["fp64"], slack["fp64"])
    write_reference(d, "fp32", losses32, norms32, by_step["fp32"], slack["fp32"])

    st.save(d / "model.safetensors", weights, {"format": "pt"})
    np.save(d / "tokens.npy", tokens.astype("<i4"))
    np.save(d / "targets.npy", targets.astype("<i4"))
    meta = {
        "format": "tripod-golden", "version": 1,
        "model": cfg.to_hf(),
        "batch": {"steps": steps, "batch_size": batch, "seq_len": seq_len},
        "loss": "mean cross-entropy over the targets != -1 of the whole global batch",
        "data_parallel": "a data-parallel rank r of R trains on rows [r*B/R, (r+1)*B/R) of each step's batch; the "
                         "loss and gradients are those of the whole batch (sum over ranks of the per-rank sums, "
                         "divided by the global count of counted targets)",
        "optimizer": {"name": "adamw", **hp, "clip_rule": CLIP_RULE, "adamw_rule": ADAMW_RULE},
        "tolerances": {"fp64": {"rtol": RTOL["fp64"]}, "fp32": {"rtol": RTOL["fp32"]}, "rule": TOLERANCE_RULE},
        "source": {"fabricated_by": "suites/python/golden_fabricate.py", "seed": seed},
    }
    (d / "bundle.json").write_text(json.dumps(meta, indent=1) + "\n")
    return d
