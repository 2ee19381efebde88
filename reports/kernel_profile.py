"""Where a GPU training step's time goes: reads Nsight Compute's CSV (one row per profiled kernel,
the metric gpu__time_duration.sum) and sums the kernels' device time by kernel name.

    python3 reports/kernel_profile.py NCU_CSV --steps S [--json OUT] [--key KEY_TXT] [--top N]

ci/gpu-check.sh's `profile` step writes NCU_CSV with
    ncu --metrics gpu__time_duration.sum --csv --print-kernel-base demangled --log-file NCU_CSV ...
over `tripod bench train --steps 1` (its warm-up step and one timed step: --steps 2 here), so the
table is per step: each name's calls and milliseconds divided by S, its share of all kernel time.
Names are the demangled ones shortened (short_name): the template arguments stay, since Tripod's
generic kernels (elementwise_kernel, warp_rows_kernel) say what they compute only there
(elementwise_kernel<ConvertOp<float, bf16>>); `--print-kernel-base function` lumped them all.
Kernel time only: the gaps between launches (host work, launch latency) are what a step's wall
time adds to the total. ncu serialises the kernels and times each alone, with its caches as the
previous kernel left them (--cache-control none).

Standard library only. Exit status 1 when the file holds no kernel row (ncu failed or found no
kernel): an empty table is never printed as a result.
"""
import argparse
import csv
import json
import sys

UNIT_SECONDS = {"nsecond": 1e-9, "ns": 1e-9, "usecond": 1e-6, "us": 1e-6, "msecond": 1e-3, "ms": 1e-3,
                "second": 1.0, "s": 1.0}


def read_rows(path):
    """The CSV's kernel rows, from its header line on (ncu's own ==PROF== lines come before it)."""
    with open(path, newline="") as f:
        lines = f.read().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        return []
    return list(csv.DictReader(lines[start:]))


# Namespaces that say nothing in a table of one program's kernels.
_NOISE = ("(anonymous namespace)::", "tripod::cuda::", "tripod::kernels::", "tripod::")


def short_name(name):
    """'void tripod::cuda::(anonymous namespace)::elementwise_kernel<tripod::cuda::(anonymous
    namespace)::ConvertOp<float, tripod::bf16>>(T1, long)' -> 'elementwise_kernel<ConvertOp<float,
    bf16>>': no return type, namespaces or parameter list; a plain name is left as it is."""
    name = name.strip()
    if name.startswith("void "):
        name = name[len("void "):]
    depth = 0  # cut the parameter list: the first '(' outside template brackets (not "(anonymous")
    for i, c in enumerate(name):
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
        elif c == "(" and depth == 0 and not name.startswith("(anonymous", i):
            name = name[:i]
            break
    for noise in _NOISE:
        name = name.replace(noise, "")
    return name


def kernel_seconds(row):
    """One row's duration in seconds; ncu may print the value with thousands separators."""
    unit = row.get("Metric Unit", "").strip()
    if unit not in UNIT_SECONDS:
        raise ValueError(f"unknown time unit {unit!r} for kernel {row.get('Kernel Name')!r}")
    return float(row["Metric Value"].replace(",", "")) * UNIT_SECONDS[unit]


def summarise(rows, steps):
    by_name = {}
    for row in rows:
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        name = short_name(row["Kernel Name"])
        entry = by_name.setdefault(name, {"name": name, "calls": 0, "seconds": 0.0})
        entry["calls"] += 1
        entry["seconds"] += kernel_seconds(row)
    total = sum(e["seconds"] for e in by_name.values())
    kernels = sorted(by_name.values(), key=lambda e: -e["seconds"])
    for e in kernels:
        e["calls_per_step"] = e["calls"] / steps
        e["ms_per_step"] = 1e3 * e["seconds"] / steps
        e["share"] = e["seconds"] / total if total > 0 else 0.0
    return {"steps": steps, "kernel_ms_per_step": 1e3 * total / steps,
            "launches_per_step": sum(e["calls"] for e in kernels) / steps, "kernels": kernels}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("csv")
    p.add_argument("--steps", type=float, required=True, help="training steps the profile covers")
    p.add_argument("--json", help="write the summary here")
    p.add_argument("--key", help="write a one-line key figure here")
    p.add_argument("--top", type=int, default=25)
    a = p.parse_args()
    if a.steps <= 0:
        sys.exit("kernel_profile: --steps must be > 0")
    s = summarise(read_rows(a.csv), a.steps)
    if not s["kernels"]:
        sys.exit(f"kernel_profile: no kernel rows with gpu__time_duration.sum in {a.csv}")
    print(f"kernel time per step {s['kernel_ms_per_step']:.2f} ms over {s['launches_per_step']:.0f} launches")
    print(f"{'ms/step':>9} {'share':>6} {'calls':>6}  kernel")
    for e in s["kernels"][:a.top]:
        print(f"{e['ms_per_step']:9.3f} {100 * e['share']:5.1f}% {e['calls_per_step']:6.1f}  {e['name'][:120]}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(s, f, indent=1)
    if a.key:
        top = ", ".join(f"{e['name'][:40]} {100 * e['share']:.0f}%" for e in s["kernels"][:4])
        with open(a.key, "w") as f:
            f.write(f"{s['kernel_ms_per_step']:.1f} ms of kernels/step, {s['launches_per_step']:.0f} launches; {top}\n")


if __name__ == "__main__":
    main()
