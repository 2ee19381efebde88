"""The flash attention's speed against the default attention, from one gpu-check run: the attention
rows of `tripod bench kernel-rate` and the GPT-2 step of `tripod bench train`, both measured by
the `flash` step with TRIPOD_CUDA_ATTENTION=flash, against the same commands' results of the
`kernels` and `bench-train` steps of the same run (GEMMs and a softmax over the T x T scores).

    python3 reports/flash_speed.py FLASH_STEP_DIR --base-kernels KERNELS_JSON --base-bench BENCH_JSON [--json OUT]

FLASH_STEP_DIR holds the flash run's kernels.json and bench.json; the base files are the `kernels`
and `bench-train` steps' (OUT_DIR/kernels/kernels.json, OUT_DIR/bench-train/bench.json). Where the
flash run has bench-large.json too (the padded vocabulary at the large batch), it is set against
bench-large.json beside BENCH_JSON.

Prints one line (the step's key figure) and, with --json, the figures. A ratio above 1 means the
flash run is faster. A figure missing on either side is reported as missing, never as a ratio.
Standard library only; exit status 1 when the flash run's own results are missing.

    python3 reports/flash_speed.py --fastest OUT_DIR

prints the TRIPOD_CUDA_ATTENTION value whose flash step passed in that run (OUT_DIR/steps.tsv)
and whose GPT-2 step beat bench-train's by the most (its speed.json), or nothing where none did:
the attention the `profile` step then profiles, so that its kernel breakdown is of the step the
MFU target is judged on.
"""
import argparse
import json
import pathlib
import sys

ATTENTION_ROWS = ("attention fwd bf16", "attention bwd bf16")


def load(path):
    try:
        return json.loads(pathlib.Path(path).read_text())
    except (OSError, ValueError):
        return None


def row_seconds(kernels, name):
    for row in (kernels or {}).get("results", []):
        if row.get("name") == name:
            return row.get("median_seconds")
    return None


def step_figures(flash_bench, base_bench):
    """A GPT-2 step with flash against the same step without: seconds, flash's MFU, the speedup."""
    flash_bench, base_bench = flash_bench or {}, base_bench or {}
    step = {"flash_seconds": flash_bench.get("median_step_seconds"), "gemm_seconds": base_bench.get("median_step_seconds"),
            "flash_mfu": flash_bench.get("mfu")}
    step["speedup"] = (step["gemm_seconds"] / step["flash_seconds"]
                       if step["flash_seconds"] and step["gemm_seconds"] else None)
    return step


def compare(flash_dir, base_kernels_path, base_bench_path):
    flash_dir = pathlib.Path(flash_dir)
    flash_kernels, base_kernels = load(flash_dir / "kernels.json"), load(base_kernels_path)
    flash_bench, base_bench = load(flash_dir / "bench.json"), load(base_bench_path)
    figures = {"rows": {}}
    for name in ATTENTION_ROWS:
        flash, base = row_seconds(flash_kernels, name), row_seconds(base_kernels, name)
        figures["rows"][name] = {"flash_seconds": flash, "gemm_seconds": base,
                                 "speedup": base / flash if flash and base else None}
    figures["step"] = dict(step_figures(flash_bench, base_bench),
                           flash_tokens_per_second=(flash_bench or {}).get("tokens_per_second"))
    # The large batch with the padded vocabulary (bench-train's fourth run), where both ran
    flash_large = load(flash_dir / "bench-large.json")
    if flash_large:
        base_large = load(pathlib.Path(base_bench_path).parent / "bench-large.json")
        figures["large_step"] = dict(step_figures(flash_large, base_large), batch=flash_large.get("batch"))
    return figures


def ms(seconds):
    return "missing" if seconds is None else "%.3f ms" % (1e3 * seconds)


def ratio(x):
    return "" if x is None else " (%.2fx)" % x


def step_text(label, step):
    mfu = "" if step["flash_mfu"] is None else ", MFU %.1f%%" % (100 * step["flash_mfu"])
    return "%s %s vs %s%s%s" % (label, ms(step["flash_seconds"]), ms(step["gemm_seconds"]), ratio(step["speedup"]), mfu)


def text(figures):
    parts = []
    for name, row in figures["rows"].items():
        parts.append("%s %s vs %s%s" % (name, ms(row["flash_seconds"]), ms(row["gemm_seconds"]), ratio(row["speedup"])))
    parts.append(step_text("GPT-2 step", figures["step"]))
    if "large_step" in figures:
        parts.append(step_text("B%s padded" % figures["large_step"]["batch"], figures["large_step"]))
    return "; ".join(parts)


FLASH_STEPS = ("flash-mma", "flash")  # gpu-check's steps, each its TRIPOD_CUDA_ATTENTION value


def fastest_passing(out_dir):
    """The flash step that passed in out_dir's run with the largest GPT-2 step speedup over
    bench-train's, if above 1: (name, speedup), else None."""
    out_dir = pathlib.Path(out_dir)
    try:
        rows = [line.split("\t") for line in (out_dir / "steps.tsv").read_text().splitlines()]
    except OSError:
        return None
    passed = {row[0] for row in rows if len(row) > 1 and row[1] == "pass"}
    best = None
    for name in FLASH_STEPS:
        speedup = ((load(out_dir / name / "speed.json") or {}).get("step") or {}).get("speedup")
        if name in passed and speedup and speedup > 1 and (best is None or speedup > best[1]):
            best = (name, speedup)
    return best


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("flash_dir", nargs="?")
    parser.add_argument("--base-kernels")
    parser.add_argument("--base-bench")
    parser.add_argument("--json")
    parser.add_argument("--fastest", metavar="OUT_DIR")
    args = parser.parse_args(argv)
    if args.fastest:
        best = fastest_passing(args.fastest)
        print(best[0] if best else "")
        return 0
    if not (args.flash_dir and args.base_kernels and args.base_bench):
        parser.error("FLASH_STEP_DIR, --base-kernels and --base-bench are needed (or --fastest OUT_DIR)")
    figures = compare(args.flash_dir, args.base_kernels, args.base_bench)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(figures, indent=1) + "\n")
    print(text(figures))
    flash_missing = figures["step"]["flash_seconds"] is None and all(
        r["flash_seconds"] is None for r in figures["rows"].values())
    return 1 if flash_missing else 0


if __name__ == "__main__":
    sys.exit(main())
