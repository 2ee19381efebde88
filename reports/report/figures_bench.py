"""The benchmark section (busbw with imported nccl-tests runs on the same axes, GEMM rate with the
peak line, layer GEMMs, MFU per layout with imported peers, pipeline bubble) and the pipeline
timelines section. The figures are plot_bench.py's, so the bench's own index.html and the report
draw the same thing."""
import statistics

from reports.plot_bench import (bubble_figure, busbw_figure, gemm_figure, layer_gemms_figure, mfu_figure,
                                summary_rows, timeline_figure)
from reports.report.sections import Section, label_of, slug, table_html


def peer_label(path, data):
    tool = (data.get("source") or {}).get("tool") or "imported"
    return f"{tool} ({path.stem})"


def comm_peers(results):
    return [(peer_label(path, data), data.get("comm", {})) for path, data in results.imported
            if data.get("kind") == "comm"]


def mfu_peers(results):
    """(label, median MFU) of every imported training run that reports one."""
    peers = []
    for path, data in results.imported:
        if data.get("kind") != "train":
            continue
        mfus = [row["mfu"] for row in data.get("steps", []) if row.get("mfu") is not None]
        if mfus:
            peers.append((peer_label(path, data), statistics.median(mfus)))
    return peers


def bench_section(results, root):
    section = Section("bench", "Benchmarks (tripod bench)")
    comm_imports = comm_peers(results)
    if not results.bench:
        section.notes.append("No bench.json found: run `tripod bench --quick --out DIR/bench`.")
        if comm_imports:  # the imported runs still get their panels
            section.add("fig-bench-busbw", "Bus bandwidth vs message size (imported only)",
                        busbw_figure({}, comm_imports))
        return section
    if len(results.bench) > 1:
        section.notes.append("Several bench.json files; each is shown in turn: "
                             + ", ".join(label_of(p, root) for p, _ in results.bench))
    for index, (path, bench) in enumerate(results.bench):
        prefix = "fig-bench" if index == 0 else f"fig-bench{index + 1}"
        where = "" if len(results.bench) == 1 else f" [{label_of(path, root)}]"
        system = bench.get("system", {})
        section.tables.append(table_html(
            ["measure", "value"], summary_rows(bench),
            caption=f"{label_of(path, root)}: {system.get('device', '?')}, {system.get('ranks', '?')} ranks"
                    f"{', quick' if system.get('quick') else ''}"))
        peers = comm_imports if index == 0 else []
        section.add(f"{prefix}-busbw", "Bus bandwidth vs message size, per collective"
                    + (f" (dashed: imported {', '.join(label for label, _ in peers)})" if peers else "") + where,
                    busbw_figure(bench.get("comm", {}), peers))
        section.add(f"{prefix}-gemm", "GEMM rate vs size, with the peak" + where, gemm_figure(bench.get("gemm", {})))
        section.add(f"{prefix}-gemm-layers", "GEMMs of one transformer layer, % of peak" + where,
                    layer_gemms_figure(bench.get("gemm", {})))
        mfu_imports = mfu_peers(results) if index == 0 else []
        section.add(f"{prefix}-mfu", "MFU per layout" + where + (
            f" (orange: median MFU of imported {', '.join(label for label, _ in mfu_imports)})" if mfu_imports else ""),
                    mfu_figure(bench.get("layouts", {}), mfu_imports))
        section.add(f"{prefix}-bubble", "Pipeline bubble, measured vs theory" + where,
                    bubble_figure(bench.get("pipeline", {})))
        missing = [name for name in ("comm", "gemm", "layouts", "pipeline") if not bench.get(name)]
        if missing:
            section.notes.append(f"{label_of(path, root)} has no {', '.join(missing)} results: "
                                 "those figures are skipped.")
    if not comm_imports:
        section.notes.append("No imported collective results (`tripod import nccl-tests`): busbw shows Tripod alone.")
    return section


def timelines_section(results, root):
    section = Section("timelines", "Pipeline timelines")
    timelines = [(f"{label_of(p, root)}: pipeline_timeline", b["pipeline_timeline"]) for p, b in results.bench
                 if b.get("pipeline_timeline")]
    timelines += [(label_of(p, root), t) for p, t in results.timelines]
    if not timelines:
        section.notes.append("No pipeline timeline: `tripod bench` (its pipeline step) or "
                             "`tripod bench pipeline --trace` writes one.")
    for label, timeline in timelines:
        section.add(f"fig-timeline-{slug(label)}", f"Pipeline timeline ({label})", timeline_figure(timeline))
    return section
