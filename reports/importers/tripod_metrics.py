"""Tripod's own training metrics (`train.metrics`, one JSON object per line) -> kind "train".

The format (reference/train/train_loop.cpp): a {"event": "start", "ranks", "peak_flops",
"model_flops_per_token", "config", ...} record, then one record per step {"step", "loss", "lr",
"grad_norm", "step_seconds", "tokens", "tokens_per_second", "mfu"[, "val_loss"]} with step counting
from 0, and other events between them ("ranks": per-rank timings; "rollback": the run went back to
an earlier step and retrains from there).

A row's step is Tripod's step + 1, so that step 1 is the first optimizer step as Megatron-LM and
torchtitan print it. loss, lr, grad_norm, step_seconds, tokens_per_second (the whole job's rate)
and mfu (already a fraction) are copied; from the start record, tokens_per_second_per_gpu is
tokens_per_second / ranks and tflops_per_gpu is model_flops_per_token * tokens_per_second / ranks
/ 1e12 (the FLOPs Tripod's mfu counts). memory_gib is the GPU's memory in use (NVML) from a GPU
run's "gpu" object, else null (a CPU run logs no memory per step). val_loss, the cumulative
tokens, a GPU run's other "gpu" readings (as "gpu.temperature_c", ...), energy and an anomalous
step's "anomaly" text and "update" ("skipped", "rolled back") go to extra.

Tolerated: "#" comment lines and blank lines, events of any kind (skipped), a run resumed into the
same file (a second start record; repeated steps keep their last record, as after a rollback),
records without some fields, a last line without a newline at its end: kept when it reads as a whole
JSON object (a record cut off by a killed run cannot: its braces do not close), else left out with a
warning (common.read_lines). A line that is not JSON or a step record whose step is not a whole
number, whose copied field is not a number, or whose other field is neither a number nor a text (nor
the "gpu" object of numbers) is an error naming the line.
"""
import json

from .common import ImportFormatError, ImportResult, finish_steps, read_lines, results_document, train_row

TOOL = "tripod"

COPIED = ("loss", "lr", "grad_norm", "step_seconds", "tokens_per_second", "mfu")


def _is_json_object(text):
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class TripodMetricsParser:
    def __init__(self, path):
        self.path = path
        self.start = None
        self.rows = []
        self.events = 0
        self.skipped = 0

    def parse(self):
        for number, line in read_lines(self.path, is_whole=_is_json_object):
            if not line.strip() or line.lstrip().startswith("#"):
                self.skipped += bool(line.strip())
                continue
            try:
                record = json.loads(line)
            except ValueError as error:
                raise ImportFormatError(self.path, number, f"not a JSON object ({error.msg}): "
                                                           f"{line[:60]!r}") from None
            if not isinstance(record, dict):
                raise ImportFormatError(self.path, number, "not a JSON object")
            if "event" in record:
                self.events += 1
                if record["event"] == "start":
                    self.start = record
                continue
            self.rows.append(self.step_row(number, record))
        if not self.rows:
            raise ImportFormatError(self.path, 0, "no step records found ({\"step\": ..., \"loss\": ...})")
        rows, replaced = finish_steps(self.rows)
        notes = [f"{self.events} event records"]
        if replaced:
            notes.append(f"{replaced} repeated steps replaced by their later record")
        document = results_document("train", TOOL, self.path, None, {"steps": rows})
        return ImportResult(document, len(rows), self.skipped, notes)

    def step_row(self, number, record):
        step = record.get("step")
        if not isinstance(step, int) or isinstance(step, bool) or step < 0:
            raise ImportFormatError(self.path, number, f"step record without a whole step number: step={step!r}")
        row = train_row(step + 1)
        for key, value in record.items():
            if key == "step":
                continue
            if key == "gpu":  # a GPU run's NVML readings (reference/train/gpu_health_log.cpp)
                self.gpu_fields(number, value, row)
                continue
            # An anomalous step's "anomaly" and "update" are texts; they were refused, so a run with
            # a skipped or rolled-back step could not be imported at all.
            if value is not None and not _is_number(value) and (key in COPIED or not isinstance(value, str)):
                raise ImportFormatError(self.path, number, f"{key}: expected a number, found {value!r}")
            if key in COPIED:
                row[key] = value
            else:
                row["extra"][key] = value
        self.derive_rates(row)
        return row

    def gpu_fields(self, number, gpu, row):
        if not isinstance(gpu, dict) or not all(v is None or _is_number(v) for v in gpu.values()):
            raise ImportFormatError(self.path, number, f"gpu: expected an object of numbers, found {gpu!r}")
        for name, value in gpu.items():
            row["extra"][f"gpu.{name}"] = value
        if _is_number(gpu.get("memory_used_mib")):
            row["memory_gib"] = gpu["memory_used_mib"] / 1024

    def derive_rates(self, row):
        if self.start is None or row["tokens_per_second"] is None:
            return
        ranks = self.start.get("ranks")
        if _is_number(ranks) and ranks > 0:
            row["tokens_per_second_per_gpu"] = row["tokens_per_second"] / ranks
            flops_per_token = self.start.get("model_flops_per_token")
            if _is_number(flops_per_token):
                row["tflops_per_gpu"] = flops_per_token * row["tokens_per_second"] / ranks / 1e12


def parse(path):
    return TripodMetricsParser(path).parse()
