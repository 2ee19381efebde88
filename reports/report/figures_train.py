"""The training section: loss curves of Tripod's runs (metrics.jsonl) and of imported peers
(Megatron-LM, torchtitan: reports/FORMATS.md kind "train") on the same axes, and a table of each
run's throughput. Tripod's metrics count steps from 0 and the peers from 1 (as those tools print),
so Tripod's step s is drawn at s + 1: step k of both is the k-th optimizer step."""
import statistics

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from reports.report.figures_bench import peer_label  # noqa: E402
from reports.report.sections import Section, fmt, label_of, table_html  # noqa: E402


def median_of(rows, key):
    values = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(values) if values else None


def runs_of(results, root):
    """(label, is_tripod, [step rows counting from 1]) of every training run found."""
    runs = []
    for path, records in results.metrics:
        rows = [{**r, "step": r["step"] + 1} for r in records]
        runs.append((f"Tripod ({label_of(path.parent, root)})", True, rows))
    for path, data in results.imported:
        if data.get("kind") == "train":
            # An imported run keeps its validation loss in extra (reports/FORMATS.md section 3: the
            # schema has no key for it); Tripod's metrics have it as a key of their own.
            rows = [{**r, "val_loss": (r.get("extra") or {}).get("val_loss")} for r in data.get("steps", [])
                    if r.get("loss") is not None]
            if rows:
                runs.append((peer_label(path, data), False, rows))
    return runs


def loss_figure(runs):
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, tripod, rows in runs:
        rows = sorted(rows, key=lambda r: r["step"])
        line, = ax.plot([r["step"] for r in rows], [r["loss"] for r in rows], ls="-" if tripod else "--",
                        marker="o" if len(rows) < 40 else None, ms=3, label=label)
        val = [r for r in rows if r.get("val_loss") is not None]
        if val:
            ax.plot([r["step"] for r in val], [r["val_loss"] for r in val], "s", ms=5, color=line.get_color(),
                    mfc="none", label=f"{label}, validation")
    ax.set_xlabel("optimizer step (from 1)")
    ax.set_ylabel("loss (nats/token)")
    ax.set_title("Training loss: Tripod (solid) vs imported peers (dashed)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    return fig


def train_section(results, root):
    section = Section("train", "Training: Tripod vs peers")
    runs = runs_of(results, root)
    if not runs:
        section.notes.append("No training metrics: Tripod's metrics.jsonl (`tripod train`) or an imported "
                             "run (`tripod import megatron|torchtitan`).")
        return section
    if not any(tripod for _, tripod, _ in runs):
        section.notes.append("No Tripod metrics.jsonl: the peers are shown alone.")
    if all(tripod for _, tripod, _ in runs):
        section.notes.append("No imported training run (`tripod import megatron|torchtitan`): Tripod is shown alone.")
    section.add("fig-train-loss", "Loss curves: " + ", ".join(label for label, _, _ in runs), loss_figure(runs))
    table = []
    for label, _, rows in runs:
        last = max(rows, key=lambda r: r["step"])
        mfu = median_of(rows, "mfu")
        table.append((label, len(rows), last["step"], fmt(last["loss"], ".4f"),
                      fmt(median_of(rows, "tokens_per_second"), ".0f"), fmt(median_of(rows, "step_seconds"), ".3g"),
                      "-" if mfu is None else f"{100 * mfu:.1f}%"))
    section.tables.append(table_html(["run", "steps logged", "last step", "last loss", "median tokens/s",
                                      "median step s", "median MFU"], table))
    return section
