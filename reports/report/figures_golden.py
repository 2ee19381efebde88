"""The golden-check section: for each `tripod golden check ... --json` result, the loss of the
Tripod reference run (ref_loss) and of the peer (loss) per step, their relative errors, and a
verdict table (steps and tensors within tolerance)."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from reports.report.sections import Section, fmt, label_of, slug, table_html  # noqa: E402

# Exact agreement is drawn at this floor on the log axis.
FLOOR = 1e-18


def golden_figure(check):
    steps = sorted(check.get("steps", []), key=lambda s: s["step"])
    if not steps:
        return None
    x = [s["step"] for s in steps]
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6))
    left.plot(x, [s["ref_loss"] for s in steps], "o-", label=f"Tripod reference ({check.get('precision', '?')})")
    left.plot(x, [s["loss"] for s in steps], "x--", label=str(check.get("framework", "peer")))
    left.set(xlabel="step", ylabel="loss", title="Loss, Tripod vs peer")
    left.legend(fontsize=7)
    for key, label in (("loss_rel_error", "loss"), ("grad_norm_rel_error", "grad norm")):
        values = [max(s.get(key) or 0.0, FLOOR) for s in steps]
        right.semilogy(x, values, "o-", label=label)
    bad = [s["step"] for s in steps if not s.get("ok", True)]
    for step in bad:
        right.axvline(step, color="red", alpha=0.3)
    right.set(xlabel="step", ylabel="relative error", title="Relative error per step" + (" (red: out of tolerance)"
                                                                                          if bad else ""))
    right.legend(fontsize=7)
    for ax in (left, right):
        ax.grid(True, alpha=0.3)
    fig.suptitle(f"{check.get('framework', 'peer')}: {check.get('verdict', '?')}", fontsize=10)
    return fig


def verdict_row(label, check):
    steps, tensors = check.get("steps", []), check.get("tensors", [])
    worst_tensor = max(tensors, key=lambda t: (t.get("max_abs_error") or 0) / (t.get("allowed") or 1), default=None)
    return (label, check.get("framework", "?"), check.get("precision", "?"), check.get("verdict", "?"),
            f"{sum(bool(s.get('ok')) for s in steps)}/{len(steps)}",
            f"{sum(bool(t.get('ok')) for t in tensors)}/{len(tensors)}",
            fmt(max((s.get("loss_rel_error") or 0 for s in steps), default=None), ".1e"),
            fmt(max((s.get("grad_norm_rel_error") or 0 for s in steps), default=None), ".1e"),
            "-" if worst_tensor is None else
            f"{worst_tensor['name']} step {worst_tensor.get('step', '?')}: "
            f"{fmt(worst_tensor.get('max_abs_error'), '.1e')}"
            f" (allowed {fmt(worst_tensor.get('allowed'), '.1e')})")


def golden_section(results, root):
    section = Section("golden", "Golden checks (tripod golden check)")
    if not results.golden:
        section.notes.append("No golden-check results: `tripod golden check BUNDLE RESULTS --json DIR/golden/X.json`.")
        return section
    section.tables.append(table_html(
        ["file", "framework", "precision", "verdict", "steps ok", "tensors ok", "worst loss rel", "worst grad-norm rel",
         "worst tensor"], [verdict_row(label_of(p, root), c) for p, c in results.golden]))
    for path, check in results.golden:
        label = label_of(path, root)
        section.add(f"fig-golden-{slug(label)}", f"Golden check {label}: Tripod vs {check.get('framework', 'peer')}",
                    golden_figure(check))
    return section
