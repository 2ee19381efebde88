#!/usr/bin/python3
"""A Gantt chart of one pipeline step, from the timeline JSON that `tripod bench pipeline --trace`
or `tripod train --pp N --pipeline-trace` writes:

  one row per pipeline rank; forwards (blue) and backwards (orange) as bars, shaded and labelled
  by micro-batch (and chunk, when virtual_stages > 1); sends and receives as thin marks under
  the bars; the title gives the schedule, p, m, v and the measured vs theoretical bubble.

Usage: /usr/bin/python3 reports/plot_pipeline.py TIMELINE.json --out timeline.png
plot_bench.py reuses draw_timeline(timeline, ax).
"""
import argparse
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

COMPUTE = {"F": "Blues", "B": "Oranges"}
COMMS = {"send-act": "tab:green", "recv-act": "tab:olive", "send-grad": "tab:red", "recv-grad": "tab:purple"}


def title(timeline):
    return (f"{timeline.get('schedule', '?')}: p={timeline.get('stages', '?')}, m={timeline.get('microbatches', '?')}, "
            f"v={timeline.get('virtual_stages', 1)}; bubble {timeline.get('measured_bubble', float('nan')):.3f} "
            f"{'measured' if timeline.get('time_unit', 's') == 's' else 'simulated'}, "
            f"{timeline.get('theoretical_bubble', float('nan')):.3f} theory")


def draw_timeline(timeline, ax):
    """Draw timeline["ranks"] on ax (measured seconds shown in ms, or the simulator's units as given by
    timeline["time_unit"]); returns False when there is nothing to draw."""
    unit = timeline.get("time_unit", "s")
    scale = 1e3 if unit == "s" else 1.0
    ranks = timeline.get("ranks", [])
    if not any(ranks):
        return False
    m = max(1, timeline.get("microbatches") or 1 + max(e["microbatch"] for r in ranks for e in r))
    chunks = timeline.get("virtual_stages", 1) > 1
    span = max(e["end"] for r in ranks for e in r) * scale
    used = set()
    for row, events in enumerate(ranks):
        for e in events:
            start, width = scale * e["start"], scale * (e["end"] - e["start"])
            action = e["action"]
            if action in COMPUTE:
                shade = (e["microbatch"] % m) / max(1, m - 1)
                color = plt.get_cmap(COMPUTE[action])(0.35 + 0.55 * shade)
                ax.broken_barh([(start, width)], (row - 0.35, 0.6), facecolors=color, edgecolor="black", lw=0.4)
                label = f"{e['microbatch']}" + (f"c{e['chunk']}" if chunks else "")
                if width > 0.025 * span:
                    ax.text(start + width / 2, row - 0.05, label, ha="center", va="center", fontsize=7,
                            color="white" if shade > 0.5 else "black")
                used.add(action)
            elif action in COMMS:
                ax.broken_barh([(start, max(width, 0.002 * span))], (row + 0.3, 0.1), facecolors=COMMS[action])
                used.add(action)
    ax.set_yticks(range(len(ranks)), [f"rank {r}" for r in range(len(ranks))])
    ax.set_ylim(len(ranks) - 0.4, -0.6)
    ax.set_xlim(0, span * 1.01)
    ax.set_xlabel("time (ms)" if unit == "s" else f"time ({unit})")
    ax.set_title(title(timeline), fontsize=10)
    ax.grid(True, axis="x", alpha=0.3)
    handles = [Patch(color=plt.get_cmap(COMPUTE[a])(0.6), label={"F": "forward", "B": "backward"}[a])
               for a in COMPUTE if a in used]
    handles += [Patch(color=c, label=a) for a, c in COMMS.items() if a in used]
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return True


def figure_size(timeline):
    return (10, 0.6 * len(timeline.get("ranks", [])) + 1.6)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("timeline_json", type=Path)
    parser.add_argument("--out", type=Path, required=True, help="the PNG to write")
    args = parser.parse_args(argv)
    timeline = json.loads(args.timeline_json.read_text())
    fig, ax = plt.subplots(figsize=figure_size(timeline))
    if not draw_timeline(timeline, ax):
        print(f"plot_pipeline: {args.timeline_json} has no events", file=sys.stderr)
        return 1
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=120)
    plt.close(fig)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
