"""The single-process PyTorch peer: trains a golden bundle's K steps and writes peer results.

    /usr/bin/python3 -m reports.peers.single BUNDLE --precision fp32|fp64 --out RESULTS.json [--device cpu|cuda]
    tripod golden check BUNDLE RESULTS.json        (or python3 -m reports.golden.check ...)

Runs with Debian's torch 1.13 on a CPU and with a current PyTorch on a GPU. This file is the
template for a peer in another framework (Megatron-LM, DeepSpeed, torchtitan). To match the
bundle's fp64 reference within the check's tolerance, a peer must reproduce, exactly:
  1. the model: GPT-2 with pre-LayerNorm blocks, LayerNorm eps = model.layer_norm_epsilon (1e-5,
     not 1e-6), tanh GELU ("gelu_new", not the erf GELU), learned positions, causal attention with
     scale 1/sqrt(head size), biases everywhere but the LM head, the head tied to wte unless
     tie_word_embeddings is false; no dropout;
  2. the initial weights: model.safetensors (float32, HF names, Conv1D weights [in, out]), not the
     framework's own init; an fp64 peer converts those float32 values exactly;
  3. the data: tokens[k] and targets[k] of step k as given (no shuffling, no shifting: targets
     are already the next tokens), -1 targets ignored;
  4. the loss: the sum of cross-entropies over counted targets divided by the count over the whole
     global batch (data-parallel ranks and micro-batches must not average per-part means);
  5. the gradient norm: the global L2 norm over all gradients before clipping (the value
     clip_grad_norm_ returns), reported per step;
  6. clipping: multiply all gradients by min(1, grad_clip / (norm + 1e-6)); grad_clip 0 = none;
  7. AdamW (torch.optim.AdamW semantics): p -= lr * weight_decay * p, then the bias-corrected Adam
     step with beta1, beta2 and eps (added to sqrt(v_hat)); weight decay only on the tensors listed
     in optimizer.decay, and the tied wte/head counted once;
  8. the learning rate of step k: optimizer.lrs[k], used for that step's update (no warmup or
     schedule of the framework's own);
  9. precision: fp32 means IEEE float32 everywhere (no TF32, no autocast, no bf16 master copies);
     fp64 means float64 everywhere.
It writes RESULTS.json with the losses and grad norms of every step and the parameters after the
steps the bundle records (1 and K) in HF names and layout, as `<stem>-step<s>.safetensors`.
"""
import argparse
import sys
import time

import torch

from reports.golden.bundle import BundleError, read_bundle
from reports.peers import recipe
from reports.peers.gpt2 import export_hf_weights


def train(bundle, precision, device):
    """Runs the bundle's K steps; returns (losses, grad_norms, {step: HF tensors})."""
    recipe.configure_precision(device)
    model = recipe.make_model(bundle, precision, device)
    opt = recipe.make_optimizer(model, bundle.optimizer)
    max_norm = recipe.clip_max_norm(bundle.optimizer)
    tokens, targets = recipe.batches(bundle, device)  # [K, B, T]
    losses, norms, saved = [], [], {}
    for k in range(bundle.steps):
        recipe.set_lr(opt, bundle.optimizer["lrs"][k])
        opt.zero_grad(set_to_none=True)
        count = (targets[k] != -1).sum()  # counted targets of the whole batch
        loss = recipe.token_loss_sum(model(tokens[k]), targets[k]) / count
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)  # returns the pre-clip norm
        opt.step()
        losses.append(loss.item())
        norms.append(norm.item())
        if k + 1 in bundle.param_steps:
            saved[k + 1] = export_hf_weights(model)
    return losses, norms, saved


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m reports.peers.single", description=__doc__.split("\n")[0])
    parser.add_argument("bundle", help="a golden bundle directory (tripod golden --out DIR)")
    parser.add_argument("--precision", choices=["fp32", "fp64"], default="fp32")
    parser.add_argument("--out", required=True, help="RESULTS.json; parameters are written beside it")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    args = parser.parse_args(argv)
    try:
        bundle = read_bundle(args.bundle)
    except BundleError as e:
        print(f"single peer: bad bundle: {e}", file=sys.stderr)
        return 2
    device = torch.device(args.device)
    start = time.perf_counter()
    losses, norms, saved = train(bundle, args.precision, device)
    framework = f"pytorch {torch.__version__} (single process, {device.type})"
    recipe.write_results(args.out, framework, args.precision, losses, norms, saved)
    print(f"single peer: {bundle.steps} steps in {args.precision} on {device} in {time.perf_counter() - start:.1f} s; "
          f"loss {losses[0]:.6f} -> {losses[-1]:.6f} -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
