"""Finds the report's inputs under a results directory (and --extra paths), recognising each file
by its content: the layout each kind is read from is described in reports/report/__init__.py."""
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

# JSON files bigger than this are not results (checkpoint manifests and the like stay small too).
MAX_JSON_BYTES = 64 << 20
# Folders never holding results: checkpoints, caches, the plots of a bench or sweep (PNG only).
SKIPPED_DIRS = {"ckpt", "checkpoints", "__pycache__", ".git", "node_modules"}


@dataclass
class Results:
    bench: list = field(default_factory=list)      # [(path, bench.json)]
    conform: list = field(default_factory=list)    # [(path, conform json)]
    sweeps: list = field(default_factory=list)     # [sweep directory]
    metrics: list = field(default_factory=list)    # [(path, [metrics.jsonl records])]
    imported: list = field(default_factory=list)   # [(path, tripod-results json)]
    golden: list = field(default_factory=list)     # [(path, golden check json)]
    timelines: list = field(default_factory=list)  # [(path, timeline json)]
    notes: list = field(default_factory=list)      # inputs given but not usable, shown on the page

    def inputs(self):
        """(kind, path) of everything found, for the page's list of inputs."""
        for kind in ("bench", "conform", "metrics", "imported", "golden", "timelines"):
            for path, _ in getattr(self, kind):
                yield kind, path
        for path in self.sweeps:
            yield "sweep", path


def classify(data):
    """Which kind of result a parsed JSON document is, or None."""
    if not isinstance(data, dict):
        return None
    if data.get("schema") == "tripod-results":
        return "imported"
    if "verdict" in data and isinstance(data.get("steps"), list):
        return "golden"
    layouts = data.get("layouts")
    if "operator_checks" in data or (isinstance(layouts, list) and layouts and "loss_rel_error" in layouts[0]):
        return "conform"
    if "system" in data and any(k in data for k in ("comm", "gemm", "layouts", "pipeline", "kernels")):
        return "bench"
    ranks = data.get("ranks")
    if "schedule" in data and isinstance(ranks, list) and all(isinstance(r, list) for r in ranks):
        return "timelines"
    return None


def read_json(path, notes):
    try:
        if path.stat().st_size > MAX_JSON_BYTES:
            return None
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        notes.append(f"{path}: not readable JSON ({e})")
        return None


def read_metrics(path, notes):
    """Tripod's metrics.jsonl: the step records (with a loss) in order; start/ranks events dropped."""
    records = []
    try:
        for line in path.read_text().splitlines():
            if line.strip():
                record = json.loads(line)
                if "loss" in record and "step" in record and "event" not in record:
                    records.append(record)
    except (OSError, ValueError) as e:
        notes.append(f"{path}: not readable JSON lines ({e})")
        return None
    if not records:
        notes.append(f"{path}: no training steps with a loss")
        return None
    return records


def is_sweep_dir(path):
    return (path / "fit.json").is_file() or (path / "runs.jsonl").is_file()


def add_json(results, path, explicit=False):
    data = read_json(path, results.notes)
    kind = classify(data) if data is not None else None
    if kind:
        getattr(results, kind).append((path, data))
    elif explicit and data is not None:
        results.notes.append(f"{path}: not a result the report knows (see reports/FORMATS.md and "
                             f"reports/report/__init__.py)")


def add_file(results, path, explicit=False):
    if path.name.endswith(".jsonl"):
        if path.name == "runs.jsonl":
            results.sweeps.append(path.parent)
        elif path.name == "metrics.jsonl" or explicit:
            records = read_metrics(path, results.notes)
            if records:
                results.metrics.append((path, records))
    elif path.suffix == ".json":
        add_json(results, path, explicit)


def walk(results, root):
    """Adds everything under root. A sweep directory is taken whole (its run folders are not
    walked); the JSON files beside a bench.json are that bench's parts and are skipped."""
    if is_sweep_dir(root):
        results.sweeps.append(root)
        return
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        keep = []
        for name in sorted(dirnames):
            if name in SKIPPED_DIRS or name.startswith("."):
                continue
            if is_sweep_dir(here / name):
                results.sweeps.append(here / name)
            else:
                keep.append(name)
        dirnames[:] = keep
        names = sorted(filenames)
        if "bench.json" in names:
            data = read_json(here / "bench.json", results.notes)
            if classify(data) == "bench":
                results.bench.append((here / "bench.json", data))
                names = [n for n in names if not n.endswith(".json")]
        for name in names:
            add_file(results, here / name)


def collect(root, extras=()):
    """The Results under root and the extra paths (files or directories)."""
    results = Results()
    root = Path(root)
    if not root.is_dir():
        results.notes.append(f"{root}: not a directory")
    else:
        walk(results, root)
    for extra in map(Path, extras):
        if extra.is_dir():
            walk(results, extra)
        elif extra.is_file():
            add_file(results, extra, explicit=True)
        else:
            results.notes.append(f"{extra}: no such file or directory (--extra)")
    return results
