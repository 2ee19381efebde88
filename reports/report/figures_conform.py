"""The conformance section: `tripod conform`'s matrix as a heatmap, one cell per layout (rows: the
mesh, sequence parallelism and schedule; columns: ZeRO stage and micro-batches), coloured by the
layout's worst relative error against the single-device reference; failing layouts crossed out.
Tables: the totals and the failing layouts."""
import math
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from reports.report.sections import Section, fmt, label_of, slug, table_html  # noqa: E402

ERRORS = ("loss_rel_error", "grad_norm_rel_error", "param_rel_error")
# Exact agreement (0) is drawn at this floor, below fp64's rounding, so log10 stays finite.
FLOOR = 1e-18


def worst_error(record):
    return max(record.get(key) or 0.0 for key in ERRORS)


def matrix_position(layout):
    """("tp2-pp2-dp2-sp-1f1b", "z1-mb2") from "tp2-pp2-dp2-z1-mb2-sp-1f1b"."""
    match = re.search(r"-z(\d+)-mb(\d+)", layout)
    if not match:
        return layout, "-"
    return layout[:match.start()] + layout[match.end():], f"z{match.group(1)}-mb{match.group(2)}"


def column_order(column):
    numbers = [int(n) for n in re.findall(r"\d+", column)]
    return numbers or [math.inf]


def heatmap_figure(records, title):
    if not records:
        return None
    cells = {}
    for r in records:
        cells[matrix_position(r["layout"])] = r
    rows = sorted({row for row, _ in cells})
    cols = sorted({col for _, col in cells}, key=column_order)
    values = np.full((len(rows), len(cols)), np.nan)
    for (row, col), r in cells.items():
        values[rows.index(row), cols.index(col)] = math.log10(max(worst_error(r), FLOOR))
    fig, ax = plt.subplots(figsize=(max(6.0, 0.42 * len(cols) + 3.2), 0.2 * len(rows) + 1.6))
    cmap = matplotlib.colormaps["viridis"].copy()
    cmap.set_bad("#dddddd")  # no such layout
    image = ax.imshow(np.ma.masked_invalid(values), cmap=cmap, aspect="auto", interpolation="nearest")
    for (row, col), r in cells.items():
        if not r.get("pass", True):
            ax.text(cols.index(col), rows.index(row), "\u00d7", ha="center", va="center", color="red",
                    fontsize=9, fontweight="bold")
    ax.set_xticks(range(len(cols)), cols, rotation=60, ha="right", fontsize=7)
    ax.set_yticks(range(len(rows)), rows, fontsize=6 if len(rows) > 30 else 8)
    ax.set_title(title, fontsize=9)
    fig.colorbar(image, ax=ax, label="log10 worst relative error", fraction=0.05, pad=0.02)
    return fig


def summary_row(label, conform):
    layouts = conform.get("layouts", [])
    checks = conform.get("operator_checks", [])
    worst = {key: max((r.get(key) or 0.0 for r in layouts), default=None) for key in ERRORS}
    return [label, conform.get("dtype", "?"), conform.get("ranks", "?"), conform.get("steps", "?"),
            f"{sum(bool(r.get('pass')) for r in layouts)}/{len(layouts)}",
            fmt(worst["loss_rel_error"], ".1e"), fmt(worst["grad_norm_rel_error"], ".1e"),
            fmt(worst["param_rel_error"], ".1e"), f"{sum(bool(r.get('pass')) for r in checks)}/{len(checks)}"]


def conform_section(results, root):
    section = Section("conform", "Conformance (tripod conform)")
    if not results.conform:
        section.notes.append("No conform JSON found: run `mpirun -np 8 tripod conform --json DIR/conform.json`.")
        return section
    section.tables.append(table_html(
        ["file", "dtype", "ranks", "steps", "layouts passed", "worst loss rel", "worst grad-norm rel",
         "worst param rel", "operator checks passed"],
        [summary_row(label_of(p, root), c) for p, c in results.conform],
        caption="Every layout against the single-device reference"))
    failing = [(label_of(p, root), r) for p, c in results.conform
               for r in c.get("layouts", []) + c.get("operator_checks", []) if not r.get("pass", True)]
    if failing:
        section.tables.append(table_html(
            ["file", "layout", "worst rel error", "error / bound", "failure"],
            [(label, r["layout"], fmt(worst_error(r), ".1e"), fmt(r.get("error_over_bound"), ".2f"),
              r.get("failure", "")) for label, r in failing],
            caption="Failing layouts"))
    for path, conform in results.conform:
        label = label_of(path, root)
        layouts = conform.get("layouts", [])
        title = (f"{label}: worst relative error per layout ({conform.get('dtype', '?')}, "
                 f"{conform.get('ranks', '?')} ranks, {len(layouts)} layouts; \u00d7 = fails)")
        section.add(f"fig-conform-{slug(label)}", title, heatmap_figure(layouts, title))
    return section
