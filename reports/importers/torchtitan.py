"""torchtitan training logs (torchtitan/components/metrics.py; train.py before 2025) -> kind "train".

The format: every log_freq steps (and at step 1) the metrics rank logs one line of
"name: value" pairs separated by two spaces, each pair in its own colour,

    [rank0]:[titan] 2025-06-20 19:13:25,465 - root - INFO - step: 10  loss:  9.3421  grad_norm:  1.2345
    memory: 48.91GiB(51.52%)  tps: 21,734  tflops: 1,012.35  mfu: 10.24%

(one line in the log). A row takes step, loss, grad_norm, memory_gib (the peak reserved memory of
that rank since the last line), tokens_per_second_per_gpu from "tps" (tokens per second per
device: torchtitan divides by the non-data-parallel degree), tflops_per_gpu from "tflops" and mfu
from "mfu" (printed in percent, stored as a fraction). The memory percentage and any other pair go
to the row's extra. torchtitan prints neither the learning rate nor the step time: those stay null.
"validate step: N  loss: X" lines give extra.val_loss of step N.

Variations tolerated: colour codes or none (--metrics.disable_color_printing), the "[titan]"
logger prefix or none (before 2025), launcher prefixes ("[rank0]:", "0: "), "wps" for "tps" (2024),
no tflops or grad_norm (2024), thousands separators, extra pairs, interleaved lines of any kind.
When several ranks log (LOG_RANK=0,1,...), only the first rank that logged a step line is read.
A step line whose step is not a whole number or whose known value does not parse (a cut-off
"memory: 40.1") is an error naming the line. A last line without a newline at its end is kept when
it is a step line ending with "mfu: X%", the pair every version prints last; any other is left out
with a warning (common.read_lines), since a cut one can read as a wrong number ("tps: 22,1" of
22,134 reads as 221).
"""
import re

from .common import (ImportFormatError, ImportResult, finish_steps, launcher_rank, number_or_text, parse_float,
                     parse_int, put_number, read_lines, results_document, strip_launcher_prefix, train_row)

TOOL = "torchtitan"

# The message starts the line or follows the logger's " - INFO - "; that keeps "... at step: 5" in
# some other message from being read as a metrics line.
_STEP_LINE = re.compile(r"(?:^|\s-\s)\s*(validate\s+)?step:\s*(.*)$", re.IGNORECASE)
_PAIR = re.compile(r"([A-Za-z_][\w()/%]*):\s*(\S+)")
_MEMORY = re.compile(r"^([0-9.]+)GiB(?:\(([0-9.]+)%\))?$")
_VERSION = re.compile(r"torchtitan version:\s*(\S+)")
_ENDS_WITH_MFU = re.compile(r"\bmfu:\s*[0-9.,]+%$")

_NO_RANK_YET = object()

_PLAIN_FIELDS = {"loss": "loss", "grad_norm": "grad_norm", "tps": "tokens_per_second_per_gpu",
                 "wps": "tokens_per_second_per_gpu", "tflops": "tflops_per_gpu"}


def is_whole(text):
    """Whether a last line without a newline is complete (see the module's docstring)."""
    match = _STEP_LINE.search(strip_launcher_prefix(text))
    return match is not None and not match.group(1) and _ENDS_WITH_MFU.search(text.rstrip()) is not None


class TorchtitanParser:
    def __init__(self, path):
        self.path = path
        self.rows = []
        self.val_loss = {}
        self.version = None
        self.logging_rank = _NO_RANK_YET  # the launcher rank of the first step line (None: no prefix)
        self.other_rank_lines = 0
        self.skipped = 0

    def parse(self):
        for number, raw in read_lines(self.path, is_whole=is_whole):
            if not raw.strip():
                continue
            line = strip_launcher_prefix(raw)
            match = _STEP_LINE.search(line)
            if match is None:
                if version := _VERSION.search(line):
                    self.version = version.group(1)
                self.skipped += 1
                continue
            rank = launcher_rank(raw)
            if self.logging_rank is _NO_RANK_YET:
                self.logging_rank = rank
            if rank != self.logging_rank:
                self.other_rank_lines += 1
                continue
            pairs = [("step", match.group(2).split()[0] if match.group(2).split() else "")]
            pairs += _PAIR.findall(match.group(2))
            if match.group(1):
                self.validation_line(number, pairs)
            else:
                self.rows.append(self.step_row(number, pairs))
        if not self.rows:
            raise ImportFormatError(self.path, 0, "no torchtitan step lines found ('step: N  loss: X  ...')")
        rows, replaced = finish_steps(self.rows)
        for row in rows:
            if row["step"] in self.val_loss:
                row.setdefault("extra", {})["val_loss"] = self.val_loss[row["step"]]
        notes = []
        if replaced:
            notes.append(f"{replaced} repeated steps replaced by their later printing")
        if self.other_rank_lines:
            notes.append(f"{self.other_rank_lines} step lines of other ranks ignored")
        document = results_document("train", TOOL, self.path, self.version, {"steps": rows})
        return ImportResult(document, len(rows), self.skipped + self.other_rank_lines, notes)

    def step_number(self, number, pairs):
        return parse_int(pairs[0][1], self.path, number, "step")

    def step_row(self, number, pairs):
        row = train_row(self.step_number(number, pairs))
        for name, value in pairs[1:]:
            key = name.lower()
            if key in _PLAIN_FIELDS:
                put_number(row, _PLAIN_FIELDS[key], parse_float(value, self.path, number, name), value)
            elif key == "mfu":
                percent = parse_float(value.rstrip("%"), self.path, number, "mfu (percent)")
                # Rounded to the digits printed, so that "14.50%" is 0.145 and not 0.14500000000000002.
                put_number(row, "mfu", round(percent / 100.0, 12), value)
            elif key == "memory":
                memory = _MEMORY.match(value)
                if not memory:
                    raise ImportFormatError(self.path, number, f"memory: expected like '48.91GiB(51.52%)', "
                                                               f"found {value!r}")
                row["memory_gib"] = float(memory.group(1))
                if memory.group(2) is not None:
                    row["extra"]["memory_percent"] = float(memory.group(2))
            else:
                row["extra"][name] = number_or_text(value)
        return row

    def validation_line(self, number, pairs):
        step = self.step_number(number, pairs)
        for name, value in pairs[1:]:
            if name.lower() == "loss":
                self.val_loss[step] = parse_float(value, self.path, number, "validation loss")


def parse(path):
    return TorchtitanParser(path).parse()
