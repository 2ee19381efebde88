#!/usr/bin/python3
"""When to stop scaling: the loss a doubling of compute still buys, from a fitted law.

    /usr/bin/python3 -m scaling.advise FIT --threshold 0.01 [--from approach3|frontier] [--budgets LO:HI]
        [--json OUT]

FIT is a fit.json of `scaling.fit` (or the sweep directory holding it), or a published law
(`chinchilla`, `epoch`). Along the compute-optimal frontier the loss is L*(C) = E + K C^-gamma:
  approach3  from L(N, D) = E + A/N^alpha + B/D^beta with N_opt, D_opt of C = 6ND:
             gamma = alpha beta / (alpha + beta), K = (A G^-alpha + B G^beta) 6^gamma (laws.py);
  frontier   the fitted L_inf + k C^-gamma through the best run of each budget.
A doubling of compute from C gains  dL(C) = L*(C) - L*(2C) = K C^-gamma (1 - 2^-gamma),  which
falls below a threshold t at  C_stop = (K (1 - 2^-gamma) / t)^(1/gamma).  The same is computed for
every bootstrap replicate of the fit, so each figure comes with its 95% interval.
The table shows the powers of ten from LO to HI (positive FLOP counts, LO <= HI). A FIT, a range or
an OUT that cannot be used ends the command with one line naming it (exit status 1); a damaged FIT
also names the key at fault.
"""

import argparse
import json
import math
import os
import reprlib
import sys

import numpy as np

from reports.output_file import write_text_replacing
from scaling.bootstrap import CI_PERCENTILES
from scaling.fitlib import MIN_GAMMA, PARAMETER_BOUNDS
from scaling.laws import FLOPS_PER_PARAM_TOKEN, LAWS_BY_NAME, ParametricLaw

# The bootstrap's whole replicates in a fit.json (scaling/report.py) and what each one lists.
REPLICATE_FIELDS = {"approach3_laws": ("E", "A", "B", "alpha", "beta"), "frontier_fits": ("L_inf", "k", "gamma")}


def frontier_of_law(law):
    """(K, gamma) of the compute-optimal loss E + K C^-gamma of a parametric law."""
    if law.beta == 0:
        # A bound a fit can reach, where G would divide by zero: B/D^0 = B whatever D, so all compute goes
        # to N and L* = E + B (E + A + B when alpha = 0 too) is flat: more compute gains nothing.
        return law.B + (law.A if law.alpha == 0 else 0.0), 0.0
    gamma = law.frontier_exponent
    G = law.G
    K = (law.A * G ** -law.alpha + law.B * G ** law.beta) * FLOPS_PER_PARAM_TOKEN ** gamma
    return K, gamma


def gain_per_doubling(K, gamma, C):
    return K * np.asarray(C, float) ** -gamma * (1.0 - 2.0 ** -gamma)


def stop_budget(K, gamma, threshold):
    """The compute at which a doubling gains less than `threshold` (None if the law never gains);
    math.inf past the largest float (a tiny threshold overflowed: OverflowError, a traceback)."""
    if not (K > 0 and gamma > 0):
        return None
    log_c = (math.log(K * (1.0 - 2.0 ** -gamma)) - math.log(threshold)) / gamma
    return math.exp(log_c) if log_c < math.log(sys.float_info.max) else math.inf


def _interval(values):
    values = [v for v in values if v is not None and np.isfinite(v)]
    return [float(v) for v in np.percentile(values, CI_PERCENTILES)] if len(values) >= 2 else None


def load_frontiers(fit, source):
    """[(K, gamma)] of the point estimate, then of every bootstrap replicate, and a description."""
    if fit in LAWS_BY_NAME:
        return [frontier_of_law(LAWS_BY_NAME[fit])], f"the published {fit} law"
    path = os.path.join(fit, "fit.json") if os.path.isdir(fit) else fit
    if not os.path.exists(path):
        raise SystemExit(f"scale advise: {fit} is neither a fit.json, a sweep directory holding one, "
                         f"nor a published law ({', '.join(LAWS_BY_NAME)})")
    report = _read_fit(path)
    boot = report.get("bootstrap") or {}
    if source == "approach3":
        point = _law([_fitted_value(report, path, k) for k in REPLICATE_FIELDS["approach3_laws"]], path)
        replicates = [_law(theta, path, f"bootstrap.approach3_laws[{i}]")
                      for i, theta in enumerate(boot.get("approach3_laws") or [])]
        return [frontier_of_law(law) for law in [point] + replicates], f"Approach 3 of {path}"
    frontier = report.get("frontier")
    if not isinstance(frontier, dict):
        raise SystemExit(f"scale advise: {path} has no 'frontier' (not a fit.json of `tripod scale fit`?)")
    if not isinstance(frontier.get("gamma"), dict) or frontier["gamma"].get("value") is None:
        raise SystemExit(f"scale advise: {path} has no frontier fit ({frontier.get('note')})")
    fits = [(_fitted_value(frontier, path, "k", "frontier."), _fitted_value(frontier, path, "gamma", "frontier."))]
    fits += [(k, gamma) for _, k, gamma in boot.get("frontier_fits") or []]
    # The fit searches gamma from MIN_GAMMA up and k is at least 0: a negative one printed
    # negative "gains" with exit 0.
    for i, (k, gamma) in enumerate(fits):
        key = "frontier" if i == 0 else f"bootstrap.frontier_fits[{i - 1}]"
        if gamma < MIN_GAMMA or k < 0:
            raise SystemExit(f"scale advise: {path}: '{key}' has k {k:g} and gamma {gamma:g}, which no fit writes "
                             f"(k >= 0, gamma >= {MIN_GAMMA:g})")
    return fits, f"the frontier fit of {path}"


def _read_fit(path):
    """fit.json as a dict; a file that is not one ends the command with its name, not a traceback."""
    try:
        with open(path) as f:
            report = json.load(f)
    except (OSError, ValueError) as e:
        raise SystemExit(f"scale advise: {path}: not readable JSON ({e})")
    if not isinstance(report, dict):
        raise SystemExit(f"scale advise: {path}: not a fit.json of `tripod scale fit` (not a JSON object)")
    _check_replicates(report, path)
    return report


def _check_replicates(report, path):
    """Each bootstrap replicate a list of finite numbers as long as REPLICATE_FIELDS says, so that a
    damaged file ends the command naming the key, not in a traceback. A fit without a bootstrap (or
    from before the replicates were kept) has none: no interval, as before."""
    boot = report.get("bootstrap")
    if boot is None:
        return
    if not isinstance(boot, dict):
        raise SystemExit(f"scale advise: {path}: 'bootstrap' is not a JSON object (got {reprlib.repr(boot)})")
    for key, fields in REPLICATE_FIELDS.items():
        rows = boot.get(key)
        if rows is not None and not isinstance(rows, list):
            raise SystemExit(f"scale advise: {path}: 'bootstrap.{key}' is not a list of replicates "
                             f"(got {reprlib.repr(rows)})")
        for i, row in enumerate(rows or []):
            if not (isinstance(row, list) and len(row) == len(fields) and all(map(_is_finite_number, row))):
                raise SystemExit(f"scale advise: {path}: 'bootstrap.{key}[{i}]' is not {len(fields)} finite numbers "
                                 f"[{', '.join(fields)}] (got {reprlib.repr(row)})")


def _is_finite_number(value):
    # JSON true is a Python int, and a fit writes NaN and inf as null: neither is in a sound file.
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _law(theta, path, replicate=None):
    """ParametricLaw(E, A, B, alpha, beta), if a fit could have written it: A, B = exp(.) > 0 and
    alpha, beta within their bounds [0, 5] are what keep its frontier real (G is a root of a ratio)."""
    law = ParametricLaw(*theta)
    # The fit's bounds (scaling/fitlib.py): A = exp(a), B = exp(b) for a, b in [-20, 60]; alpha and
    # beta in [0, 5]. Past them a damaged file gave gains of inf and "C = inf FLOPs", exit 0.
    (_, (a_low, a_high), (b_low, b_high), (alpha_low, alpha_high), (beta_low, beta_high)) = PARAMETER_BOUNDS
    limits = {"A": (math.exp(a_low), math.exp(a_high)), "B": (math.exp(b_low), math.exp(b_high)),
              "alpha": (alpha_low, alpha_high), "beta": (beta_low, beta_high)}
    for name, (low, high) in limits.items():
        value = getattr(law, name)
        if not low <= value <= high:
            key = f"'{name}'" if replicate is None else f"{name} of '{replicate}'"
            raise SystemExit(f"scale advise: {path}: {key} is {value:g}, which no fit writes "
                             f"(A and B in [e^{a_low}, e^{a_high}], alpha and beta in [{alpha_low}, {alpha_high}])")
    return law


def _fitted_value(report, path, key, prefix=""):
    """report[key]["value"] as a number; names the file and the key when the fit does not hold it."""
    if key not in report:
        raise SystemExit(f"scale advise: {path} has no '{prefix}{key}' (not a fit.json of `tripod scale fit`?)")
    entry = report[key]
    value = entry.get("value") if isinstance(entry, dict) else None
    if not _is_finite_number(value):
        raise SystemExit(f"scale advise: {path}: '{prefix}{key}' has no number as its value (got {entry!r})")
    return value


def parse_budgets(text):
    """--budgets LO:HI as (LO, HI): positive, finite FLOP counts with LO <= HI."""
    try:
        lo, hi = map(float, text.split(":"))
    except ValueError:  # not two parts, or a part that is not a number
        raise SystemExit(f"scale advise: --budgets {text}: expected LO:HI in FLOPs, e.g. 1e15:1e27") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and lo > 0 and hi > 0):
        raise SystemExit(f"scale advise: --budgets {text}: LO and HI must be positive, finite FLOP counts")
    if lo > hi:
        raise SystemExit(f"scale advise: --budgets {text}: LO is above HI (an empty range)")
    return lo, hi


def budgets_between(lo, hi):
    """The powers of ten from LO's decade up to HI's."""
    return [10.0 ** k for k in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)]


def _json_safe(value):
    """Non-finite floats as null, as every JSON output of Tripod writes them (Python's json wrote
    Infinity, which is not JSON)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def write_advice(result, path):
    try:
        write_text_replacing(path, json.dumps(_json_safe(result), indent=2, allow_nan=False) + "\n")
    except OSError as e:
        raise SystemExit(f"scale advise: cannot write --json {path}: {e.strerror or e}")


def advise(frontiers, threshold, budgets):
    (K, gamma), replicates = frontiers[0], frontiers[1:]
    rows = []
    for C in budgets:
        rows.append({"C": C, "gain_per_doubling": float(gain_per_doubling(K, gamma, C)),
                     "ci": _interval([float(gain_per_doubling(k, g, C)) for k, g in replicates]),
                     "below_threshold": bool(gain_per_doubling(K, gamma, C) < threshold)})
    return {"threshold": threshold, "K": K, "gamma": gamma, "rows": rows,
            "stop_budget": stop_budget(K, gamma, threshold),
            "stop_budget_ci": _interval([stop_budget(k, g, threshold) for k, g in replicates]),
            "n_replicates": len(replicates)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("fit", help="fit.json, a sweep directory, or a published law (chinchilla, epoch)")
    parser.add_argument("--threshold", type=float, required=True, help="loss gain per doubling worth paying for")
    parser.add_argument("--from", dest="source", choices=("approach3", "frontier"), default="approach3")
    parser.add_argument("--budgets", default="1e15:1e27", help="range of compute budgets shown, LO:HI (powers of 10)")
    parser.add_argument("--json", help="also write the advice here")
    args = parser.parse_args(argv)  # tripod passes --budgets=LO:HI, which argparse reads even as "-1:5"
    if not args.threshold > 0:
        raise SystemExit(f"scale advise: --threshold must be positive (got {args.threshold})")
    budgets = budgets_between(*parse_budgets(args.budgets))
    frontiers, described = load_frontiers(args.fit, args.source)
    result = advise(frontiers, args.threshold, budgets)
    result["source"] = described
    print(f"loss gained per doubling of compute, from {described}: L*(C) = E + {result['K']:.4g} C^-{result['gamma']:.4g}")
    print(f"{'C (FLOPs)':>12} {'gain':>10}  95% interval")
    for row in result["rows"]:
        ci = row["ci"]
        print(f"{row['C']:12.3g} {row['gain_per_doubling']:10.4g}  "
              + (f"[{ci[0]:.4g}, {ci[1]:.4g}]" if ci else "(no bootstrap)")
              + ("  < threshold" if row["below_threshold"] else ""))
    stop, ci = result["stop_budget"], result["stop_budget_ci"]
    if stop is None:
        print("the fitted law gains nothing from more compute (gamma or K not positive)")
    elif stop == math.inf:
        print(f"a doubling gains at least {args.threshold:g} up to the largest budget a float holds (1.8e308 FLOPs)")
    elif stop < 1:
        print(f"a doubling gains less than {args.threshold:g} at every budget (at 1 FLOP it gains "
              f"{float(gain_per_doubling(result['K'], result['gamma'], 1.0)):.3g})")
    else:
        print(f"a doubling gains less than {args.threshold:g} from C = {stop:.3g} FLOPs"
              + (f" (95% interval [{ci[0]:.3g}, {ci[1]:.3g}], {result['n_replicates']} replicates)" if ci else
                 " (no bootstrap replicates: no interval)"))
    if args.json:
        write_advice(result, args.json)


if __name__ == "__main__":
    main()
