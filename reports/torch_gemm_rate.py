"""PyTorch's GEMM rate on the same device as `tripod bench gemm-rate`: square bf16 matmuls with bf16
output (torch.matmul into a preallocated C), timed as Tripod times its own, so that the two rates in
one gpu-check step are the side-by-side the issue asks for ("PyTorch reaches about 790 TFLOP/s on
this H200" at 8192^3).

    python3 reports/torch_gemm_rate.py --device cuda --sizes 4096,8192 --json torch-gemm.json
    /usr/bin/python3 reports/torch_gemm_rate.py --device cpu --sizes 64 --repeat 2 --min-time-ms 0

Timing (bench/timed_regions.cpp's): one warm-up call and one timed call, then --repeat regions,
each running the matmul as many times (1 to 10000) as fill --min-time-ms by the timed call,
bracketed by a device synchronisation; the median (the upper one of an even count, as Tripod's)
and best region give the rate per call. The operands are random
normals (never constants). The JSON has gemm-rate's field names (results[].median_tflops,
pct_of_peak_median, ...), so reports read both alike.
"""
import argparse
import json
import math
import pathlib
import sys
import time

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from gpu_peer import device_name, device_peak, synchronize  # noqa: E402  (sibling module)
from torch_fp32 import ieee_fp32  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def time_regions(call, device, repeat, min_time_ms):
    """(calls per region, median seconds per call, best seconds per call)."""
    call()  # handles, heuristics, module loads
    synchronize(device)
    start = time.perf_counter()
    call()
    synchronize(device)
    once = max(time.perf_counter() - start, 1e-9)
    calls = min(10000, max(1, math.ceil(min_time_ms / 1e3 / once)))
    per_call = []
    for _ in range(repeat):
        synchronize(device)
        start = time.perf_counter()
        for _ in range(calls):
            call()
        synchronize(device)
        per_call.append((time.perf_counter() - start) / calls)
    return calls, sorted(per_call)[len(per_call) // 2], min(per_call)


def time_square(n, dtype, device, args, peak):
    generator = torch.Generator(device=device).manual_seed(n)
    a = torch.randn(n, n, generator=generator, device=device).to(dtype)
    b = torch.randn(n, n, generator=generator, device=device).to(dtype)
    c = torch.empty(n, n, dtype=dtype, device=device)
    calls, median, best = time_regions(lambda: torch.matmul(a, b, out=c), device, args.repeat, args.min_time_ms)
    flops = 2.0 * n * n * n

    def pct(seconds):
        return 100 * flops / seconds / peak if peak else None

    return {"name": f"square {n}", "group": "square", "m": n, "n": n, "k": n, "trans_a": False, "trans_b": False,
            "flops_per_gemm": flops, "calls_per_region": calls, "median_seconds": median, "best_seconds": best,
            "median_tflops": flops / median / 1e12, "best_tflops": flops / best / 1e12,
            "pct_of_peak_median": pct(median), "pct_of_peak_best": pct(best)}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda", help="cuda or cpu")
    p.add_argument("--sizes", default="4096,8192", help="square sizes n (n x n x n), comma-separated")
    p.add_argument("--dtype", default="bf16", choices=sorted(DTYPES), help="A, B and C (fp32: TF32 off)")
    p.add_argument("--repeat", type=int, default=10, help="timed regions per size")
    p.add_argument("--min-time-ms", type=float, default=5.0, help="shortest timed region")
    p.add_argument("--peak-tflops", type=float, default=0.0, help="state the peak instead of the table's")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)
    try:
        args.size_list = [int(x) for x in args.sizes.split(",") if x]
    except ValueError:
        p.error(f"--sizes: comma-separated positive integers, not {args.sizes!r}")
    if not args.size_list or min(args.size_list) < 1 or args.repeat < 1 or args.min_time_ms < 0:
        p.error("--sizes and --repeat must be positive, --min-time-ms not negative")
    return args


def main(argv=None):
    args = parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("torch_gemm_rate: --device cuda but torch sees no CUDA device")
    fp32_settings = ieee_fp32(torch) if device.type == "cuda" else "not applicable on the CPU"
    name = device_name(device)
    peak, peak_source = device_peak(name, args.dtype, args.peak_tflops)
    print(f"torch_gemm_rate: PyTorch {torch.__version__} on {name}, {args.dtype} A, B and C (fp32 accumulation), "
          f"{args.repeat} timed regions of >= {args.min_time_ms} ms; TF32 off: {fp32_settings}\n{peak_source}", flush=True)
    print(f"{'gemm':18s} {'calls':>6s} {'median ms':>11s} {'TFLOP/s':>9s} {'best':>9s} {'of peak':>8s}")
    results = []
    for n in args.size_list:
        r = time_square(n, DTYPES[args.dtype], device, args, peak)
        results.append(r)
        of_peak = f"{r['pct_of_peak_median']:.1f}%" if peak else "n/a"
        print(f"{r['name']:18s} {r['calls_per_region']:6d} {1e3 * r['median_seconds']:11.4f} "
              f"{r['median_tflops']:9.3f} {r['best_tflops']:9.3f} {of_peak:>8s}", flush=True)
    if args.json:
        out = {"benchmark": "torch_gemm_rate", "torch": torch.__version__, "device": name, "dtype": args.dtype,
               "c_dtype": args.dtype, "accumulate": "fp32", "repeat": args.repeat, "min_time_ms": args.min_time_ms,
               "peak": {"known": peak is not None, "flops": peak, "precision": args.dtype, "source": peak_source},
               "results": results}
        pathlib.Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
