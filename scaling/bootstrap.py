"""Percentile-bootstrap confidence intervals: resample runs with replacement and refit.

Approach 1, Approach 2 and the frontier resample within each budget, so every budget keeps its number of
points and still has a parabola; Approach 3 resamples the whole set of runs. Refits of
Approach 3 start from the full-data optimum plus the best few screened grid starts of the
resample: rerunning the whole multi-start search per replicate would cost ~10x as much and
the full-data optimum is, by construction, close to every replicate's optimum.
"""

import numpy as np

from scaling.approach1 import compute_grid, curve_matrix, fit_approach1
from scaling.fitlib import fit_approach2, fit_approach3, fit_frontier

APPROACH3_KEYS = ("E", "A", "B", "alpha", "beta", "a", "b")
APPROACH1_KEYS = ("approach1_a", "approach1_b")
APPROACH2_KEYS = ("approach2_a", "approach2_b")
FRONTIER_KEYS = ("frontier_L_inf", "frontier_k", "frontier_gamma")
CI_PERCENTILES = (2.5, 97.5)
# Below this share of replicates fitted, the percentiles describe which resamples could be fitted
# more than the noise (Approach 2 with three sizes a budget: 3 of 100 fitted, each the original
# parabola, and an interval of zero width that "excluded" Kaplan's exponent).
MIN_FITTED_SHARE = 0.5


def resample_within_budgets(sweep, rng):
    return np.concatenate([rng.choice(idx, size=len(idx), replace=True)
                           for _, idx, _ in sweep.budgets()])


def _approach3_values(fit):
    law = fit.law
    return {"E": law.E, "A": law.A, "B": law.B, "alpha": law.alpha, "beta": law.beta,
            "a": law.a, "b": law.b}


def _approach2_and_frontier_values(sweep):
    approach2, frontier = fit_approach2(sweep), fit_frontier(sweep)
    return {"approach2_a": approach2["a"], "approach2_b": approach2["b"],
            "frontier_L_inf": frontier["L_inf"], "frontier_k": frontier["k"],
            "frontier_gamma": frontier["gamma"]}


def bootstrap(sweep, point_fit, n_resamples, seed=0, grid=None, starts_per_refit=2):
    """{"ci": {key: [lo, hi] or None}, "n_ok": {key: count}, "samples": {key: [values]},
    "approach3_laws": [[E, A, B, alpha, beta] per replicate], "frontier_fits": [[L_inf, k, gamma]]}.

    `point_fit` is the full-data ParametricFit (its theta seeds every Approach-3 refit).
    A replicate whose fit is undetermined (e.g. too few interior minima) is left out of that
    parameter's interval, and n_ok says how many remained.
    """
    rng = np.random.default_rng(seed)
    samples = {key: [] for key in APPROACH3_KEYS + APPROACH2_KEYS + FRONTIER_KEYS + APPROACH1_KEYS}
    # Approach 1's curves are interpolated once; a replicate takes their rows.
    has_curves = any(c is not None for c in sweep.curves)
    compute_values = compute_grid(sweep, 1500) if has_curves else None
    matrix = curve_matrix(sweep, compute_values) if has_curves else None
    laws, frontiers = [], []  # whole replicates, for what is derived from several parameters at once
    for _ in range(n_resamples):
        picked = resample_within_budgets(sweep, rng)
        within = sweep.take(picked)
        values = _approach2_and_frontier_values(within)
        if has_curves:
            approach1 = fit_approach1(within, matrix=matrix[picked], grid=compute_values)
            values.update(approach1_a=approach1["a"], approach1_b=approach1["b"])
        for key, value in values.items():
            if value is not None and np.isfinite(value):
                samples[key].append(value)
        triple = [values[key] for key in FRONTIER_KEYS]
        if all(v is not None and np.isfinite(v) for v in triple):
            frontiers.append([float(v) for v in triple])
        whole = sweep.take(rng.integers(0, len(sweep), size=len(sweep)))
        refit = fit_approach3(whole, grid=grid, extra_starts=[point_fit.theta],
                              max_starts=starts_per_refit)
        law = refit.law
        if not law.alpha + law.beta > 0:  # no dependence on N or D in this resample: a, b undefined
            continue
        for key, value in _approach3_values(refit).items():
            samples[key].append(value)
        laws.append([law.E, law.A, law.B, law.alpha, law.beta])
    ci, notes = {}, {}
    for key, vals in samples.items():
        ci[key] = [float(v) for v in np.percentile(vals, CI_PERCENTILES)] if vals else None
        if vals and len(vals) < MIN_FITTED_SHARE * n_resamples:
            ci[key] = None
            notes[key] = (f"no interval: only {len(vals)} of {n_resamples} resamples could be fitted, so their "
                          f"spread says which resamples fitted, not how uncertain the estimate is")
        elif vals and len(vals) > 1 and ci[key][0] == ci[key][1]:
            ci[key] = None
            notes[key] = ("no interval: every resample gave the same value (the fit at a bound of its range "
                          "in each, or budgets alike in every resample within budgets, such as one run each)")
    return {"ci": ci, "ci_notes": notes, "n_ok": {key: len(vals) for key, vals in samples.items()},
            "samples": samples, "approach3_laws": laws, "frontier_fits": frontiers}
