"""Megatron-LM training logs (megatron/training/training.py, training_log) -> kind "train".

The format: every log interval the last rank prints one line of "name: value |" fields,

    [2025-08-01 07:19:37] iteration      100/    5000 | consumed samples:        12800 |
    elapsed time per iteration (ms): 12936.1 | throughput per GPU (TFLOP/s/GPU): 118.7 |
    learning rate: 1.395349E-07 | global batch size:   128 | lm loss: 1.044022E+01 | loss scale: 1.0 |
    grad norm: 26.305 | number of skipped iterations:   0 | number of nan iterations:   0 |

(one line in the log), whose values are averages over the interval. A row takes step from
"iteration N/M", loss from "lm loss" ("loss" when a fork prints no "lm loss"), lr from
"learning rate", grad_norm from "grad norm", step_seconds from "elapsed time per iteration (ms)",
tflops_per_gpu from "throughput per GPU (TFLOP/s/GPU)" (on a line without it, from
Megatron-DeepSpeed's "TFLOPs", also per GPU: the iteration's FLOPs over its time and the world
size) and tokens_per_second_per_gpu from "tokens per GPU (tokens/s/GPU)" where printed (else from
Megatron-DeepSpeed's "tokens per gpu per second (tgs)", per GPU too). Every
other field (consumed samples, global batch size, loss scale, skipped and nan iterations, num
zeros, params norm, MoE and MTP losses, ...) is kept in the row's extra under its printed name.
Megatron prints no MFU and no whole-job token rate: those stay null.

Also read: the first interval's memory report "[Rank R] (after N iterations) memory (MB) | ... |
max reserved: X" (per data-parallel group; memory_gib of step N is the largest max reserved of the
ranks that printed, i.e. the peak of the most loaded GPU; "(GB)" in versions that print GB), and
"validation loss at iteration N | lm loss value: X |" (extra.val_loss of step N).

Variations tolerated: with or without the "[date time]" prefix (before 2024), launcher prefixes
("[default0]:", "0: "), colour codes, "learning rate" with 3 or 6 decimals, fields absent (no
TFLOP/s before 2024, no grad norm with some optimizers, no loss on an iteration whose loss was
skipped), any order of fields, and interleaved lines of any kind (warnings, timers, NCCL). A
line with "iteration N/M |" whose fields do not read as "name: value", whose known field does not
hold a number, or that does not end with "|" (cut off inside its last field, which might still read
as a wrong number) is an error naming the line.

A last line without a newline at its end is kept when it shows its end: an iteration line ending
with the field the log's earlier iteration lines end with (without one, a version's last field:
"number of nan iterations: N |", Megatron-LM since 2020, or "TFLOPs: X |", Megatron-DeepSpeed),
or a validation line ending with "|". Any other is left out
with a warning (common.read_lines): one cut inside a field can read as a wrong number, one cut
right after an earlier field's "|" would lack the fields after it, and a memory report ends with
its last number.
"""
import re

from .common import (ImportFormatError, ImportResult, finish_steps, number_or_text, parse_float, put_number,
                     read_lines, results_document, train_row)

TOOL = "megatron-lm"

_ITERATION = re.compile(r"\biteration\s+(\d+)\s*/\s*(\d+)\s*\|(.*)$")
_MEMORY = re.compile(r"\[Rank (\d+)\] \(after (\d+) iterations?\) memory \((MB|GB)\)(.*)$")
# "validation loss at iteration 30 |" and, since 2024, "... at iteration 30 on validation set |".
_VALIDATION = re.compile(r"validation loss at iteration\s+(\d+)(?: on validation set)?\s*\|(.*)$")

# The field an iteration line ends with: Megatron-LM's (every version since 2020), Megatron-DeepSpeed's.
LAST_FIELDS = ("number of nan iterations", "TFLOPs")

# Printed name -> (row key, divisor to the row's unit).
KNOWN_FIELDS = {
    "lm loss": ("loss", 1.0),
    "learning rate": ("lr", 1.0),
    "grad norm": ("grad_norm", 1.0),
    "elapsed time per iteration (ms)": ("step_seconds", 1000.0),
    "throughput per GPU (TFLOP/s/GPU)": ("tflops_per_gpu", 1.0),
    "tokens per GPU (tokens/s/GPU)": ("tokens_per_second_per_gpu", 1.0),
}


def split_fields(text, path, number):
    """'a: 1 | b: 2 |' -> [("a", "1"), ("b", "2")]; a field that is not "name: value" is an error."""
    fields = []
    for part in text.split("|"):
        part = part.strip()
        if not part:
            continue
        name, colon, value = part.partition(":")
        if not colon or not name.strip() or not value.strip():
            raise ImportFormatError(path, number, f"field {part!r} is not 'name: value' (a cut-off line?)")
        fields.append((name.strip(), value.strip()))
    return fields


class MegatronParser:
    def __init__(self, path):
        self.path = path
        self.last_field = None  # the field the log's iteration lines end with, once one was read
        self.rows = []
        self.memory_gib = {}  # step -> peak max reserved over the ranks that reported
        self.val_loss = {}
        self.skipped = 0

    def parse(self):
        for number, line in read_lines(self.path, is_whole=self.is_whole):
            if not line.strip():
                continue
            if match := _ITERATION.search(line):
                self.iteration_line(number, match)
            elif match := _MEMORY.search(line):
                self.memory_line(number, match)
            elif match := _VALIDATION.search(line):
                self.validation_line(number, match)
            else:
                self.skipped += 1
        if not self.rows:
            raise ImportFormatError(self.path, 0, "no Megatron-LM training lines found "
                                                  "('iteration N/ M | ... | lm loss: ... |')")
        rows, replaced = finish_steps(self.rows)
        for row in rows:
            if row["step"] in self.memory_gib:
                row["memory_gib"] = self.memory_gib[row["step"]]
            if row["step"] in self.val_loss:
                row.setdefault("extra", {})["val_loss"] = self.val_loss[row["step"]]
        notes = [f"{replaced} repeated steps replaced by their later printing"] if replaced else []
        document = results_document("train", TOOL, self.path, None, {"steps": rows})
        return ImportResult(document, len(rows), self.skipped, notes)

    def is_whole(self, text):
        """Whether a last line without a newline is complete (see the module's docstring): it ends
        with the field the log's earlier iteration lines end with, or, without one, with a version's
        last field (a Megatron-DeepSpeed line cut after its nan count, before its TFLOPs, read whole)."""
        line = text.rstrip()
        if not line.endswith("|"):
            return False
        if _VALIDATION.search(line):
            return True
        last_field = line[:-1].rsplit("|", 1)[-1].partition(":")[0].strip()
        expected = (self.last_field,) if self.last_field else LAST_FIELDS
        return _ITERATION.search(line) is not None and last_field in expected

    def iteration_line(self, number, match):
        row = train_row(int(match.group(1)))
        row["extra"]["train_iters"] = int(match.group(2))
        fields = split_fields(match.group(3), self.path, number)
        if fields:
            self.last_field = fields[-1][0]
        # Megatron-LM ends every field with " |" (each version's training_log), so a line that does not
        # end so was cut inside its last field, whose value can still read as a number ("grad norm: 4.5"
        # of 4.567) and would be imported wrong.
        if not match.group(3).rstrip().endswith("|"):
            raise ImportFormatError(self.path, number, "the iteration line does not end with '|' as Megatron-LM "
                                                       "ends every field: cut off inside its last field?")
        names = {name for name, _ in fields}
        for name, value in fields:
            known = KNOWN_FIELDS.get(name)
            if name == "loss" and "lm loss" not in names:
                known = ("loss", 1.0)
            # Megatron-DeepSpeed's TFLOPs are per GPU (its throughput_calculator divides by the world
            # size); where Megatron-LM's own figure is printed too, that one is read.
            if name == "TFLOPs" and "throughput per GPU (TFLOP/s/GPU)" not in names:
                known = ("tflops_per_gpu", 1.0)
            if name == "tokens per gpu per second (tgs)" and "tokens per GPU (tokens/s/GPU)" not in names:
                known = ("tokens_per_second_per_gpu", 1.0)
            if known is None:
                row["extra"][name] = number_or_text(value)
                continue
            key, divisor = known
            put_number(row, key, parse_float(value, self.path, number, name) / divisor, value)
        self.rows.append(row)

    def memory_line(self, number, match):
        step, unit = int(match.group(2)), match.group(3)
        fields = dict(split_fields(match.group(4), self.path, number))
        if "max reserved" not in fields:
            raise ImportFormatError(self.path, number, "memory report without 'max reserved'")
        value = parse_float(fields["max reserved"], self.path, number, "max reserved")
        gib = value / 1024.0 if unit == "MB" else value  # Megatron's MB are MiB (bytes / 2**20)
        self.memory_gib[step] = max(gib, self.memory_gib.get(step, 0.0))

    def validation_line(self, number, match):
        fields = dict(split_fields(match.group(2), self.path, number))
        value = fields.get("lm loss value", fields.get("loss value"))
        if value is None:
            self.skipped += 1
            return
        self.val_loss[int(match.group(1))] = parse_float(value, self.path, number, "lm loss value")


def parse(path):
    return MegatronParser(path).parse()
