"""The scaling-law section: for each sweep directory, the figures `tripod scale fit` drew
(plots/*.png, or *.png beside fit.json as in scaling/results/) embedded as they are, and the
fitted law's parameters; a sweep that was run but not fitted gets loss against compute redrawn
from runs.jsonl."""
import json
import math
import reprlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.colors import LogNorm  # noqa: E402

from reports.report.collect import json_object  # noqa: E402
from reports.report.sections import Figure, Section, fmt, is_png, label_of, slug, table_html  # noqa: E402

# scaling/plots.py's figures, in the order they read best; any other PNG follows by name.
KNOWN_PLOTS = ("loss_vs_compute", "isoflop_curves", "optimal_allocation", "approach3_residuals")
FIT_PARAMETERS = ("E", "A", "B", "alpha", "beta", "a", "b")


def sweep_pngs(sweep):
    pngs = sorted((sweep / "plots").glob("*.png")) or sorted(sweep.glob("*.png"))
    rank = {name: i for i, name in enumerate(KNOWN_PLOTS)}
    return sorted(pngs, key=lambda p: (rank.get(p.stem, len(rank)), p.name))


def read_runs(sweep, notes):
    """The finished runs of runs.jsonl. Each line is a run of its own, so a bad one is skipped with
    a note naming it and the others are drawn (as `tripod scale fit` excludes it)."""
    path = sweep / "runs.jsonl"
    if not path.is_file():
        return []
    runs = []
    for n, line in enumerate(path.read_text(errors="replace").splitlines(), start=1):
        if not line.strip():
            continue
        record = json_object(line)
        if record is None:
            notes.append(f"{path}:{n}: not a JSON object; that run is left out")
        elif record.get("status", "ok") == "ok" and record.get("loss") is not None:
            runs.append(record)
    return runs


def read_fit(fit_path, notes):
    """fit.json as a dict, or None with a note naming the file."""
    try:
        fit = json.loads(fit_path.read_text())
    except (OSError, ValueError) as e:
        notes.append(f"{fit_path}: not readable JSON ({e})")
        return None
    if not isinstance(fit, dict):
        notes.append(f"{fit_path}: not a fit.json of `tripod scale fit` (not a JSON object)")
        return None
    for key in FIT_PARAMETERS:  # what the table shows: a damaged one is named, not a traceback
        problem = estimate_problem(fit.get(key))
        if problem:
            notes.append(f"{fit_path}: '{key}' {problem}; the fit is left out of the table")
            return None
    return fit


def estimate_problem(entry):
    """Why an entry of fit.json cannot be shown, or None. `scale fit` writes {"value": number or null,
    "ci": [lo, hi] or null}; a bare number (or none at all) is shown as it is."""
    if entry is None or is_number(entry):
        return None
    if not isinstance(entry, dict):
        return f"is not an estimate {{value, ci}} (got {reprlib.repr(entry)})"
    value, ci = entry.get("value"), entry.get("ci")
    if value is not None and not is_number(value):
        return f"has no number as its value (got {reprlib.repr(value)})"
    if ci is not None and not (isinstance(ci, list) and len(ci) == 2):
        return f"has no [lo, hi] as its ci (got {reprlib.repr(ci)})"
    return None


def is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)  # JSON true is a Python int


def loss_vs_compute_figure(runs, title):
    """Each run's loss against its compute, coloured by model size (scaling/plots.py draws the fitted
    version of this once `tripod scale fit` has run)."""
    runs = [r for r in runs if r.get("C") and r.get("N")]
    if not runs:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    points = ax.scatter([r["C"] for r in runs], [r["loss"] for r in runs], c=[r["N"] for r in runs],
                        norm=LogNorm(), cmap="viridis")
    fig.colorbar(points, ax=ax, label="model size N (parameters)")
    ax.set(xscale="log", xlabel="compute C (FLOPs)", ylabel="loss (nats/token)", title=title)
    ax.grid(True, which="both", alpha=0.3)
    return fig


def ci_text(entry):
    if not isinstance(entry, dict):
        return fmt(entry, ".4g") if isinstance(entry, (int, float)) else "-"
    value, ci = entry.get("value"), entry.get("ci")
    if ci and all(isinstance(c, (int, float)) and math.isfinite(c) for c in ci):
        return f"{fmt(value, '.4g')} [{fmt(ci[0], '.3g')}, {fmt(ci[1], '.3g')}]"
    return fmt(value, ".4g")


def fit_row(label, fit):
    return [label, fit.get("n_runs", "-")] + [ci_text(fit.get(key)) for key in FIT_PARAMETERS]


def scale_section(results, root):
    section = Section("scale", "Scaling laws (tripod scale)")
    if not results.sweeps:
        section.notes.append("No sweep directory (fit.json or runs.jsonl): `tripod scale run quick --out DIR/scale` "
                             "then `tripod scale fit DIR/scale`.")
        return section
    fit_rows = []
    for sweep in results.sweeps:
        label = label_of(sweep, root)
        fit_path = sweep / "fit.json"
        if fit_path.is_file():
            fit = read_fit(fit_path, results.notes)
            if fit is not None:
                fit_rows.append(fit_row(label, fit))
        else:
            section.notes.append(f"{label}: not fitted yet (`tripod scale fit {sweep}`)")
        pngs = [p for p in sweep_pngs(sweep) if is_png(p.read_bytes())]
        for png in pngs:
            section.figures.append(Figure(f"fig-scale-{slug(label)}-{slug(png.stem)}",
                                          f"{label}: {png.stem.replace('_', ' ')}", png.read_bytes()))
        if not pngs:
            title = f"{label}: loss against compute (redrawn from runs.jsonl)"
            section.add(f"fig-scale-{slug(label)}-loss-vs-compute", title,
                        loss_vs_compute_figure(read_runs(sweep, results.notes), title))
    if fit_rows:
        section.tables.append(table_html(
            ["sweep", "runs"] + list(FIT_PARAMETERS), fit_rows,
            caption="L(N, D) = E + A/N^alpha + B/D^beta; N_opt ~ C^a, D_opt ~ C^b (95% bootstrap CI when computed)"))
    return section
