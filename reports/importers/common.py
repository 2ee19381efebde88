"""What every importer shares: the error that names the file and line, line cleaning (colour codes,
carriage returns, launcher prefixes), number parsing that says what it expected, and the
"tripod-results" document of reports/FORMATS.md section 3.

The importers read logs that were never meant to be parsed, so they are lenient about lines they do
not recognise (counted as skipped) and strict about lines they do: a recognised line that does not
parse is an ImportFormatError, never a silently wrong number.
"""
import json
import math
import re
import sys
from dataclasses import dataclass, field

from reports.output_file import write_text_replacing

SCHEMA = "tripod-results"
SCHEMA_VERSION = 1

# The keys of a "train" row (FORMATS.md section 3). tokens_per_second is the whole job's rate;
# tokens_per_second_per_gpu is what torchtitan and Megatron print, kept apart so that the two
# are never compared as if they were the same quantity.
TRAIN_FIELDS = ("loss", "lr", "grad_norm", "step_seconds", "tokens_per_second", "tokens_per_second_per_gpu",
                "tflops_per_gpu", "mfu", "memory_gib")

# CSI sequences (colours, cursor moves: ESC [ ... final byte) and OSC sequences (ESC ] ... BEL).
_ANSI_ESCAPE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")

# Prefixes that launchers put in front of every line of a rank's output: Open MPI's --tag-output
# "[1,0]<stdout>:", torchrun's "[rank0]:" or "[default0]:", and srun --label's "0: ". They are
# removed so that a tool's own line format starts where it would without a launcher.
_LAUNCHER_PREFIX = re.compile(r"^(?:\[\d+,\d+\]<std(?:out|err)>:|\[(?:rank|default)\d+\]:|\d+: )")
_RANK_IN_PREFIX = re.compile(r"^(?:\[\d+,(\d+)\]<std(?:out|err)>:|\[(?:rank|default)(\d+)\]:|(\d+): )")


class ImportFormatError(Exception):
    """A line an importer recognised but could not read; str() is "FILE:LINE: message"."""

    def __init__(self, file, line, message):
        super().__init__(message)
        self.file = str(file)
        self.line = line
        self.message = message

    def __str__(self):
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.message}"


@dataclass
class ImportResult:
    """A parsed file: the JSON document, and counts for the one-line summary."""
    document: dict
    imported: int  # rows (comm) or steps (train)
    skipped_lines: int
    notes: list = field(default_factory=list)  # short remarks for the summary line


def strip_ansi(text):
    return _ANSI_ESCAPE.sub("", text)


def launcher_rank(text):
    """The rank a launcher prefix names ("[rank1]:" -> 1), or None when the line has no prefix."""
    match = _RANK_IN_PREFIX.match(text)
    if not match:
        return None
    return int(next(group for group in match.groups() if group is not None))


def strip_launcher_prefix(text):
    return _LAUNCHER_PREFIX.sub("", text, count=1)


def read_lines(path, is_whole=None):
    """(line number, text) for each line, colour codes and line endings removed. Undecodable bytes
    become U+FFFD rather than stopping the import: logs of long runs do contain stray bytes.

    A last line without a newline at its end may be cut off (a log still being written, or a
    truncated copy): "elapsed time per iteration (ms): 17" of a line cut inside "1786.4" reads as a
    number, only the wrong one. It is yielded only when is_whole(text) says its format shows it
    complete (text as yielded but with its trailing whitespace, which some formats print last);
    otherwise, or without is_whole, it is left out with a warning on stderr naming it. It is judged
    after the lines before it were read, so is_whole may use what they set up (a table's columns)."""
    try:
        with open(path, encoding="utf-8", errors="replace", newline="") as handle:
            text = handle.read()
    except OSError as error:
        raise ImportFormatError(path, 0, f"cannot read the file: {error.strerror or error}") from None
    lines = text.split("\n")
    last = lines.pop()  # after the last newline: empty, or a line without a newline
    for number, raw in enumerate(lines, start=1):
        yield number, _clean(raw).rstrip()
    if strip_ansi(last).strip():
        if is_whole is not None and is_whole(_clean(last)):
            yield len(lines) + 1, _clean(last).rstrip()
        else:
            print(f"{path}:{len(lines) + 1}: cut off: no newline at its end; left out", file=sys.stderr)


def _clean(raw):
    line = strip_ansi(raw.rstrip("\r"))
    # A progress bar rewrites its line with "\r"; only what was last on the line matters.
    if "\r" in line:
        line = line.rsplit("\r", 1)[-1]
    return line


def parse_float(text, file, line, what):
    """A number as those tools print it: "1.5E-04", "1,234", "nan". Raises naming the field."""
    cleaned = text.strip().replace(",", "")
    try:
        return float(cleaned)
    except ValueError:
        raise ImportFormatError(file, line, f"{what}: expected a number, found {text.strip()!r}") from None


def parse_non_negative(text, file, line, what):
    """A time or a bandwidth: NaN is kept (the tools print it for an unmeasured cell), below 0 is not a
    measurement and stops the import naming the line."""
    value = parse_float(text, file, line, what)
    if value < 0:
        raise ImportFormatError(file, line, f"{what}: {text.strip()} is negative (a time or rate cannot be)")
    return value


def parse_int(text, file, line, what):
    # Digits are read as an int, exactly: through a float, 99999999999999999999 became
    # 99999999999999991433150857216 (a size no longer matching its count). "1e3" still reads.
    cleaned = text.strip().replace(",", "")
    if cleaned.lstrip("+-").isdigit():
        return int(cleaned)
    value = parse_float(text, file, line, what)
    if not math.isfinite(value) or value != int(value):
        raise ImportFormatError(file, line, f"{what}: expected a whole number, found {text.strip()!r}")
    return int(value)


def number_or_text(token):
    """An unknown field's value as printed: an int or float when it reads as one, else the text."""
    cleaned = token.strip().replace(",", "")
    for kind in (int, float):
        try:
            return kind(cleaned)
        except ValueError:
            pass
    return token.strip()


def put_number(row, key, value, raw):
    """Stores a parsed number; a non-finite one ("nan", "inf") also keeps its text in extra, since
    the JSON can only hold it as null."""
    row[key] = value
    if not math.isfinite(value):
        row["extra"][key] = raw.strip()


def train_row(step):
    """A train row with every field null: the parsers fill in what the tool printed."""
    row = {"step": step}
    row.update({name: None for name in TRAIN_FIELDS})
    row["extra"] = {}
    return row


def finish_steps(rows):
    """Rows by step. A step printed twice (a resumed or rolled-back run repeats steps) keeps its last
    printing, which is the one the run continued from. Returns (rows, how many were replaced)."""
    by_step = {}
    for row in rows:
        by_step[row["step"]] = row
    for row in by_step.values():
        if not row["extra"]:
            del row["extra"]
    return [by_step[step] for step in sorted(by_step)], len(rows) - len(by_step)


def results_document(kind, tool, file, version, body):
    document = {"schema": SCHEMA, "version": SCHEMA_VERSION, "kind": kind,
                "source": {"tool": tool, "file": str(file), "version": version}}
    document.update(body)
    return document


def _finite_or_none(value):
    """JSON has no NaN or infinity; a tool's "nan" loss becomes null (the raw text stays in extra)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite_or_none(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_finite_or_none(item) for item in value]
    return value


def write_document(document, out):
    write_text_replacing(out, json.dumps(_finite_or_none(document), indent=1, allow_nan=False) + "\n")
