#!/usr/bin/python3
"""Fit a scaling-law sweep: Approaches 1, 2 and 3, the compute frontier, bootstrap CIs.

    /usr/bin/python3 -m scaling.fit RUNS.jsonl --json OUT.json [--bootstrap 200] [--seed 0]
        [--markdown OUT.md] [--plots DIR] [--loss-key loss] [--small-grid]

RUNS.jsonl: one run per line with N (parameters), D (tokens), C (FLOPs) and the loss; optional
`budget` (IsoFLOP label; otherwise runs are grouped by C to 2 significant digits), `name`,
`status`, and `curve` ({"tokens": [...], "loss": [...]}: the training curve, for Approach 1;
`tripod scale run` writes it). Runs with a NaN/inf/missing loss or status "diverged" are excluded, each with a
warning on stderr, and listed under `excluded` in OUT.json; a RUNS.jsonl that cannot be read or
leaves no run to fit ends the command with one line naming it (exit status 1).
"""

import argparse
import sys
import time

from reports.output_file import write_text_replacing
from scaling.approach1 import fit_approach1
from scaling.bootstrap import bootstrap
from scaling.fitlib import SMALL_INIT_GRID, fit_approach2, fit_approach3, fit_frontier
from scaling.report import build_report, render_markdown, write_json
from scaling.runs import load_runs

APPROACH3_N_PARAMETERS = 5   # E, A, B, alpha, beta


def analyse(sweep, excluded, n_records, n_bootstrap=200, seed=0, grid=None):
    """All fits of one sweep, as the OUT.json dict."""
    fit3 = fit_approach3(sweep, grid=grid)
    if not fit3.law.alpha + fit3.law.beta > 0:
        raise SystemExit("scale fit: the losses show no dependence on N or D (Approach 3 found alpha = beta = 0): "
                         "no scaling law to fit; were the runs trained at all (losses near ln V)?")
    approach1, approach2, frontier = fit_approach1(sweep), fit_approach2(sweep), fit_frontier(sweep)
    boot = bootstrap(sweep, fit3, n_bootstrap, seed=seed, grid=grid) if n_bootstrap > 0 else None
    settings = {"n_resamples": n_bootstrap, "seed": seed,
                "scheme": "runs resampled within each budget for Approach 2 and the frontier, "
                          "over all runs for Approach 3"}
    return build_report(sweep, excluded, n_records, fit3, approach2, frontier, boot, settings, approach1)


def load_runs_or_exit(path, loss_key):
    """The sweep, or the command's end with one line naming the file (`tripod scale fit` adds its own)."""
    try:
        return load_runs(path, loss_key)
    except OSError as e:
        raise SystemExit(f"scale fit: {path}: {e.strerror or e}") from None
    except ValueError as e:  # nothing left to fit; each exclusion was announced above
        raise SystemExit(f"scale fit: {e}") from None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", help="sweep JSONL, one run per line")
    parser.add_argument("--json", required=True, help="where to write the results (JSON)")
    parser.add_argument("--bootstrap", type=int, default=200, help="resamples for the CIs (0: none)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the bootstrap resampling")
    parser.add_argument("--markdown", help="also write a Markdown results table here")
    parser.add_argument("--plots", help="also write PNG figures into this folder")
    parser.add_argument("--loss-key", default="loss", help="record field holding the loss")
    parser.add_argument("--small-grid", action="store_true",
                        help="screen 72 Approach-3 starts instead of Hoffmann's 5400 (quick checks)")
    args = parser.parse_args(argv)

    started = time.time()
    sweep, excluded = load_runs_or_exit(args.runs, args.loss_key)
    n_records = len(sweep) + len(excluded)
    report = analyse(sweep, excluded, n_records, args.bootstrap, args.seed,
                     SMALL_INIT_GRID if args.small_grid else None)
    for part, note in (("Approach 2", report["approach2"].get("note")),
                       ("frontier", report["frontier"].get("note"))):
        if note and "fewer than" in note:
            print(f"warning: {part}: {note}", file=sys.stderr)
    for flag in report["frontier"].get("flags") or []:
        print(f"warning: frontier: {flag}", file=sys.stderr)
    for key, note in (report["bootstrap"].get("ci_notes") or {}).items():
        print(f"warning: {key}: {note}", file=sys.stderr)
    if len(sweep) < 3 * APPROACH3_N_PARAMETERS:
        print(f"warning: Approach 3: {len(sweep)} runs for {APPROACH3_N_PARAMETERS} parameters; "
              f"E, A, B, alpha, beta are poorly determined", file=sys.stderr)
    write_json(report, args.json)
    if args.markdown:
        write_text_replacing(args.markdown, render_markdown(report))
    if args.plots:
        from scaling.plots import write_all_plots  # matplotlib only when figures are asked for
        write_all_plots(sweep, report, args.plots)
    print(f"fit {len(sweep)} runs ({len(excluded)} excluded) in {time.time() - started:.1f} s: "
          f"alpha={report['alpha']['value']:.4g} beta={report['beta']['value']:.4g} "
          f"a={report['a']['value']:.4g} b={report['b']['value']:.4g} -> {args.json}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
