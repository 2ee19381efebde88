#!/usr/bin/python3
"""Tests of scaling/: the fits recover the laws that generated synthetic sweeps.

Run: /usr/bin/python3 -m pytest -q suites/python/test_scaling_fit.py   (~20 s on 2 cores)
"""

import io
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from scaling.bootstrap import bootstrap
from scaling.fitlib import (fit_approach2, fit_approach3, fit_frontier,
                            isoflop_minima)
from scaling.laws import CHINCHILLA, EPOCH_2024
from scaling.runs import parse_records
from scaling.synthetic_runs import synthetic_records, write_jsonl

FIT = ["-m", "scaling.fit"]  # the package runs as a module from the source tree (PYTHONPATH or cwd)
EXPONENTS = ("alpha", "beta", "a", "b")


def sweep_of(records):
    sweep, _ = parse_records([json.dumps(r) for r in records], warn_stream=io.StringIO())
    return sweep


def relative_error(fitted, true):
    return abs(fitted / true - 1)


@pytest.mark.parametrize("law", [CHINCHILLA, EPOCH_2024], ids=["chinchilla", "epoch2024"])
def test_approach3_recovers_noise_free_law(law):
    """(i), (ii): exact data, so the Huber objective's minimum is the generating law."""
    fit = fit_approach3(sweep_of(synthetic_records(law)))
    assert fit.success, fit.message
    assert fit.grid_size == 5400                  # Hoffmann's full grid, screened
    for key in EXPONENTS + ("E", "A", "B"):
        assert relative_error(getattr(fit.law, key), getattr(law, key)) < 1e-6, key


def test_bootstrap_intervals_cover_the_truth_with_noise():
    """(iii): 1% log-normal noise, 9 budgets x 15 sizes, 30 resamples, fixed seeds.

    A 95% percentile interval misses sometimes by design: over data/bootstrap seeds 0-19 the
    interval for alpha covered 17/20, beta 19/20, a and b 18/20. Seed 1 is a covering draw;
    the test pins determinism and plumbing, the coverage study the calibration.
    """
    law = CHINCHILLA
    sweep = sweep_of(synthetic_records(law, sizes_per_budget=15, noise=0.01, seed=1))
    fit = fit_approach3(sweep)
    intervals = bootstrap(sweep, fit, n_resamples=30, seed=1)["ci"]
    truth = {"alpha": law.alpha, "beta": law.beta, "a": law.a, "b": law.b,
             "approach2_a": law.a, "approach2_b": law.b}
    for key, true_value in truth.items():
        lo, hi = intervals[key]
        assert lo <= true_value <= hi, (key, true_value, lo, hi)
        assert hi - lo < 0.15, (key, lo, hi)     # informative, not vacuous
    for key in EXPONENTS:                        # point estimates: a few percent off at 1% noise
        assert relative_error(getattr(fit.law, key), getattr(law, key)) < 0.1, key


def test_closed_form_compute_optimal_exponents():
    """(iv): a = beta/(alpha+beta) = 0.28/0.62, 'about 0.46' in the issue; a + b = 1."""
    assert CHINCHILLA.a == pytest.approx(0.28 / 0.62, rel=1e-12)
    assert CHINCHILLA.a == pytest.approx(0.4516129, abs=1e-6)
    assert abs(CHINCHILLA.a - 0.46) < 0.01
    assert CHINCHILLA.a + CHINCHILLA.b == pytest.approx(1.0)
    # N_opt and D_opt exhaust the budget: 6 N_opt D_opt = C.
    C = np.array([1e18, 5.76e23])
    assert 6 * CHINCHILLA.optimal_N(C) * CHINCHILLA.optimal_D(C) == pytest.approx(C, rel=1e-12)


@pytest.mark.parametrize("law", [CHINCHILLA, EPOCH_2024], ids=["chinchilla", "epoch2024"])
def test_approach2_noise_free_near_closed_form(law):
    """(v): tolerance 0.005 absolute on a and b.

    The IsoFLOP profile of this law is not a parabola in log N (it is asymmetric when
    alpha != beta), so the fitted vertex sits off the true optimum by an amount that depends on
    where the optimum falls in the sampled window. Centring sizes on the 20-tokens/param rule
    (as an experimenter would) moves that position with C and tilts the fitted line: measured
    bias 0.0012 (Chinchilla) and 0.0002 (Epoch) on this design. Centring on the law's own
    optimum makes the offset the same at every budget, so the exponents come out exact.
    """
    rule_centred = fit_approach2(sweep_of(synthetic_records(law)))
    assert rule_centred["n_budgets_used"] == 9
    assert abs(rule_centred["a"] - law.a) < 5e-3 and abs(rule_centred["b"] - law.b) < 5e-3
    law_centred = fit_approach2(sweep_of(synthetic_records(law, center="law")))
    assert abs(law_centred["a"] - law.a) < 1e-6 and abs(law_centred["b"] - law.b) < 1e-6


def test_frontier_exponent_matches_the_law():
    """On the compute-optimal line L - E falls as C^-(alpha beta/(alpha+beta)) exactly; the
    best sampled run per budget is only near that line, hence the 2% tolerance."""
    frontier = fit_frontier(sweep_of(synthetic_records(CHINCHILLA)))
    assert relative_error(frontier["gamma"], CHINCHILLA.frontier_exponent) < 0.02
    assert relative_error(frontier["L_inf"], CHINCHILLA.E) < 0.02


def test_bad_runs_are_excluded_with_a_named_warning():
    """(vi): NaN / inf / missing loss and status "diverged" never enter a fit silently."""
    good = synthetic_records(CHINCHILLA, budgets=(1e19,), sizes_per_budget=5)
    lines = [json.dumps(r) for r in good] + [
        '{"name": "nan-run", "N": 1e8, "D": 1e10, "C": 6e18, "loss": NaN}',
        '{"name": "blew-up", "N": 1e8, "D": 1e10, "C": 6e18, "loss": 9.1, "status": "diverged"}',
        '{"name": "inf-run", "N": 1e8, "D": 1e10, "C": 6e18, "loss": Infinity}',
        '{"N": 1e8, "D": 1e10, "C": 6e18}']
    stderr = io.StringIO()
    sweep, excluded = parse_records(lines, source="sweep.jsonl", warn_stream=stderr)
    assert len(sweep) == 5
    assert [x["name"] for x in excluded] == ["nan-run", "blew-up", "inf-run", "line 9"]
    warnings = stderr.getvalue()
    for name in ("'nan-run'", "'blew-up'", "'inf-run'", "sweep.jsonl:9"):
        assert name in warnings
    assert "diverged" in warnings and "nan" in warnings


def test_runs_without_budget_are_grouped_by_rounded_compute():
    records = [{"N": N, "D": C / (6 * N), "C": C, "loss": 3.0}
               for C in (1.001e19, 0.998e19, 3.02e19) for N in (1e8, 2e8)]
    sweep = sweep_of(records)
    assert [(label, len(idx)) for label, idx, _ in sweep.budgets()] == [("1.0e+19", 4),
                                                                       ("3.0e+19", 2)]


def test_minimum_outside_sampled_sizes_is_flagged():
    """(viii): a budget sampled only below its optimum has an extrapolated vertex."""
    records = synthetic_records(CHINCHILLA, center="law")
    largest_C = max(r["C"] for r in records)
    true_N_opt = float(CHINCHILLA.optimal_N(largest_C))
    records = [r for r in records if r["C"] != largest_C or r["N"] < true_N_opt / 2]
    sweep = sweep_of(records)
    minima = {m["C"]: m for m in isoflop_minima(sweep)}
    assert minima[largest_C]["n_points"] == 3
    assert minima[largest_C]["interior"] is False
    assert minima[largest_C]["N_opt"] > minima[largest_C]["N_max_sampled"]
    assert all(m["interior"] for C, m in minima.items() if C != largest_C)
    assert fit_approach2(sweep)["n_budgets_used"] == len(minima) - 1


def test_cli_end_to_end(tmp_path):
    """(vii): fit.py writes OUT.json with the contract's keys, Markdown and non-empty PNGs."""
    records = synthetic_records(EPOCH_2024, noise=0.01, seed=3)
    records.append({"name": "exploded", "N": 1e9, "D": 1e10, "C": 6e19, "loss": float("nan")})
    runs = tmp_path / "runs.jsonl"
    write_jsonl(records, runs)
    out_json, out_md, plots = tmp_path / "fit.json", tmp_path / "fit.md", tmp_path / "plots"
    done = subprocess.run(
        [sys.executable, *FIT, str(runs), "--json", str(out_json), "--bootstrap", "5",
         "--seed", "0", "--small-grid", "--markdown", str(out_md), "--plots", str(plots)],
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "exploded" in done.stderr
    report = json.loads(out_json.read_text())
    for key in ("E", "A", "B", "alpha", "beta", "a", "b"):
        assert set(report[key]) >= {"value", "ci"} and len(report[key]["ci"]) == 2, key
        assert math.isfinite(report[key]["value"])
    for key in ("approach2", "isoflop_minima", "frontier", "tokens_per_parameter", "optimizer",
                "excluded", "n_runs", "references"):
        assert key in report, key
    assert set(report["approach2"]) >= {"a", "b", "minima"}
    assert set(report["isoflop_minima"][0]) >= {"C", "N_opt", "D_opt", "loss_min", "interior",
                                                "n_points"}
    assert report["n_runs"] == len(records) - 1
    assert report["excluded"][0]["name"] == "exploded"
    assert report["references"]["chinchilla"]["a"] == pytest.approx(0.28 / 0.62)
    assert report["references"]["epoch2024"]["B"] == 2085.4
    assert report["references"]["kaplan"]["a"] == 0.73
    assert set(report["optimizer"]) >= {"success", "message", "iterations", "objective",
                                        "grid_size"}
    assert "| alpha |" in out_md.read_text()
    pngs = sorted(p.name for p in plots.iterdir())
    assert pngs == ["approach3_residuals.png", "isoflop_curves.png", "loss_vs_compute.png",
                    "optimal_allocation.png"]
    for name in pngs:
        assert (plots / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert (plots / name).stat().st_size > 10_000
