"""PyTorch's causal attention on the same device as the attention rows of `tripod bench kernel-rate`:
scaled_dot_product_attention at GPT-2's shape (B 8, T 1024, 12 heads of 64, bf16) through each of
PyTorch's SDPA backends that runs there (flash, cuDNN, memory-efficient, math), forward and
backward, timed as Tripod times its kernels and counted with the same nominal FLOPs (forward
4·B·H·T²·hd, backward twice that: the whole T x T square, whatever a kernel skips). Each backend's
backward also runs three times on the same inputs: the same bits each time, or not (kernels that
add with atomics differ), since Tripod's training must rerun bit for bit.

It says what attention costs where it is done well (Tripod's 12 layers spent ~15 ms of a 46 ms
GPT-2 step in attention on the H100), and whether the backend a port would use is deterministic.

    python3 reports/torch_attention_rate.py --device cuda --json torch-attention.json
    /usr/bin/python3 reports/torch_attention_rate.py --device cpu --batch 1 --seq-len 64 --heads 2 \
        --head-dim 16 --dtype fp32 --repeat 2 --min-time-ms 0

A PyTorch without torch.nn.attention (before 2.3) runs one backend, "sdpa" (its own choice), and
one without scaled_dot_product_attention (before 2.0) the explicit masked softmax, "explicit".
"""
import argparse
import json
import math
import pathlib
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from gpu_peer import device_name, device_peak, synchronize  # noqa: E402  (sibling modules)
from torch_gemm_rate import time_regions  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
BACKEND_NAMES = {"FLASH_ATTENTION": "flash", "CUDNN_ATTENTION": "cudnn", "EFFICIENT_ATTENTION": "efficient",
                 "MATH": "math"}


def explicit_attention(q, k, v):
    """softmax(q k^T / sqrt(hd), causal) v, as a PyTorch user wrote it before fused attention."""
    t = q.shape[-2]
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    mask = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)
    return torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1) @ v


def backends():
    """[(name, callable(q, k, v) -> out)]: each SDPA backend this PyTorch can be told to use."""
    if not hasattr(F, "scaled_dot_product_attention"):
        return [("explicit", explicit_attention)]
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        return [("sdpa", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True))]
    out = []
    for member, name in BACKEND_NAMES.items():
        backend = getattr(SDPBackend, member, None)
        if backend is None:
            continue

        def attend(q, k, v, backend=backend):
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out.append((name, attend))
    return out


def measure(name, attend, args, device, dtype, peak):
    generator = torch.Generator(device=device).manual_seed(1234)
    shape = (args.batch, args.heads, args.seq_len, args.head_dim)
    q, k, v = (torch.randn(*shape, generator=generator, device=device).to(dtype).requires_grad_() for _ in range(3))
    dout = torch.randn(*shape, generator=generator, device=device).to(dtype)
    products = args.batch * args.heads * args.seq_len * args.seq_len * args.head_dim
    row = {"backend": name, "batch": args.batch, "seq_len": args.seq_len, "heads": args.heads,
           "head_dim": args.head_dim, "dtype": args.dtype}
    try:
        out = attend(q, k, v)
        grads = torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
    except RuntimeError as e:  # this backend does not take this shape, dtype or device
        row["error"] = str(e).strip().splitlines()[0][:300]
        return row
    with torch.no_grad():
        _, fwd, fwd_best = time_regions(lambda: attend(q, k, v), device, args.repeat, args.min_time_ms)
    _, bwd, bwd_best = time_regions(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True), device,
                                    args.repeat, args.min_time_ms)
    reruns = [torch.autograd.grad(out, (q, k, v), dout, retain_graph=True) for _ in range(2)]
    deterministic = all(torch.equal(a, b) for again in reruns for a, b in zip(grads, again))
    for part, seconds, best, flops in (("fwd", fwd, fwd_best, 4 * products), ("bwd", bwd, bwd_best, 8 * products)):
        row[f"{part}_median_ms"] = 1e3 * seconds
        row[f"{part}_best_ms"] = 1e3 * best
        row[f"{part}_nominal_tflops"] = flops / seconds / 1e12
        row[f"{part}_pct_of_peak"] = 100 * flops / seconds / peak if peak else None
    row["deterministic_backward"] = deterministic
    return row


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda", help="cuda or cpu")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    p.add_argument("--repeat", type=int, default=10, help="timed regions per measurement")
    p.add_argument("--min-time-ms", type=float, default=5.0, help="shortest timed region")
    p.add_argument("--peak-tflops", type=float, default=0.0, help="state the peak instead of the table's")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)
    if min(args.batch, args.seq_len, args.heads, args.head_dim, args.repeat) < 1 or args.min_time_ms < 0:
        p.error("--batch, --seq-len, --heads, --head-dim and --repeat must be positive, --min-time-ms not negative")
    return args


def main(argv=None):
    args = parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("torch_attention_rate: --device cuda but torch sees no CUDA device")
    name = device_name(device)
    peak, peak_source = device_peak(name, args.dtype, args.peak_tflops)
    print(f"torch_attention_rate: PyTorch {torch.__version__} on {name}, causal attention B{args.batch} "
          f"T{args.seq_len} H{args.heads} hd{args.head_dim} {args.dtype}, {args.repeat} timed regions of >= "
          f"{args.min_time_ms} ms; nominal FLOPs: fwd 4·B·H·T²·hd, bwd twice that\n{peak_source}", flush=True)
    print(f"{'backend':10s} {'fwd ms':>9s} {'TFLOP/s':>9s} {'bwd ms':>9s} {'TFLOP/s':>9s}  deterministic backward")
    results = []
    for backend, attend in backends():
        r = measure(backend, attend, args, device, DTYPES[args.dtype], peak)
        results.append(r)
        if "error" in r:
            print(f"{backend:10s} not available here: {r['error']}", flush=True)
            continue
        print(f"{backend:10s} {r['fwd_median_ms']:9.4f} {r['fwd_nominal_tflops']:9.2f} {r['bwd_median_ms']:9.4f} "
              f"{r['bwd_nominal_tflops']:9.2f}  {'yes' if r['deterministic_backward'] else 'NO'}", flush=True)
    if args.json:
        out = {"benchmark": "torch_attention_rate", "torch": torch.__version__, "device": name, "dtype": args.dtype,
               "causal": True, "repeat": args.repeat, "min_time_ms": args.min_time_ms,
               "flop_convention": "nominal: fwd 4*B*H*T^2*hd, bwd 8*B*H*T^2*hd (tripod bench kernel-rate's)",
               "peak": {"known": peak is not None, "flops": peak, "precision": args.dtype, "source": peak_source},
               "results": results}
        pathlib.Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    ran = [r for r in results if "error" not in r]
    return 0 if ran else 1


if __name__ == "__main__":
    sys.exit(main())
