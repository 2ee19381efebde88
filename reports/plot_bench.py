#!/usr/bin/python3
"""Plots and an HTML page from the JSON that `tripod bench` writes (bench.json):

  busbw.png         bus bandwidth vs message size, one line per collective (out-of-place)
  gemm.png          sgemm/dgemm TFLOP/s vs square size, with the device's peak as a line
  gemm_layers.png   TFLOP/s of a transformer layer's GEMM shapes, as % of peak
  mfu.png           end-to-end MFU and tokens/s per training layout
  bubble.png        pipeline bubble per schedule and micro-batch count, measured vs theory
  timeline.png      the 1F1B pipeline timeline (a Gantt chart, drawn by plot_pipeline.py)
  index.html        the summary tables and the figures

Usage: /usr/bin/python3 reports/plot_bench.py RESULTS/bench.json --out RESULTS/plots
Any section missing from the JSON (e.g. no collectives) is skipped with a note.

The *_figure(section) functions return a matplotlib Figure (or None when the section is empty);
`tripod report` (reports/report/) embeds the same figures, with imported peers drawn on them.
"""
import argparse
import html
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from reports.plot_pipeline import draw_timeline, figure_size  # noqa: E402


def human_bytes(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:g} {unit}"
        n /= 1024
    return f"{n:g} TiB"


def save(fig, out, name):
    """Lays out, writes out/name and closes the figure; returns the name for the report."""
    fig.tight_layout()
    fig.savefig(out / name, dpi=120)
    plt.close(fig)
    return name


def out_of_place_rows(comm):
    return [r for r in comm.get("results", []) if not r.get("in_place") and r.get("size", 0) > 0]


def busbw_figure(comm, peers=()):
    """Bus bandwidth vs message size. Alone: one line per collective on one axes. With peers
    ([(label, comm section)], e.g. an imported nccl-tests run): one panel per collective, Tripod
    solid and each peer dashed on the same axes, so the two are read against each other."""
    rows = out_of_place_rows(comm)
    peers = [(label, out_of_place_rows(p)) for label, p in peers]
    peers = [(label, p) for label, p in peers if p]
    if not rows and not peers:
        return None
    title = f"Collectives, {comm.get('group_size', '?')} ranks per group ({comm.get('group', '')})"
    if not peers:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for name in sorted({r["collective"] for r in rows}):
            draw_busbw_line(ax, rows, name, name)
        decorate_busbw(ax, title)
        return fig
    names = sorted({r["collective"] for r in rows} | {r["collective"] for _, p in peers for r in p})
    cols = min(4, len(names))
    nrows = (len(names) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(3.2 * cols, 2.8 * nrows + 0.6), squeeze=False)
    for ax, name in zip(axes.flat, names):
        draw_busbw_line(ax, rows, name, "Tripod")
        for label, p in peers:
            draw_busbw_line(ax, p, name, label, ls="--")
        decorate_busbw(ax, name, small=True)
    for ax in list(axes.flat)[len(names):]:
        ax.set_visible(False)
    fig.suptitle(title + ", vs " + ", ".join(label for label, _ in peers), fontsize=10)
    return fig


def draw_busbw_line(ax, rows, collective, label, **style):
    pts = sorted((r["size"], r["busbw"]) for r in rows if r["collective"] == collective)
    if pts:
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3, label=label, **style)


def decorate_busbw(ax, title, small=False):
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes)", fontsize=8 if small else None)
    ax.set_ylabel("bus bandwidth (GB/s)", fontsize=8 if small else None)
    ax.set_title(title, fontsize=9 if small else None)
    ax.grid(True, which="both", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=6 if small else 8)
    if small:
        ax.tick_params(labelsize=7)


def gemm_figure(gemm):
    """sgemm/dgemm TFLOP/s vs square size, each with its peak as a dashed line."""
    peak = gemm.get("peak", {})
    fig, ax = plt.subplots(figsize=(7, 4.5))
    drew = False
    for key, label, peak_key in (("sgemm", "sgemm (fp32)", "fp32_flops"), ("dgemm", "dgemm (fp64)", "fp64_flops")):
        rows = sorted(gemm.get(key, []), key=lambda r: r["size"])
        if not rows:
            continue
        line, = ax.plot([r["size"] for r in rows], [r["tflops"] for r in rows], marker="o", label=label)
        if peak.get(peak_key):
            ax.axhline(peak[peak_key] / 1e12, ls="--", color=line.get_color(), alpha=0.7,
                       label=f"{label} peak ({peak[peak_key] / 1e12:.3g} TFLOP/s)")
        drew = True
    if not drew:
        plt.close(fig)
        return None
    ax.set_xscale("log", base=2)
    ax.set_xlabel("matrix size n (n x n x n)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title("Square GEMM throughput vs the device's peak")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def layer_gemms_figure(gemm):
    rows = gemm.get("layer_gemms", [])
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(7, 0.3 * len(rows) + 1.5))
    names = [r["name"].split("/", 1)[-1] for r in rows]
    ax.barh(names, [r["pct_of_peak"] for r in rows])
    ax.invert_yaxis()
    ax.set_xlabel("% of peak")
    setup = gemm.get("setup", {})
    ax.set_title(f"GEMMs of one layer: {setup.get('model', '')}, tp={setup.get('tp', 1)}, "
                 f"{setup.get('tokens', '?')} tokens")
    ax.grid(True, axis="x", alpha=0.3)
    return fig


def mfu_figure(layouts, peers=()):
    """MFU per training layout (tokens/s on each bar); peers ([(label, mfu fraction)], e.g. the
    mean MFU of an imported Megatron-LM run) as extra bars in another colour."""
    rows = layouts.get("layouts", [])
    if not rows and not peers:
        return None
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * (len(rows) + len(peers)) + 2), 3.8))
    ax.bar([r["layout"] for r in rows], [100 * r["mfu"] for r in rows], label="Tripod")
    for i, r in enumerate(rows):
        ax.annotate(f"{r['tokens_per_second']:.0f} tok/s", (i, 100 * r["mfu"]), ha="center", va="bottom", fontsize=8)
    if peers:
        ax.bar([label for label, _ in peers], [100 * mfu for _, mfu in peers], color="tab:orange", label="imported")
        ax.legend(fontsize=8)
        ax.tick_params(axis="x", labelsize=7)
    ax.set_ylabel("MFU (%)")
    ax.set_title(f"End-to-end training, {layouts.get('model', '')} ({layouts.get('n_params', 0) / 1e6:.1f} M params)")
    ax.grid(True, axis="y", alpha=0.3)
    return fig


def bubble_figure(pipeline):
    rows = pipeline.get("results", [])
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(max(6, 0.7 * len(rows) + 2), 4))
    x = range(len(rows))
    ax.bar([i - 0.2 for i in x], [r["measured_bubble"] for r in rows], 0.4, label="measured")
    ax.bar([i + 0.2 for i in x], [r["theoretical_bubble"] for r in rows], 0.4, label="theory (p-1)/(vm+p-1)")
    labels = [f"{r['schedule']}\nm={r['microbatches']}" + (f" v={r['virtual_stages']}" if r.get("virtual_stages", 1) > 1
                                                             else "") for r in rows]
    ax.set_xticks(list(x), labels, fontsize=8)
    ax.set_ylabel("bubble (idle fraction of the step)")
    ax.set_title(f"Pipeline bubble, p={pipeline.get('stages', '?')} stages")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def timeline_figure(timeline):
    fig, ax = plt.subplots(figsize=figure_size(timeline))
    if not draw_timeline(timeline, ax):
        plt.close(fig)
        return None
    return fig


# (file name, bench.json section, figure function): what plot_bench.py draws, in page order.
BENCH_FIGURES = (
    ("busbw.png", "comm", busbw_figure),
    ("gemm.png", "gemm", gemm_figure),
    ("gemm_layers.png", "gemm", layer_gemms_figure),
    ("mfu.png", "layouts", mfu_figure),
    ("bubble.png", "pipeline", bubble_figure),
    ("timeline.png", "pipeline_timeline", timeline_figure),
)


def summary_rows(bench):
    """(what, value) pairs: the same headline figures `tripod bench` prints."""
    rows = []
    comm = bench.get("comm", {})
    for name in sorted({r["collective"] for r in comm.get("results", [])}):
        best = max((r for r in comm["results"] if r["collective"] == name), key=lambda r: r["busbw"])
        rows.append((f"best busbw {name}", f"{best['busbw']:.2f} GB/s at {human_bytes(best['size'])}"))
    gemm = bench.get("gemm", {})
    if gemm.get("sgemm_best"):
        b = gemm["sgemm_best"]
        rows.append(("best sgemm", f"{b['tflops']:.3f} TFLOP/s at n={b['size']} ({b['pct_of_peak']:.0f}% of peak)"))
    for r in bench.get("layouts", {}).get("layouts", []):
        rows.append((f"MFU {r['layout']}", f"{100 * r['mfu']:.2f}% ({r['tokens_per_second']:.0f} tokens/s)"))
    for r in bench.get("pipeline", {}).get("results", []):
        rows.append((f"bubble {r['schedule']} p={r['stages']} m={r['microbatches']}",
                     f"{r['measured_bubble']:.3f} measured, {r['theoretical_bubble']:.3f} theory"))
    return rows


def write_html(bench, figures, out):
    system = bench.get("system", {})
    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>Tripod bench</title>",
             "<style>body{font-family:sans-serif;max-width:60em;margin:auto}td,th{padding:2px 8px}</style></head><body>",
             "<h1>Tripod bench</h1>",
             f"<p>{html.escape(str(system.get('device', '')))} &middot; {system.get('ranks', '?')} ranks"
             f"{' &middot; quick' if system.get('quick') else ''}</p>",
             "<table><tr><th>measure</th><th>value</th></tr>"]
    parts += [f"<tr><td>{html.escape(k)}</td><td>{html.escape(v)}</td></tr>" for k, v in summary_rows(bench)]
    parts.append("</table>")
    parts += [f"<h2>{html.escape(f)}</h2><img src='{html.escape(f)}' style='max-width:100%'>" for f in figures]
    parts.append("</body></html>")
    (out / "index.html").write_text("\n".join(parts))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bench_json", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    bench = json.loads(args.bench_json.read_text())
    args.out.mkdir(parents=True, exist_ok=True)
    figures = []
    for name, section, make_figure in BENCH_FIGURES:
        fig = make_figure(bench.get(section, {}))
        if fig:
            figures.append(save(fig, args.out, name))
        else:
            print(f"plot_bench: no '{section}' results for {make_figure.__name__}, skipped", file=sys.stderr)
    write_html(bench, figures, args.out)
    print(f"wrote {len(figures)} figures and index.html to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
