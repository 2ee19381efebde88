"""Figures of a scaling fit, drawn from the sweep and the OUT.json report.

Uses matplotlib's object API with the Agg canvas (no pyplot): no display is needed and no
figure state is shared between calls.
"""

import os

import matplotlib
matplotlib.use("Agg")
from matplotlib.cm import ScalarMappable  # noqa: E402
from matplotlib.colors import LogNorm  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
import numpy as np  # noqa: E402

from scaling.laws import FLOPS_PER_PARAM_TOKEN, KAPLAN_N_OPT_EXPONENT, chinchilla_rule_N  # noqa: E402
from scaling.report import law_from_report  # noqa: E402

LOSS_LABEL = "loss (nats/token)"
C_LABEL = "compute C (FLOPs)"


def _colours(n):
    return matplotlib.colormaps["viridis"](np.linspace(0, 0.9, max(n, 1)))


def _save(fig, path):
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path


def plot_loss_vs_compute(sweep, report, path):
    """Each model size's runs against compute, the lower envelope and the fitted frontier."""
    fig = Figure(figsize=(7, 5))
    ax = fig.add_subplot()
    sizes = np.array([f"{n:.2g}" for n in sweep.N])   # one "model size" = N to 2 digits
    norm = LogNorm(sweep.N.min(), sweep.N.max() * 1.0001)
    cmap = matplotlib.colormaps["viridis"]
    for size in sorted(set(sizes), key=float):
        idx = np.flatnonzero(sizes == size)
        idx = idx[np.argsort(sweep.C[idx])]
        ax.plot(sweep.C[idx], sweep.loss[idx], "o-", color=cmap(norm(float(size))), ms=4, lw=1)
    fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=ax,
                 label="model size N (parameters)")
    frontier = report["frontier"]
    points = np.array(frontier["points"])
    ax.plot(points[:, 0], points[:, 1], "k*", ms=10, label="best run per budget")
    if frontier["gamma"]["value"] is not None:
        C = np.geomspace(sweep.C.min() / 2, sweep.C.max() * 2, 200)
        L_inf, k, gamma = (frontier[key]["value"] for key in ("L_inf", "k", "gamma"))
        ax.plot(C, L_inf + k * C ** -gamma, "k--",
                label=f"frontier {L_inf:.3g} + {k:.3g}·C^-{gamma:.3g}")
    ax.set(xscale="log", xlabel=C_LABEL, ylabel=LOSS_LABEL, title="Loss against compute")
    ax.legend(fontsize=7)
    return _save(fig, path)


def plot_isoflop_curves(sweep, report, path):
    """Loss against N at each budget, the fitted parabolas in log N and their minima."""
    fig = Figure(figsize=(7, 5))
    ax = fig.add_subplot()
    minima = {m["budget"]: m for m in report["isoflop_minima"]}
    budgets = sweep.budgets()
    for colour, (label, idx, C) in zip(_colours(len(budgets)), budgets):
        ax.plot(sweep.N[idx], sweep.loss[idx], "o", color=colour, ms=4, label=f"C={C:.2g}")
        m = minima.get(label)
        if m is None:
            continue
        x = np.linspace(np.log(m["N_min_sampled"]) - 0.3, np.log(m["N_max_sampled"]) + 0.3, 100)
        ax.plot(np.exp(x), np.polyval(m["parabola"], x), "-", color=colour, lw=1)
        if m["N_opt"] is not None:
            ax.plot(m["N_opt"], m["loss_min"], "D", ms=7, color=colour,
                    mfc=colour if m["interior"] else "none")
    ax.set(xscale="log", xlabel="parameters N", ylabel=LOSS_LABEL,
           title="IsoFLOP curves, parabolas in log N (hollow ◇: minimum outside sampled N)")
    ax.title.set_fontsize(10)
    ax.legend(fontsize=7, ncol=2)
    return _save(fig, path)


def plot_optimal_allocation(sweep, report, path):
    """N_opt(C) and D_opt(C): both approaches against the Chinchilla and Kaplan references."""
    fig = Figure(figsize=(11, 4.5))
    ax_n, ax_d = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    law = law_from_report(report)
    approach2 = report["approach2"]
    C = np.geomspace(sweep.C.min() / 3, sweep.C.max() * 3, 100)
    minima = [m for m in report["isoflop_minima"] if m["N_opt"] is not None]
    for ax, key, law_curve in ((ax_n, "N", law.optimal_N), (ax_d, "D", law.optimal_D)):
        for interior, marker in ((True, "o"), (False, "x")):
            pts = [(m["C"], m[f"{key}_opt"]) for m in minima if m["interior"] == interior]
            if pts:
                ax.plot(*zip(*pts), marker, color="C0", ls="none",
                        label="IsoFLOP minima" + ("" if interior else " (outside range)"))
        if approach2["a"]["value"] is not None:
            exponent = approach2["a" if key == "N" else "b"]["value"]
            ax.plot(C, approach2[f"{key}_coefficient"] * C ** exponent, "C0-",
                    label=f"Approach 2: ∝ C^{exponent:.3f}")
        exponent = law.a if key == "N" else law.b
        ax.plot(C, law_curve(C), "C1-", label=f"Approach 3: ∝ C^{exponent:.3f}")
        rule_N = chinchilla_rule_N(C)
        rule = rule_N if key == "N" else C / (FLOPS_PER_PARAM_TOKEN * rule_N)
        ax.plot(C, rule, "k:", label="Chinchilla rule: 20 tokens/param, C^0.5")
    # Kaplan's exponent, drawn through the middle of our own Approach-3 line (slope reference).
    C_mid = float(np.exp(np.mean(np.log(C))))
    kaplan_N = law.optimal_N(C_mid) * (C / C_mid) ** KAPLAN_N_OPT_EXPONENT
    ax_n.plot(C, kaplan_N, "C3--", label=f"Kaplan slope C^{KAPLAN_N_OPT_EXPONENT} (anchored mid-range)")
    ax_d.plot(C, C / (FLOPS_PER_PARAM_TOKEN * kaplan_N), "C3--",
              label=f"Kaplan slope C^{1 - KAPLAN_N_OPT_EXPONENT:.2f} (anchored mid-range)")
    ax_n.set(xscale="log", yscale="log", xlabel=C_LABEL, ylabel="optimal parameters N_opt",
             title="Compute-optimal model size")
    ax_d.set(xscale="log", yscale="log", xlabel=C_LABEL, ylabel="optimal tokens D_opt",
             title="Compute-optimal training tokens")
    for ax in (ax_n, ax_d):
        ax.legend(fontsize=7)
    return _save(fig, path)


def plot_residuals(sweep, report, path):
    """Approach-3 residuals log L_observed - log L_fitted against N, coloured by budget."""
    law = law_from_report(report)
    residual = np.log(sweep.loss) - np.log(law.loss(sweep.N, sweep.D))
    fig = Figure(figsize=(7, 4.5))
    ax = fig.add_subplot()
    budgets = sweep.budgets()
    for colour, (_, idx, C) in zip(_colours(len(budgets)), budgets):
        ax.plot(sweep.N[idx], 100 * residual[idx], "o", color=colour, ms=4, label=f"C={C:.2g}")
    ax.axhline(0, color="k", lw=0.8)
    ax.set(xscale="log", xlabel="parameters N",
           ylabel="residual log L − log L_fit (%)",
           title=f"Approach 3 residuals (rms {100 * np.sqrt(np.mean(residual ** 2)):.3g}%)")
    ax.legend(fontsize=7, ncol=2)
    return _save(fig, path)


def write_all_plots(sweep, report, out_dir):
    """Writes the four figures into out_dir; returns their paths."""
    os.makedirs(out_dir, exist_ok=True)
    figures = {"loss_vs_compute.png": plot_loss_vs_compute,
               "isoflop_curves.png": plot_isoflop_curves,
               "optimal_allocation.png": plot_optimal_allocation,
               "approach3_residuals.png": plot_residuals}
    return [draw(sweep, report, os.path.join(out_dir, name)) for name, draw in figures.items()]
