#!/usr/bin/python3
"""The closing summary of the README's main job (ci/main.sh): layouts passed (tripod conform),
best bus bandwidth, GEMM % of peak, MFU and pipeline bubbles (tripod bench), and where everything
was written: the one page to open is RESULTS_DIR/report.html (`tripod report`).

Usage: /usr/bin/python3 -m reports.main_summary RESULTS_DIR   (holding conform.json and bench/)"""
import json
import sys
from pathlib import Path


def main(results):
    results = Path(results)
    conform = json.loads((results / "conform.json").read_text())
    bench = json.loads((results / "bench" / "bench.json").read_text())
    layouts = conform["layouts"]
    checks = conform.get("operator_checks", [])
    passed = sum(r["pass"] for r in layouts)
    print("\n== Tripod on this node ==")
    print(f"conformance: {passed}/{len(layouts)} layouts of {conform['ranks']} ranks match the single-device "
          f"reference ({conform['dtype']}, {conform['steps']} steps, tied and untied heads; worst loss error "
          f"{max(r['loss_rel_error'] for r in layouts):.1e}, worst parameter error "
          f"{max(r['param_rel_error'] for r in layouts):.1e}); "
          f"{sum(r['pass'] for r in checks)}/{len(checks)} operator checks pass")
    comm = bench.get("comm", {}).get("results", [])
    if comm:
        best = max((r for r in comm if r["collective"] == "all_reduce"), key=lambda r: r["busbw"], default=None)
        if best:
            # A rank held off its core by other processes (on_cpu < 0.9, core/host_cpus.h's
            # kSharedCpuShare) makes the figure the machine's load, not its transport's: say so.
            shared = best.get("on_cpu") is not None and best["on_cpu"] < 0.9
            print(f"all_reduce:  best bus bandwidth {best['busbw']:.2f} GB/s at {best['size']} bytes "
                  f"({bench['comm'].get('group_size')} ranks)"
                  + (f"; ranks on a CPU {100 * best['on_cpu']:.0f}% of its time: other processes shared the "
                     f"cores, so it is low" if shared else ""))
    gemm = bench.get("gemm", {}).get("sgemm_best")
    if gemm:
        print(f"sgemm:       {gemm['tflops'] * 1e3:.1f} GFLOP/s at n={gemm['size']}, {gemm['pct_of_peak']:.0f}% of "
              f"the nominal peak")
    for r in bench.get("layouts", {}).get("layouts", []):
        print(f"training:    {r['layout']}: MFU {100 * r['mfu']:.1f}%, {r['tokens_per_second']:.0f} tokens/s")
    for r in bench.get("pipeline", {}).get("results", []):
        print(f"pipeline:    {r['schedule']} p={r['stages']} m={r['microbatches']}: bubble {r['measured_bubble']:.3f} "
              f"measured, {r['theoretical_bubble']:.3f} theory (synthetic balanced stages)")
    golden = results / "golden" / "torch-fp32-check.json"
    if golden.is_file():
        g = json.loads(golden.read_text())
        print(f"golden:      {g['framework']} ({g['precision']}) {g['verdict'].upper()} against Tripod's fp64 "
              f"reference over {len(g['steps'])} steps (worst loss error "
              f"{max(s['loss_rel_error'] for s in g['steps']):.1e}, rtol {g['rtol']:g})")
    print(f"full results: {results}/conform.json, conform.xml, bench/bench.json, bench/*.log")
    print(f"plots:        {results}/bench/plots/index.html")
    report = results / "report.html"
    if report.is_file():
        rendered = results / "report.png"
        print(f"report:       {report}  (every figure on one page; open it in a browser"
              + (f", screenshot {rendered})" if rendered.is_file() else ")"))
    else:
        print(f"report:       not built: tripod report {results}")
    return 0 if passed == len(layouts) and all(r["pass"] for r in checks) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "runs/main"))
