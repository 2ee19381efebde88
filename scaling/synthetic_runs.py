#!/usr/bin/python3
"""Synthetic IsoFLOP sweep from a known L(N, D): the ground truth for testing the fits.

For each budget C, model sizes are log-spaced around a centre N_c, D = C / (6 N), and
loss = L(N, D) * exp(noise * z), z ~ N(0, 1) (multiplicative log-normal noise).

The centre is by default what an experimenter without the answer would pick, Chinchilla's
20 tokens per parameter (N_c = sqrt(C/120)); `--center law` centres on the law's own optimum.
It matters for Approach 2: the IsoFLOP profile of this law is not a parabola, so a fitted vertex
is offset from the true optimum by an amount that depends on where the optimum sits in the
sampled window. With `law` centring that offset is the same at every budget and the fitted
exponents are exact; with the rule of thumb it drifts with C and biases them slightly.

    /usr/bin/python3 -m scaling.synthetic_runs --out runs.jsonl --law chinchilla --noise 0.01
"""

import argparse
import json
import sys

import numpy as np

from scaling.laws import FLOPS_PER_PARAM_TOKEN, LAWS_BY_NAME, chinchilla_rule_N

# The IsoFLOP budgets of Hoffmann et al. 2022, figure 3.
CHINCHILLA_BUDGETS = (6e18, 1e19, 3e19, 6e19, 1e20, 3e20, 6e20, 1e21, 3e21)


def isoflop_design(budgets, sizes_per_budget, span, center_N):
    """[(C, N)]: `sizes_per_budget` sizes log-spaced over [N_c/span, N_c*span] per budget."""
    design = []
    for C in budgets:
        n_c = float(center_N(C))
        for N in np.geomspace(n_c / span, n_c * span, sizes_per_budget):
            design.append((float(C), float(N)))
    return design


def synthetic_records(law, budgets=CHINCHILLA_BUDGETS, sizes_per_budget=9, span=8.0,
                      noise=0.0, seed=0, center="rule", curve_points=0, curve_span=100.0):
    """JSON-ready run records for `law` (a ParametricLaw) on an IsoFLOP design.

    curve_points > 0 adds each run's training curve (what Approach 1 reads): the law's loss at
    `curve_points` token counts log-spaced from D/curve_span to D (with the same noise model). On
    a real run the loss part-way through is above the law's (the learning rate has not decayed
    yet); here it is the law's, so Approach 1's envelope is the law's own optimum."""
    center_N = law.optimal_N if center == "law" else chinchilla_rule_N
    rng = np.random.default_rng(seed)
    records = []
    for C, N in isoflop_design(budgets, sizes_per_budget, span, center_N):
        D = C / (FLOPS_PER_PARAM_TOKEN * N)
        loss = float(law.loss(N, D)) * float(np.exp(noise * rng.standard_normal()))
        record = {"name": f"C{C:.1e}_N{N:.3e}", "N": N, "D": D, "C": C,
                  "budget": f"{C:.1e}", "loss": loss, "status": "ok"}
        if curve_points > 0:
            tokens = np.geomspace(D / curve_span, D, curve_points)
            noisy = law.loss(N, tokens) * np.exp(noise * rng.standard_normal(curve_points))
            record["curve"] = {"tokens": tokens.tolist(), "loss": noisy.tolist()}
        records.append(record)
    return records


def write_jsonl(records, path):
    with open(path, "w") as f:
        for record in records:
            f.write(json.dumps(record) + "\n")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="JSONL file to write")
    parser.add_argument("--law", choices=sorted(LAWS_BY_NAME), default="chinchilla")
    parser.add_argument("--noise", type=float, default=0.0,
                        help="sigma of the multiplicative log-normal noise on the loss")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--budgets", type=float, nargs="+", default=list(CHINCHILLA_BUDGETS),
                        help="IsoFLOP budgets in FLOPs")
    parser.add_argument("--sizes-per-budget", type=int, default=9)
    parser.add_argument("--span", type=float, default=8.0,
                        help="sizes cover [N_c/span, N_c*span] around the centre N_c")
    parser.add_argument("--center", choices=["rule", "law"], default="rule",
                        help="centre sizes on 20 tokens/param (rule) or on the law's optimum")
    args = parser.parse_args(argv)
    records = synthetic_records(LAWS_BY_NAME[args.law], args.budgets, args.sizes_per_budget,
                                args.span, args.noise, args.seed, args.center)
    write_jsonl(records, args.out)
    print(f"wrote {len(records)} runs to {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
