"""Finds the report's inputs under a results directory (and --extra paths), recognising each file
by its content: the layout each kind is read from is described in reports/report/__init__.py."""
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from reports.importers.common import TRAIN_FIELDS

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
    notes: list = field(default_factory=list)      # inputs not (wholly) usable: on the page and stderr

    def count(self):
        return sum(1 for _ in self.inputs())

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


def is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_whole_number(value):
    return isinstance(value, int) and not isinstance(value, bool)


def imported_problem(data):
    """What keeps a tripod-results document (reports/FORMATS.md section 3) from being drawn, or None.
    Checked here so that a damaged one is a note naming its file, not a traceback in a figure."""
    kind = data.get("kind")
    if kind == "train":
        steps = data.get("steps")
        if not isinstance(steps, list):
            return f"'steps' is not a list (got {type(steps).__name__})"
        for i, row in enumerate(steps):
            if not isinstance(row, dict):
                return f"steps[{i}] is not an object"
            if not is_whole_number(row.get("step")):
                return f"steps[{i}] has no whole step number (step={row.get('step')!r})"
            extra = row.get("extra", {})
            if not isinstance(extra, dict):
                return f"steps[{i}].extra is not an object"
            drawn = [(key, row.get(key)) for key in TRAIN_FIELDS] + [("extra.val_loss", extra.get("val_loss"))]
            for key, value in drawn:
                if value is not None and not is_number(value):
                    return f"steps[{i}].{key} is not a number (got {value!r})"
        return None
    if kind == "comm":
        comm = data.get("comm")
        if not isinstance(comm, dict) or not isinstance(comm.get("results"), list):
            return "'comm' is not an object with a 'results' list"
        for i, row in enumerate(comm["results"]):
            if not isinstance(row, dict):
                return f"comm.results[{i}] is not an object"
            if not isinstance(row.get("collective"), str):
                return f"comm.results[{i}] has no collective name (collective={row.get('collective')!r})"
            if not is_whole_number(row.get("size")):
                return f"comm.results[{i}] has no whole size in bytes (size={row.get('size')!r})"
            if "busbw" not in row:
                return f"comm.results[{i}] has no busbw"
            if row["busbw"] is not None and not is_number(row["busbw"]):
                return f"comm.results[{i}].busbw is not a number (got {row['busbw']!r})"
        return None
    return f"kind {kind!r} is neither 'comm' nor 'train'"


def read_json(path, notes):
    try:
        if path.stat().st_size > MAX_JSON_BYTES:
            return None
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        notes.append(f"{path}: not readable JSON ({e})")
        return None


def json_object(line):
    """One JSONL line as a dict, or None when it is not a JSON object (cut off, garbage, a bare value)."""
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def read_metrics(path, notes):
    """Tripod's metrics.jsonl: the step records (with a loss) by step; start/ranks events dropped.
    A step recorded twice (a rollback or a resume into the same file re-runs steps) keeps its last
    record, the one the run continued from, as `tripod import` does (importers.common.finish_steps).
    A run that crashed mid-write leaves its last line cut off: that line is skipped, with a note,
    and the lines before it are used. A bad line anywhere else means the file is damaged or not a
    metrics.jsonl at all, so none of it is trusted. Each note names the file and the line."""
    try:
        lines = [(n, line) for n, line in enumerate(path.read_text(errors="replace").splitlines(), start=1)
                 if line.strip()]
    except OSError as e:
        notes.append(f"{path}: not readable ({e.strerror or e})")
        return None
    records = []
    for i, (n, line) in enumerate(lines):
        record = json_object(line)
        if record is None and 0 < i == len(lines) - 1:
            notes.append(f"{path}:{n}: the last line is cut off (the run stopped mid-write?); skipped, "
                         f"the lines before it are used")
            break
        if record is None:
            notes.append(f"{path}:{n}: not a JSON object; the file is skipped")
            return None
        if "loss" in record and "step" in record and "event" not in record:
            if not is_whole_number(record["step"]):
                notes.append(f"{path}:{n}: step {record['step']!r} is not a whole number; the file is skipped")
                return None
            records.append(record)
    if not records:
        notes.append(f"{path}: no training steps with a loss")
        return None
    last_of_step = {record["step"]: record for record in records}
    return [last_of_step[step] for step in sorted(last_of_step)]


def is_sweep_dir(path):
    return (path / "fit.json").is_file() or (path / "runs.jsonl").is_file()


def add_json(results, path, explicit=False):
    """Adds the file if it is a result; returns whether it was."""
    data = read_json(path, results.notes)
    kind = classify(data) if data is not None else None
    if kind == "imported" and (problem := imported_problem(data)):
        results.notes.append(f"{path}: not a usable tripod-results document: {problem} (reports/FORMATS.md "
                             f"section 3); left out")
        return False
    if kind:
        getattr(results, kind).append((path, data))
    elif explicit and data is not None:
        results.notes.append(f"{path}: not a result the report knows (see reports/FORMATS.md and "
                             f"reports/report/__init__.py)")
    return bool(kind)


def add_file(results, path, explicit=False):
    """Adds the file if it is a result; returns whether it was."""
    if path.name.endswith(".jsonl"):
        if path.name == "runs.jsonl":
            results.sweeps.append(path.parent)
            return True
        if path.name == "metrics.jsonl" or explicit:
            records = read_metrics(path, results.notes)
            if records:
                results.metrics.append((path, records))
            return bool(records)
    elif path.suffix == ".json":
        return add_json(results, path, explicit)
    return False


class ReportError(Exception):
    """A path named on the command line that the report cannot use (an --extra input, the page to
    write): the report stops, since a page without what was asked for would pass for a complete one."""


def add_extra(results, extra):
    if extra.is_dir():
        found, noted = results.count(), len(results.notes)
        walk(results, extra)  # found by walking, like DIR: problems inside are notes
        if results.count() == found:  # asked for, so a folder of nothing usable is an error, as a file is
            why = "".join(f"; {note}" for note in results.notes[noted:])
            raise ReportError(f"--extra {extra}: no result the report knows under it (reports/report/__init__.py)"
                              f"{why}")
        return
    if not extra.exists():
        raise ReportError(f"--extra {extra}: no such file or directory")
    noted = len(results.notes)
    if not add_file(results, extra, explicit=True):
        why = "; ".join(results.notes[noted:]) or f"{extra}: not a result the report knows (a .json or .jsonl)"
        raise ReportError(f"--extra {why}")


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
    """The Results under root and the extra paths (files or directories); raises ReportError for an
    extra path that is missing or not a usable result."""
    results = Results()
    root = Path(root)
    if not root.is_dir():
        results.notes.append(f"{root}: not a directory")
    else:
        walk(results, root)
    for extra in map(Path, extras):
        add_extra(results, extra)
    return results
