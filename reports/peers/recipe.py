"""The training recipe a golden bundle fixes, shared by the single-process and the DDP peer.

Each function is one rule of bundle.json (reports/FORMATS.md section 1):
  - make_model: the bundle's initial weights (float32, HF layout), converted to the run's dtype;
  - make_optimizer: torch.optim.AdamW with two parameter groups, weight decay on exactly the
    tensors of optimizer.decay and none on the rest; betas and eps from the bundle;
  - set_lr: the learning rate of each step from optimizer.lrs (no scheduler object: the bundle
    already lists the values, and schedulers differ in when they step);
  - token_loss_sum: the summed cross-entropy over targets != -1, divided by the caller by the
    count of counted targets of the WHOLE global batch (not a mean per row or per rank);
  - clip_max_norm: torch.nn.utils.clip_grad_norm_ over all parameters, whose return value (the
    norm before clipping) is the grad norm to report; grad_clip 0 means no clipping;
  - write_results: RESULTS.json and the parameters after the bundle's recorded steps, HF layout.
"""
import json
import math
import pathlib

import torch
import torch.nn.functional as F

from reports import safetensors_np as st
from reports.torch_fp32 import ieee_fp32
from reports.peers.gpt2 import GPT2, load_hf_weights

DTYPES = {"fp32": torch.float32, "fp64": torch.float64}


def configure_precision(device):
    """Plain IEEE float32 on GPUs: TF32 matmuls round inputs to 10 mantissa bits (~1e-3), far
    beyond the fp32 tolerance (1e-5). PyTorch >= 1.12 defaults matmul TF32 off, cuDNN's on."""
    if device.type == "cuda":
        ieee_fp32(torch)


def make_model(bundle, precision, device):
    model = GPT2(bundle.model)
    load_hf_weights(model, bundle.initial_weights())  # float32 values, exactly as Tripod starts
    return model.to(device=device, dtype=DTYPES[precision])


def make_optimizer(model, optimizer):
    """AdamW with decay on the bundle's `decay` names only (Tripod decays the matrices: embeddings,
    attention and MLP weights, an untied head; not biases or LayerNorm affines)."""
    decay = set(optimizer["decay"])
    named = list(model.named_parameters())
    groups = [{"params": [p for n, p in named if n in decay], "weight_decay": optimizer["weight_decay"]},
              {"params": [p for n, p in named if n not in decay], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=optimizer["lrs"][0], betas=(optimizer["beta1"], optimizer["beta2"]),
                             eps=optimizer["eps"])


def set_lr(opt, lr):
    for group in opt.param_groups:
        group["lr"] = lr


def token_loss_sum(logits, targets):
    """logits [B, T, V], targets [B, T] (-1 = not counted) -> the summed cross-entropy (a scalar)."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-1,
                           reduction="sum")


def clip_max_norm(optimizer):
    # inf: clip_grad_norm_'s coefficient max_norm / (norm + 1e-6) clamps to 1, so nothing changes
    return optimizer["grad_clip"] if optimizer["grad_clip"] > 0 else math.inf


def batches(bundle, device):
    """tokens, targets as int64 [K, B, T] on the device (cross_entropy wants int64 targets)."""
    return (torch.from_numpy(bundle.tokens).long().to(device), torch.from_numpy(bundle.targets).long().to(device))


def write_results(out, framework, precision, losses, grad_norms, params_by_step):
    """RESULTS.json (FORMATS.md section 2) with `<stem>-step<s>.safetensors` beside it."""
    out = pathlib.Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    files = {}
    for step, tensors in sorted(params_by_step.items()):
        name = f"{out.stem}-step{step}.safetensors"
        st.save(out.parent / name, tensors, {"format": "pt"})
        files[str(step)] = name
    results = {"framework": framework, "precision": precision, "steps": len(losses),
               "losses": [float(x) for x in losses], "grad_norms": [float(x) for x in grad_norms],
               "params": files}
    out.write_text(json.dumps(results, indent=1) + "\n")
