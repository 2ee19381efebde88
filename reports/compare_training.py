"""Compares two `tripod train` runs step by step: the per-step losses (and gradient norms, and the
final validation loss) from their --set train.metrics=FILE JSONL, and optionally their --save
checkpoints. Used by ci/gpu-check.sh for GPU-vs-CPU training and for the bit-identical rerun.

    python3 reports/compare_training.py --a cuda.jsonl --b cpu.jsonl --rel-tol 1e-10 --steps 10 \
        --ckpt-a cuda_ckpt --ckpt-b cpu_ckpt --label "tiny fp64 cuda vs cpu" --json cmp.json
    python3 reports/compare_training.py --a run1.jsonl --b run2.jsonl --bitwise --ckpt-a c1 --ckpt-b c2

--rel-tol gates the loss of every step: |a - b| / |b| <= tol (b is the reference). Gradient norms
and the final parameters are reported beside it (parameters as the largest |a - b| of a tensor over
its largest |b|) and gated only by --norm-rel-tol / --param-rel-tol when given: after AdamW, an
element whose second moment is near zero turns a rounding difference of its gradient into an O(lr)
step, so parameters are looser than losses by nature. --bitwise requires every loss and norm to be
the same double (a NaN, written as null, is never the same) and the checkpoints' model and
optimizer files to be byte-identical. Exit status 0 when everything gated passes, 1 otherwise; the
JSON is written either way, also when a metrics file cannot be read (a line cut off, none with a
loss): that is a failure naming the file and line. numpy only.
"""
import argparse
import json
import math
import pathlib
import struct
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from tripod_ckpt import read_checkpoint  # noqa: E402

SAFETENSORS_DTYPES = {"F64": np.float64, "F32": np.float32, "I32": np.int32}


class MetricsError(Exception):
    """A metrics file that cannot be compared; str() names the file (and line). A failure of the
    comparison, not a traceback: the verdict is still printed and the --json still written."""


def read_metrics(path):
    """{step: record} of the step records of a train.metrics JSONL (the start event skipped)."""
    steps = {}
    try:
        with open(path) as f:
            lines = f.read().split("\n")
    except OSError as error:
        raise MetricsError(f"{path}: cannot read: {error.strerror or error}") from None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as error:
            # Most often the last line of a run that stopped mid-write.
            raise MetricsError(f"{path}:{number}: not a JSON record ({error.msg}): cut off?") from None
        if not isinstance(record, dict):
            raise MetricsError(f"{path}:{number}: not a JSON object")
        if "loss" in record:
            if not isinstance(record.get("step"), int) or isinstance(record.get("step"), bool):
                raise MetricsError(f"{path}:{number}: a record with a loss but no whole step number")
            steps[record["step"]] = record
    if not steps:
        raise MetricsError(f"{path}: holds no step records")
    return steps


def read_safetensors(path):
    """{name: float64 array} of a safetensors file (F64, F32, BF16, I32)."""
    data = pathlib.Path(path).read_bytes()
    (header_len,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + header_len])
    body = memoryview(data)[8 + header_len:]
    tensors = {}
    for name, spec in header.items():
        if name == "__metadata__":
            continue
        start, end = spec["data_offsets"]
        raw = body[start:end]
        if spec["dtype"] == "BF16":
            values = (np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            values = np.frombuffer(raw, dtype=SAFETENSORS_DTYPES[spec["dtype"]])
        tensors[name] = values.astype(np.float64).reshape(spec["shape"])
    return tensors


def relative(a, b):
    """|a - b| / |b|, and infinitely far where either is NaN or missing (Tripod's metrics write a NaN as
    null): Python's max() keeps what it holds against a NaN, so a NaN step would drop out of the worst."""
    if a is None or b is None or math.isnan(a) or math.isnan(b):
        return float("inf")
    return abs(a - b) / abs(b) if b != 0 else (0.0 if a == b else float("inf"))


def bit_identical(x, y):
    """The same double, and a number: a NaN (null in Tripod's metrics) in both runs is no evidence of
    a bit-identical rerun; "null == null" passed --bitwise where every loss was NaN."""
    return x is not None and y is not None and not math.isnan(x) and not math.isnan(y) and x == y


def fmt(value):
    return "n/a" if value is None else f"{value:.3g}"


def checkpoint_state(path):
    """{group: {tensor: float64 array}}: a sharded checkpoint's parameters and AdamW moments (a root or a
    step directory), or a directory of model.safetensors / optimizer.safetensors."""
    path = pathlib.Path(path)
    if (path / "manifest.json").exists() or (path / "latest").exists():
        _, state = read_checkpoint(path)
        return state
    return {name: read_safetensors(path / name) for name in ("model.safetensors", "optimizer.safetensors")
            if (path / name).exists()}


def compare_checkpoints(dir_a, dir_b, bitwise):
    out = {"files_identical": {}, "param_max_rel": 0.0, "worst_param": ""}
    sa, sb = checkpoint_state(dir_a), checkpoint_state(dir_b)
    for group in sorted(set(sa) | set(sb)):
        if group in sa and group in sb:
            out["files_identical"][group] = sa[group].keys() == sb[group].keys() and all(
                np.array_equal(sa[group][t], sb[group][t]) for t in sa[group])
        elif bitwise:
            out["files_identical"][group] = False
    params = "param" if "param" in sa else "model.safetensors"
    ta, tb = sa[params], sb[params]
    if set(ta) != set(tb):
        raise SystemExit(f"compare_training: checkpoints hold different tensors: {sorted(set(ta) ^ set(tb))}")
    for name in sorted(ta):
        scale = np.abs(tb[name]).max()
        err = np.abs(ta[name] - tb[name]).max() / scale if scale > 0 else float(np.abs(ta[name]).max())
        if np.isnan(err) or np.isnan(ta[name]).any() or np.isnan(tb[name]).any():  # numpy's NaN fails every test
            err = float("inf")
        if err > out["param_max_rel"] or not out["worst_param"]:
            out["param_max_rel"], out["worst_param"] = float(err), name
    return out


def compare(args):
    result = {"label": args.label, "a": args.a, "b": args.b, "mode": "bitwise" if args.bitwise else "tolerance",
              "rel_tol": args.rel_tol, "steps": [], "loss_max_rel": None, "grad_norm_max_rel": None}
    try:
        a, b = read_metrics(args.a), read_metrics(args.b)
    except MetricsError as error:
        result["failures"], result["pass"] = [str(error)], False
        return result
    failures = []
    if sorted(a) != sorted(b):
        failures.append(f"the runs logged different steps: {sorted(a)} vs {sorted(b)}")
    if args.steps and len(b) != args.steps:
        failures.append(f"expected {args.steps} steps, the reference logged {len(b)}")
    rows = []
    for step in sorted(set(a) & set(b)):
        ra, rb = a[step], b[step]
        # A run that logs no gradient norm (its key absent, not null) has none to compare.
        norms = "grad_norm" in ra and "grad_norm" in rb
        rows.append({"step": step, "loss_a": ra["loss"], "loss_b": rb["loss"],
                     "loss_rel": relative(ra["loss"], rb["loss"]), "grad_norm_a": ra.get("grad_norm"),
                     "grad_norm_b": rb.get("grad_norm"),
                     "grad_norm_rel": relative(ra["grad_norm"], rb["grad_norm"]) if norms else None,
                     "bit_identical": bit_identical(ra["loss"], rb["loss"]) and (
                         bit_identical(ra["grad_norm"], rb["grad_norm"]) if norms
                         else "grad_norm" not in ra and "grad_norm" not in rb)})
    result["steps"] = rows
    result["loss_max_rel"] = max((r["loss_rel"] for r in rows), default=None)
    result["grad_norm_max_rel"] = max((r["grad_norm_rel"] for r in rows if r["grad_norm_rel"] is not None),
                                      default=None)
    last = max(set(a) & set(b), default=None)
    if last is not None and "val_loss" in a[last] and "val_loss" in b[last]:
        result["val_loss_rel"] = relative(a[last]["val_loss"], b[last]["val_loss"])
    if args.bitwise:
        differing = [r["step"] for r in rows if not r["bit_identical"]]
        if differing:
            failures.append(f"losses or gradient norms differ, or are NaN (null), at steps {differing}")
    else:
        if result["loss_max_rel"] is not None and not result["loss_max_rel"] <= args.rel_tol:
            failures.append(f"loss differs by {result['loss_max_rel']:.3g} relative (bound {args.rel_tol:g})")
        unnormed = [r["step"] for r in rows if r["grad_norm_rel"] is None]
        if args.norm_rel_tol is not None and unnormed:
            failures.append(f"no gradient norm in both runs at steps {unnormed} (bound {args.norm_rel_tol:g})")
        elif args.norm_rel_tol is not None and rows and not result["grad_norm_max_rel"] <= args.norm_rel_tol:
            failures.append(f"gradient norm differs by {result['grad_norm_max_rel']:.3g} (bound {args.norm_rel_tol:g})")
    if args.ckpt_a and args.ckpt_b:
        ckpt = compare_checkpoints(args.ckpt_a, args.ckpt_b, args.bitwise)
        result["checkpoint"] = ckpt
        if args.bitwise and not all(ckpt["files_identical"].values()):
            failures.append(f"checkpoint files differ: {ckpt['files_identical']}")
        if args.param_rel_tol is not None and not ckpt["param_max_rel"] <= args.param_rel_tol:
            failures.append(f"parameters differ by {ckpt['param_max_rel']:.3g} in {ckpt['worst_param']} "
                            f"(bound {args.param_rel_tol:g})")
    result["failures"], result["pass"] = failures, not failures
    return result


def main(argv=None):
    p = argparse.ArgumentParser(description="compare two tripod train runs step by step")
    p.add_argument("--a", required=True, help="metrics JSONL of the run under test")
    p.add_argument("--b", required=True, help="metrics JSONL of the reference run")
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--rel-tol", type=float, help="bound on each step's loss, relative to the reference")
    mode.add_argument("--bitwise", action="store_true", help="every loss, norm and checkpoint byte equal")
    p.add_argument("--norm-rel-tol", type=float, help="also gate the gradient norms")
    p.add_argument("--param-rel-tol", type=float, help="also gate the final parameters (needs --ckpt-a/--ckpt-b)")
    p.add_argument("--ckpt-a")
    p.add_argument("--ckpt-b")
    p.add_argument("--steps", type=int, default=0, help="the number of steps both runs must have logged")
    p.add_argument("--label", default="")
    p.add_argument("--json", help="write the comparison here")
    args = p.parse_args(argv)
    result = compare(args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    status = "PASS" if result["pass"] else "FAIL"
    detail = ("bit-identical" if args.bitwise and result["pass"] else
              f"loss max rel {fmt(result['loss_max_rel'])}, grad norm max rel {fmt(result['grad_norm_max_rel'])}")
    if "checkpoint" in result:
        detail += f", parameters max rel {result['checkpoint']['param_max_rel']:.3g}"
    print(f"{status}: {args.label or args.a + ' vs ' + args.b}: {len(result['steps'])} steps, {detail}")
    for failure in result["failures"]:
        print(f"  {failure}")
    return 0 if result["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
