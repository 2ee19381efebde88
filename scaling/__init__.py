"""Scaling-law fitting for Tripod sweeps.

laws.py       the parametric law L(N,D) = E + A/N^alpha + B/D^beta and published references
runs.py       reading a sweep's JSONL, excluding bad runs loudly, grouping runs into budgets
fitlib.py     Approach 2 (IsoFLOP parabolas), Approach 3 (Huber / L-BFGS-B), compute frontier
bootstrap.py  confidence intervals by resampling runs
report.py     the OUT.json document and its Markdown table
plots.py      PNG figures (matplotlib, Agg)
fit.py, synthetic_runs.py   the two commands
"""
