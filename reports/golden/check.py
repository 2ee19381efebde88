"""Holds a peer's results (reports/FORMATS.md section 2) against a golden bundle's fp64 reference.

    /usr/bin/python3 -m reports.golden.check BUNDLE RESULTS.json [--json OUT.json]
    (also `tripod golden check BUNDLE RESULTS.json [--json OUT.json]`, which runs this module)

The rule (bundle.json "tolerances"): a peer of precision P (fp32 or fp64) is compared with the
*fp64* reference, so that only the peer's own rounding counts, never Tripod's:
  - per step, |loss / ref_loss - 1| <= rtol_P and |grad_norm / ref_grad_norm - 1| <= rtol_P
    (grad norms are global L2 norms before clipping);
  - per parameter tensor after a step s that both the bundle and the peer recorded, elementwise
    |p - ref| <= rtol_P * max|ref tensor| + slack_P(s), slack_P(s) being the bundle's per-element
    AdamW drift allowance (reference/slack-P-step<s>.safetensors, see below).
Why these rtols (the bundle carries them; Tripod's defaults are these):
  fp64 1e-10: double rounding is ~1e-16 per operation; a small model's reductions give ~1e-15 in
      losses and ~1e-13 in parameters after Adam, so 1e-10 leaves orders of margin for another
      summation order or reduction tree (data or tensor parallel), while a real bug (a wrong scale,
      a transposed weight, a missing bias, a different clip or decay rule) errs by >= 1e-4.
  fp32 1e-4: float rounding is 6e-8 per operation; one step's fp32 gradients (same weights) are
      within 1.2e-6 of max|g| of each tensor (measured on the default bundle below), so 1e-5 would
      have ~10x margin for ONE step. Over several steps the fp32 trajectory drifts further than the
      first-order slack models: Adam turns the rounding noise of near-zero gradients into O(lr)
      parameter differences, which feed back into every later gradient. Measured with torch
      float32 (reports/peers/single.py) against the fp64 reference of `tripod golden --config tiny
      --steps K` (4 layers, C=128, vocab 2048, B=16, T=64, lr warming up to 2.4e-3), worst over steps:
          K    loss rel   grad-norm rel   param error/allowed: rtol 1e-5   rtol 1e-4 (slack at 1e-4)
          4    6.1e-8     4.3e-6          2.1                              0.22
          8    1.6e-7     1.9e-5          3.7                              0.37
          16   4.4e-6     7.9e-4          4.1                              0.41
          32   4.0e-5     3.1e-3          13.6                             1.4
      Tripod's own fp32 run at K=8: 4.8e-8, 1.4e-5, 2.6 (1e-4: 0.26). So at 1e-5 the default
      8-step bundle is passed by neither; rtol 1e-4 with K <= 8 passes with margins of ~600x
      (loss), 5x (grad norm) and 2.7x (parameters), and a 1e-3 change to one initial weight is
      still caught (~90x). Hence the bundle's fp32 rtol is 1e-4, and `tripod golden` warns when K > 8, where
      the drift outgrows it (the fp64 comparison holds for far longer).
The slack: Adam divides by sqrt(v) + eps, so a gradient error of rtol * max|g| becomes an update
error of up to ~lr * rtol * max|g| / sqrt(v). Where the exact gradient is zero (the attention key
bias: softmax ignores a per-row constant), fp32 rounding noise is normalised to O(1) updates; the
bundle bounds that by 2 * u_max * lr per step (suites/python/gpt2_torch.py adam_drift_bound).

Per tensor the report gives the worst element: the one with the largest error / allowed, so
ok == (max_abs_error <= allowed) holds for the reported pair. Exit status: 0 match, 1 differs,
2 unusable input (the message names the file and field or tensor).
"""
import argparse
import dataclasses
import json
import math
import pathlib
import sys

import numpy as np

from reports import safetensors_np as st
from reports.golden.bundle import (PRECISIONS, BundleError, load_tensors, read_bundle, read_json_object,
                                   tensor_file_problem)
from reports.output_file import write_text_replacing

WHY = {
    "fp64": "double rounding (~1e-16 per operation) over the model's reductions stays near 1e-13; "
            "1e-10 allows any summation order or parallel layout, a real bug errs by >= 1e-4",
    "fp32": "float rounding (6e-8 per operation) gives ~1e-6 gradient errors per step, and Adam lets the "
            "trajectory drift further with every step (measured margins: reports/golden/check.py)",
}


class ResultsError(ValueError):
    """Results that cannot be checked; the message names the file and field or tensor."""


@dataclasses.dataclass
class PeerResults:
    path: pathlib.Path
    framework: str
    precision: str
    losses: np.ndarray      # [K]
    grad_norms: np.ndarray  # [K]
    params: dict            # {step: path}


def _finite_list(path, r, key, K):
    value = r.get(key)
    if not isinstance(value, list) or len(value) != K:
        got = f"{len(value)} entries" if isinstance(value, list) else f"{value!r}"[:40]
        raise ResultsError(f"{path}: field '{key}' has {got}, expected {K} numbers (the bundle's steps)")
    for i, v in enumerate(value):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ResultsError(f"{path}: field '{key}'[{i}] (step {i + 1}) is {v!r}, not a finite number")
    return np.array(value, dtype=np.float64)


def read_results(path, bundle):
    """Reads and validates RESULTS.json against the bundle (tensor values are read in compare)."""
    path = pathlib.Path(path)
    r = read_json_object(path, ResultsError)
    framework = r.get("framework")
    if not isinstance(framework, str) or not framework:
        raise ResultsError(f"{path}: field 'framework' is {framework!r}, expected a name such as 'pytorch 2.4'")
    if r.get("precision") not in PRECISIONS:
        raise ResultsError(f"{path}: field 'precision' is {r.get('precision')!r}, expected 'fp32' or 'fp64'")
    K = bundle.steps
    if r.get("steps") != K:
        raise ResultsError(f"{path}: field 'steps' is {r.get('steps')!r}, the bundle has {K}")
    losses, norms = _finite_list(path, r, "losses", K), _finite_list(path, r, "grad_norms", K)
    params = {}
    entries = r.get("params", {})
    if not isinstance(entries, dict):
        raise ResultsError(f"{path}: field 'params' is not an object of step -> file")
    for step, name in entries.items():
        if not (step.isdigit() and 1 <= int(step) <= K) or not isinstance(name, str):
            raise ResultsError(f"{path}: field 'params' entry {step!r}: {name!r} is not step (1..{K}) -> file")
        file = path.parent / name
        problem = tensor_file_problem(file, bundle.shapes)
        if problem:
            raise ResultsError(f"{file}: {problem} (RESULTS.json params[{step!r}])")
        params[int(step)] = file
    return PeerResults(path, framework, r["precision"], losses, norms, params)


def relative_error(got, want):
    if want == 0:
        return 0.0 if got == 0 else math.inf
    return abs(got / want - 1.0)


def compare_steps(bundle, peer, rtol):
    ref = bundle.references["fp64"]
    rows = []
    for k in range(bundle.steps):
        loss_err = relative_error(peer.losses[k], ref.losses[k])
        norm_err = relative_error(peer.grad_norms[k], ref.grad_norms[k])
        rows.append({"step": k + 1, "loss": float(peer.losses[k]), "ref_loss": float(ref.losses[k]),
                     "loss_rel_error": loss_err, "grad_norm": float(peer.grad_norms[k]),
                     "ref_grad_norm": float(ref.grad_norms[k]), "grad_norm_rel_error": norm_err,
                     "ok": bool(loss_err <= rtol and norm_err <= rtol)})
    return rows


def compare_tensor(got, want, slack, rtol):
    """(error, allowed, index) at the worst element (largest error / allowed) and ok."""
    got, want = got.astype(np.float64), want.astype(np.float64)
    err = np.abs(got - want)
    allowed = rtol * float(np.abs(want).max(initial=0.0)) + slack.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(allowed > 0, err / allowed, np.where(err > 0, np.inf, 0.0))
    i = np.unravel_index(int(np.argmax(ratio)), ratio.shape) if ratio.size else ()
    ok = bool((err <= allowed).all())
    return float(err[i]) if err.size else 0.0, float(allowed[i]) if err.size else 0.0, tuple(int(j) for j in i), ok


def compare_params(bundle, peer, rtol):
    """One row per (step, tensor) for the steps both recorded, in HF order."""
    rows = []
    ref, slack_of = bundle.references["fp64"], bundle.references[peer.precision]
    for step in sorted(set(ref.params) & set(peer.params)):
        want, slack = load_tensors(ref.params[step]), load_tensors(slack_of.slack[step])
        try:
            got = st.load(peer.params[step])[0]
        except (OSError, st.SafetensorsError) as e:
            raise ResultsError(f"{peer.params[step]}: unreadable ({e})") from e
        for name in bundle.shapes:
            if not np.isfinite(got[name]).all():
                raise ResultsError(f"{peer.params[step]}: tensor '{name}' holds NaN or infinite values")
            error, allowed, index, ok = compare_tensor(got[name], want[name], slack[name], rtol)
            rows.append({"step": step, "name": name, "max_abs_error": error, "allowed": allowed,
                         "ok": ok, "index": index})
    return rows


def verdict_line(peer, steps, tensors, rtol, checked_steps):
    bad_steps = [s for s in steps if not s["ok"]]
    bad_tensors = [t for t in tensors if not t["ok"]]
    if not bad_steps and not bad_tensors:
        worst_loss = max(s["loss_rel_error"] for s in steps)
        worst_ratio = max((t["max_abs_error"] / t["allowed"] if t["allowed"] else 0.0 for t in tensors), default=None)
        covered = (f"{len(tensors)} tensor checks after steps {checked_steps} (worst at "
                   f"{worst_ratio:.2g} of its allowance)" if tensors else "no parameters (results list none)")
        return (f"golden check: MATCH: {peer.framework} ({peer.precision}) agrees with the fp64 reference over "
                f"{len(steps)} steps (worst loss relative error {worst_loss:.2g}, rtol {rtol:g}) and {covered}")
    first = min([s["step"] for s in bad_steps] + [t["step"] for t in bad_tensors])
    what = []
    for s in bad_steps:
        if s["step"] == first:
            for key, label in (("loss_rel_error", "loss"), ("grad_norm_rel_error", "grad norm")):
                if not s[key] <= rtol:
                    what.append(f"{label} (relative error {s[key]:.3g} > rtol {rtol:g})")
    tensor = next((t for t in bad_tensors if t["step"] == first), None)
    if tensor:
        what.append(f"tensor {tensor['name']} (error {tensor['max_abs_error']:.3g} > allowed {tensor['allowed']:.3g} "
                    f"at {list(tensor['index'])})")
    return (f"golden check: DIFFERS: first at step {first}, {' and '.join(what)}; {len(bad_steps)} of {len(steps)} "
            f"steps and {len(bad_tensors)} of {len(tensors)} tensor checks fail")


def print_report(bundle, peer, steps, tensors, rtol):
    print(f"golden check: {peer.path} ({peer.framework}, {peer.precision}) against {bundle.dir} (fp64 reference)")
    print(f"tolerance: rtol {rtol:g} for a {peer.precision} peer (bundle.json tolerances): {WHY[peer.precision]}")
    print(f"  per step: |x/ref - 1| <= rtol for the loss and the pre-clip grad norm; per tensor: "
          f"|p - ref| <= rtol * max|ref| + slack-{peer.precision}-step<s> (AdamW drift allowance)")
    print(f"{'step':>4}  {'loss':>18}  {'ref loss':>18}  {'rel error':>9}  {'grad norm rel':>13}  ok")
    for s in steps:
        print(f"{s['step']:>4}  {s['loss']:>18.12g}  {s['ref_loss']:>18.12g}  {s['loss_rel_error']:>9.2e}  "
              f"{s['grad_norm_rel_error']:>13.2e}  {'ok' if s['ok'] else 'DIFFERS'}")
    if tensors:
        print(f"{'step':>4}  {'tensor':<26}  {'worst error':>13}  {'allowed':>9}  {'worst index':<14}  ok")
        for t in tensors:
            print(f"{t['step']:>4}  {t['name']:<26}  {t['max_abs_error']:>13.3e}  {t['allowed']:>9.3e}  "
                  f"{str(list(t['index'])):<14}  {'ok' if t['ok'] else 'DIFFERS'}")
    ignored = sorted(set(peer.params) - set(bundle.param_steps))
    if ignored:
        print(f"note: parameters after steps {ignored} are not checked (the bundle records steps {bundle.param_steps})")
    ref32, ref64 = bundle.references["fp32"], bundle.references["fp64"]
    scale = max(relative_error(a, b) for a, b in zip(ref32.losses, ref64.losses))
    mine = max(s["loss_rel_error"] for s in steps)
    print(f"scale: Tripod's own fp32 run is within {scale:.2g} of its fp64 run (worst loss relative error over "
          f"{bundle.steps} steps); this peer's worst is {mine:.2g}")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m reports.golden.check", description=__doc__.split("\n")[0])
    parser.add_argument("bundle", help="a golden bundle directory")
    parser.add_argument("results", help="the peer's RESULTS.json (reports/FORMATS.md section 2)")
    parser.add_argument("--json", dest="json_out", help="also write the verdict as JSON here")
    args = parser.parse_args(argv)
    try:
        bundle = read_bundle(args.bundle)
    except BundleError as e:
        print(f"golden check: bad bundle: {e}", file=sys.stderr)
        return 2
    try:
        peer = read_results(args.results, bundle)
        rtol = bundle.rtol[peer.precision]
        steps = compare_steps(bundle, peer, rtol)
        tensors = compare_params(bundle, peer, rtol)
    except ResultsError as e:
        print(f"golden check: bad results: {e}", file=sys.stderr)
        return 2
    except BundleError as e:
        print(f"golden check: bad bundle: {e}", file=sys.stderr)
        return 2
    print_report(bundle, peer, steps, tensors, rtol)
    checked = sorted(set(bundle.param_steps) & set(peer.params))
    print(verdict_line(peer, steps, tensors, rtol, checked))
    match = all(s["ok"] for s in steps) and all(t["ok"] for t in tensors)
    if args.json_out:
        verdict = {"bundle": str(args.bundle), "results": str(args.results), "framework": peer.framework,
                   "precision": peer.precision, "rtol": rtol, "verdict": "match" if match else "differs",
                   "steps": steps, "tensors": [{k: t[k] for k in ("step", "name", "max_abs_error", "allowed", "ok")}
                                               for t in tensors]}
        out = pathlib.Path(args.json_out)
        out.parent.mkdir(parents=True, exist_ok=True)
        # Infinite relative errors (a zero reference) are written as null, keeping the JSON standard.
        write_text_replacing(out, json.dumps(_finite_or_null(verdict), indent=1) + "\n")
    return 0 if match else 1


def _finite_or_null(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite_or_null(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite_or_null(v) for v in value]
    return value


if __name__ == "__main__":
    sys.exit(main())
