"""tripod report DIR [--out FILE.html] [--extra PATH ...]: one self-contained HTML page from a
results directory (what it reads: reports/report/__init__.py). Prints the page's path and each
section's figure count, and on stderr a warning for every input found but not usable (also noted
on the page); exits non-zero, with one line naming the path, when the page cannot be written or
an --extra path is missing or not a usable result."""
import argparse
import sys
from pathlib import Path

from reports.output_file import write_text_replacing
from reports.report.collect import ReportError, collect
from reports.report.figures_bench import bench_section, timelines_section
from reports.report.figures_conform import conform_section
from reports.report.figures_golden import golden_section
from reports.report.figures_scale import scale_section
from reports.report.figures_train import train_section
from reports.report.page import render_page

# Page order: what a new node's user reads first (bench, conformance), then training and scaling.
SECTIONS = (bench_section, conform_section, timelines_section, train_section, golden_section, scale_section)


def build_report(root, out, extras=()):
    """Writes the page; returns the sections (with their figures) and the Results (with their
    notes) for the caller to inspect. Raises ReportError naming the path at fault."""
    root = Path(root)
    results = collect(root, extras)
    sections = [make(results, root) for make in SECTIONS]
    write_page(out, render_page(sections, results, root))
    return sections, results


def write_page(out, page):
    try:
        write_text_replacing(out, page)
    except OSError as e:
        raise ReportError(f"cannot write {out}: {e.strerror or e}") from e


def error(message):
    print(f"tripod report: {message}", file=sys.stderr)
    return 1


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
    if out.is_dir():  # before the work, and clearer than the IsADirectoryError of the write
        return error(f"--out {out} is a directory: give the HTML file to write")
    if not out.parent.is_dir():  # as for every --out/--json of tripod (it made the folder)
        return error(f"--out {out}: the folder {out.parent} does not exist")
    try:
        sections, results = build_report(args.dir, out, args.extra)
    except ReportError as e:
        return error(e)
    # The page shows these notes too; stderr is where someone running the command looks.
    for note in results.notes:
        print(f"warning: {note}", file=sys.stderr)
    for section in sections:
        state = f"{len(section.figures)} figures" if section.figures else (
            "tables only" if section.tables else "skipped: " + " ".join(section.notes[:1]))
        print(f"  {section.title:40s} {state}")
    total = sum(len(s.figures) for s in sections)
    print(f"report: {out} ({total} figures, {out.stat().st_size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
