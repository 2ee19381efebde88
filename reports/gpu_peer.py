"""The PyTorch peer of `tripod bench train`: GPT-2 trained with PyTorch eager on the same device,
same shape, batch and context, timed the same way, with MFU from the same FLOP formula.

    python3 reports/gpu_peer.py --device cuda --config gpt2-124m --batch 8 --seq-len 1024 \
        --precision bf16,fp32 --json peer.json
    /usr/bin/python3 reports/gpu_peer.py --device cpu --config tiny --batch 2 --seq-len 32 --steps 2

The model is what a PyTorch user writes (nn.Embedding, nn.LayerNorm, nn.Linear, tanh GELU, tied
LM head), trained on random tokens by AdamW (lr 6e-4, betas 0.9/0.95, weight decay 0.1 on the
matrices) with global-norm clipping at 1.0, as Tripod's preset does. Precisions:
  bf16  torch.autocast(bfloat16) over fp32 weights (PyTorch's usual mixed precision)
  fp32  plain fp32 with TF32 off (reports/torch_fp32.py: fp32_precision 'ieee', or allow_tf32 =
        False before PyTorch 2.9), as Tripod's fp32
Attention: torch's fused scaled_dot_product_attention (flash / memory-efficient kernels) where it
exists (torch >= 2.0), else the explicit masked softmax; --attention naive forces the latter.

FLOPs (Tripod's reference/perf/flops.h, the PaLM / llm.c convention): per token
6 * N_matmul + 12 * n_layer * d_model * seq_len, N_matmul = every block's four weight matrices plus
the (tied) LM head; embeddings' lookups, biases and LayerNorms excluded. Where the work differs from
Tripod's: the formula counts full T x T attention both ways, but flash attention skips the masked
half (so its hardware FLOPs are lower for the same model FLOPs); and autocast runs LayerNorm,
softmax and the loss in fp32 while the matmuls run in bf16 - the same split as a bf16-mixed policy.
The peak is the same datasheet table as reference/perf/device_peak.cpp (dense bf16, plain fp32);
on a CPU, or a device not listed, the MFU is null unless --peak-tflops is given.

Timing: --warmup steps untimed, then --steps steps each bracketed by a device synchronisation,
wall clock; the median step gives tokens/s and MFU. Prints a table and writes --json.
"""
import argparse
import json
import math
import pathlib
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from torch_fp32 import ieee_fp32  # noqa: E402  (the sibling module, run as a script or bundled)

# The presets of reference/configs/ that the peer runs (tiny's vocabulary comes from its data in
# Tripod; 2048 is the KJV tokenizer's).
PRESETS = {
    "gpt2-124m": dict(n_layer=12, n_head=12, d_model=768, d_ff=3072, vocab=50257, context=1024),
    "small": None,  # filled from reference/configs/small.json when asked for
    "tiny": dict(n_layer=4, n_head=4, d_model=128, d_ff=512, vocab=2048, context=64),
}

# Dense peaks, TFLOP/s, of reference/perf/device_peak.cpp's table (the rows a GPU node is likely to
# have); first match wins, so variants come before their family.
DEVICE_PEAKS = [
    ("H100 PCIe", {"bf16": 756.5, "fp32": 51}), ("H100 NVL", {"bf16": 835.5, "fp32": 60}),
    ("H100", {"bf16": 989.5, "fp32": 67}), ("H200 NVL", {"bf16": 835.5, "fp32": 60}),
    ("H200", {"bf16": 989.5, "fp32": 67}), ("A100", {"bf16": 312, "fp32": 19.5}),
    ("L40S", {"bf16": 362.05, "fp32": 91.6}), ("L4", {"bf16": 121, "fp32": 30.3}),
]


def flops_per_token(cfg, seq_len):
    """Tripod's count_flops (reference/perf/flops.cpp)."""
    c, f, layers = cfg["d_model"], cfg["d_ff"], cfg["n_layer"]
    n_matmul = layers * (3 * c * c + c * c + f * c + c * f) + cfg["vocab"] * c
    return 6.0 * n_matmul + 12.0 * layers * c * seq_len, n_matmul


def device_peak(device_name, precision, stated_tflops):
    if stated_tflops > 0:
        return stated_tflops * 1e12, "stated peak (--peak-tflops)"
    for match, peaks in DEVICE_PEAKS:
        if match.lower() in device_name.lower():
            return peaks[precision] * 1e12, f"{match} dense {precision} peak {peaks[precision]} TFLOP/s (datasheet)"
    return None, f"peak unknown for {device_name} ({precision}): give --peak-tflops"


class Block(nn.Module):
    def __init__(self, cfg, attention):
        super().__init__()
        c = cfg["d_model"]
        self.n_head, self.attention = cfg["n_head"], attention
        self.ln_1, self.ln_2 = nn.LayerNorm(c), nn.LayerNorm(c)
        self.c_attn, self.attn_proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
        self.c_fc, self.fc_proj = nn.Linear(c, cfg["d_ff"]), nn.Linear(cfg["d_ff"], c)

    def attend(self, x):
        b, t, c = x.shape
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
                   for z in self.c_attn(x).split(c, dim=-1))  # [B, H, T, hd] each
        if self.attention == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
            causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
            y = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1) @ v
        return self.attn_proj(y.transpose(1, 2).reshape(b, t, c))

    def forward(self, x):
        x = x + self.attend(self.ln_1(x))
        return x + self.fc_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, cfg, attention):
        super().__init__()
        self.wte = nn.Embedding(cfg["vocab"], cfg["d_model"])
        self.wpe = nn.Embedding(cfg["context"], cfg["d_model"])
        self.blocks = nn.ModuleList(Block(cfg, attention) for _ in range(cfg["n_layer"]))
        self.ln_f = nn.LayerNorm(cfg["d_model"])
        for name, p in self.named_parameters():  # GPT-2's initialisation scale
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, tokens, targets):
        x = self.wte(tokens) + self.wpe(torch.arange(tokens.shape[1], device=tokens.device))
        for block in self.blocks:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.T  # tied LM head
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_precision(cfg, args, device, precision):
    torch.manual_seed(1234)
    model = GPT(cfg, args.attention).to(device)
    matrices = [p for p in model.parameters() if p.dim() == 2]
    others = [p for p in model.parameters() if p.dim() != 2]
    fused = {"fused": True} if device.type == "cuda" and "fused" in torch.optim.AdamW.__init__.__code__.co_varnames else {}
    opt = torch.optim.AdamW([{"params": matrices, "weight_decay": 0.1}, {"params": others, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8, **fused)
    gen = torch.Generator(device=device).manual_seed(7)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")

    def step():
        tokens = torch.randint(0, cfg["vocab"], (args.batch, args.seq_len + 1), device=device, generator=gen)
        with autocast:
            loss = model(tokens[:, :-1], tokens[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    for _ in range(args.warmup):
        step()
    seconds, losses = [], []
    for _ in range(args.steps):
        synchronize(device)
        start = time.perf_counter()
        loss = step()
        synchronize(device)
        seconds.append(time.perf_counter() - start)
        losses.append(loss.item())
    if not all(math.isfinite(x) for x in losses):
        raise SystemExit(f"gpu_peer: non-finite loss in {precision}: {losses}")
    median = statistics.median(seconds)
    per_token, _ = flops_per_token(cfg, args.seq_len)
    achieved = per_token * args.batch * args.seq_len / median
    peak, peak_source = device_peak(device_name(device), precision, args.peak_tflops)
    result = {"precision": precision, "median_step_seconds": median, "step_seconds": seconds,
              "tokens_per_second": args.batch * args.seq_len / median, "model_flops_per_second": achieved,
              "peak_flops": peak, "peak_source": peak_source, "mfu": achieved / peak if peak else None,
              "losses": losses, "adamw_fused": bool(fused)}
    if device.type == "cuda":
        result["max_memory_allocated_bytes"] = torch.cuda.max_memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
    return result  # the model and optimizer go with this frame, before the next precision's


def device_name(device):
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def model_config(args):
    cfg = dict(PRESETS[args.config]) if PRESETS.get(args.config) else None
    if cfg is None:
        with open(pathlib.Path(__file__).resolve().parent.parent / "reference" / "configs" / f"{args.config}.json") as f:
            m = json.load(f)["model"]
        cfg = dict(n_layer=m["n_layer"], n_head=m["n_head"], d_model=m["d_model"], d_ff=m["d_ff"],
                   vocab=m["vocab_size"] or 2048, context=m["context"])
    if args.vocab:
        cfg["vocab"] = args.vocab
    cfg["context"] = max(cfg["context"], args.seq_len)
    return cfg


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda", help="cuda or cpu")
    p.add_argument("--config", default="gpt2-124m", choices=sorted(PRESETS))
    p.add_argument("--vocab", type=int, default=0, help="override the preset's vocabulary")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--steps", type=int, default=10, help="timed steps")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    p.add_argument("--precision", default="bf16,fp32", help="comma-separated: bf16 (autocast), fp32 (TF32 off)")
    p.add_argument("--attention", default="auto", choices=["auto", "sdpa", "naive"])
    p.add_argument("--peak-tflops", type=float, default=0.0, help="state the peak instead of the table's")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)
    if args.attention == "auto":
        args.attention = "sdpa" if hasattr(F, "scaled_dot_product_attention") else "naive"
    if args.attention == "sdpa" and not hasattr(F, "scaled_dot_product_attention"):
        p.error(f"--attention sdpa: torch {torch.__version__} has no scaled_dot_product_attention")
    args.precisions = [x for x in args.precision.split(",") if x]
    for x in args.precisions:
        if x not in ("bf16", "fp32"):
            p.error(f"--precision: bf16 or fp32, not {x!r}")
    if args.steps < 1 or args.batch < 1 or args.seq_len < 1:
        p.error("--steps, --batch and --seq-len must be positive")
    return args


def main(argv=None):
    args = parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("gpu_peer: --device cuda but torch sees no CUDA device")
        fp32_settings = ieee_fp32(torch)  # fp32 means fp32, as in Tripod
    else:
        fp32_settings = "not applicable on the CPU"
    cfg = model_config(args)
    per_token, n_matmul = flops_per_token(cfg, args.seq_len)
    print(f"gpu_peer: PyTorch {torch.__version__} eager on {device_name(device)}, GPT-2 {args.config} "
          f"({n_matmul / 1e6:.1f} M matmul parameters), batch {args.batch} x context {args.seq_len}, "
          f"attention {args.attention}, {per_token:.4g} model FLOPs/token; TF32 off: {fp32_settings}", flush=True)
    results = []
    for precision in args.precisions:
        r = run_precision(cfg, args, device, precision)
        results.append(r)
        mfu = f"{100 * r['mfu']:.1f}%" if r["mfu"] is not None else "n/a"
        print(f"  {precision:5s} median step {1e3 * r['median_step_seconds']:9.2f} ms  "
              f"{r['tokens_per_second']:10.0f} tokens/s  {r['model_flops_per_second'] / 1e12:8.2f} TFLOP/s  "
              f"MFU {mfu}  ({r['peak_source']})", flush=True)
    out = {"benchmark": "pytorch_peer", "torch": torch.__version__, "device": device_name(device),
           "config": args.config, "model": cfg, "batch": args.batch, "seq_len": args.seq_len,
           "attention": args.attention, "fp32_settings": fp32_settings, "warmup_steps": args.warmup, "timed_steps": args.steps,
           "model_flops_per_token": per_token, "n_params_matmul": n_matmul,
           "flop_formula": "6 * N_matmul + 12 * n_layer * d_model * seq_len (reference/perf/flops.h)",
           "results": results}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
