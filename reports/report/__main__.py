"""tripod report DIR [--out FILE.html] [--extra PATH ...]: one self-contained HTML page from a
results directory (what it reads: reports/report/__init__.py). Prints the page's path and each
section's figure count; exits non-zero only when the page cannot be written."""
import argparse
import sys
from pathlib import Path

from reports.report.collect import collect
from reports.report.figures_bench import bench_section, timelines_section
from reports.report.figures_conform import conform_section
from reports.report.figures_golden import golden_section
from reports.report.figures_scale import scale_section
from reports.report.figures_train import train_section
from reports.report.page import render_page

# Page order: what a new node's user reads first (bench, conformance), then training and scaling.
SECTIONS = (bench_section, conform_section, timelines_section, train_section, golden_section, scale_section)


def build_report(root, out, extras=()):
    """Writes the page; returns the sections (with their figures) for the caller to inspect."""
    root = Path(root)
    results = collect(root, extras)
    sections = [make(results, root) for make in SECTIONS]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_page(sections, results, root))
    return sections


def main(argv=None):
    parser = argparse.ArgumentParser(prog="tripod report", description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path, help="the results directory")
    parser.add_argument("--out", type=Path, help="the HTML file (default: DIR/report.html)")
    parser.add_argument("--extra", type=Path, nargs="*", default=[],
                        help="more inputs: imported peers, metrics.jsonl, sweep directories, ...")
    args = parser.parse_args(argv)
    if not args.dir.is_dir():
        print(f"tripod report: {args.dir} is not a directory", file=sys.stderr)
        return 2
    out = args.out or args.dir / "report.html"
    sections = build_report(args.dir, out, args.extra)
    for section in sections:
        state = f"{len(section.figures)} figures" if section.figures else (
            "tables only" if section.tables else "skipped: " + " ".join(section.notes[:1]))
        print(f"  {section.title:40s} {state}")
    total = sum(len(s.figures) for s in sections)
    print(f"report: {out} ({total} figures, {out.stat().st_size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
