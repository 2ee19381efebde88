"""nccl-tests output (NVIDIA/nccl-tests: all_reduce_perf, all_gather_perf, ...) -> kind "comm".

The format: a header of "#" lines (the version, "# Collective test starting: all_reduce_perf", the
run's settings, one "#  Rank  0 Group  0 Pid ... device  0 [...] NAME" line per device), the column
header

    #       size         count      type   redop    root     time   algbw   busbw #wrong     time ...
    #        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us) ...

then one row per message size holding the out-of-place and then the in-place measurement, and a
footer "# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 12.3 ", "# Collective test
concluded: all_reduce_perf". Each printed row becomes two rows of the output (in_place false, then
true) with the keys of `tripod bench comm`'s rows in bench.json.

Columns are read by their names in the column header, never by position, so variations of the
table all parse, and a column this module does not know is kept in the row's "extra" under its
header name rather than read as another:
- redop and root missing (2019-2022, before the resync with NCCL 2.13; broadcast then printed
  root where the others print redop), "bytes" and "N" for size and count (2017), "cputime" for
  time (-C);
- "#wrong" as "N/A" when the data check is off (-c 0, and always for alltoall in place): wrong is
  null; before 2022 the last column was "error" (2017: "res"), the largest deviation rather than a
  count: it goes to extra.max_error and wrong is null; rccl-tests (AMD's fork, 2019 until its
  2023-24 resync with nccl-tests) prints a "*" right after a deviation past the check's threshold
  ("2e-02*"): extra.max_error_over_threshold is then true;
- per-iteration columns (-I 1: i_min i_max i_p99 i_cv%) and a trailing timestamp (two tokens,
  date and time), kept in extra;
- times in milliseconds (2017, or a "(ms)" unit) converted to microseconds; numbers printed in
  exponent form ("1.2e+05") when too wide for their column;
- rows with only the out-of-place half (2017 builds that skipped the in-place test);
- several tests in one file (outputs appended by a script): "# Collective test starting" starts a
  new one; without that line (before mid-2025) the collective comes from --collective or the file name
  (--collective spelled as a file name may be, "allreduce" or "all_reduce_perf"; an unknown name is
  refused, listing the known ones).
Lines that are neither a "#" line nor a row (NCCL INFO/WARN from NCCL_DEBUG, launcher chatter) are
skipped; a line that starts like a row (a number) but does not fit the column header is an error.

A last line without a newline at its end is kept when it shows its end: a footer whose value is
followed by a space or a word, as nccl-tests prints them ("0 OK", "40.4183 " and a verdict or
nothing); any other "#" line (nothing read from one matters once no row follows it); a row with
all its columns whose last is the data check's holding a value nothing longer starts with ("0",
"0e+00", "N/A"). Any other is left out with a warning (common.read_lines): a row cut inside its
last column still has all its columns ("12" of 1234 wrong elements, "2e-0" of "2e-07" reads as 2).
"""
import os
import re
from dataclasses import dataclass

from .common import (ImportFormatError, ImportResult, number_or_text, parse_float, parse_int, parse_non_negative,
                     read_lines, results_document, strip_launcher_prefix)

TOOL = "nccl-tests"

# Column names (lower case) of the part before the measurements, and the output key of each.
PREFIX_COLUMNS = {"size": "size", "bytes": "size", "count": "count", "n": "count", "type": "type",
                  "redop": "redop", "op": "redop", "root": "root"}
TIME_COLUMNS = ("time", "cputime")

# File-name spellings of each collective, longest first so that "reduce" does not claim
# "all_reduce" or "reduce_scatter" (nor "gather" "all_gather", nor "scatter" "reduce_scatter").
_FILE_NAME_COLLECTIVES = [
    (re.compile(r"reduce_?scatter"), "reduce_scatter"),
    (re.compile(r"all_?reduce"), "all_reduce"),
    (re.compile(r"all_?gather"), "all_gather"),
    (re.compile(r"all_?to_?allv"), "alltoallv"),
    (re.compile(r"all_?to_?all"), "alltoall"),
    (re.compile(r"send_?recv"), "sendrecv"),
    (re.compile(r"broadcast|bcast"), "broadcast"),
    (re.compile(r"reduce"), "reduce"),
    (re.compile(r"gather"), "gather"),
    (re.compile(r"scatter"), "scatter"),
    (re.compile(r"hypercube"), "hypercube"),
]
COLLECTIVES = [collective for _, collective in _FILE_NAME_COLLECTIVES]

_VERSION = re.compile(r"^#\s*nccl-tests version\s+(\S+)")
_TEST_STARTING = re.compile(r"^#\s*Collective test starting:\s*(\S+)")
_RANK_LINE = re.compile(r"^#\s+Rank\s+\d+(?:\s+Group\s+(\d+))?")
_OUT_OF_BOUNDS = re.compile(r"^#?\s*Out of bounds values\s*:\s*(.*)$")
_AVG_BUSBW = re.compile(r"^#?\s*Avg bus bandwidth\s*:\s*(.*)$")
_ROW_START = re.compile(r"^\s*\d+\s")
_CHECK_COLUMNS = ("#wrong", "error", "res")


def collective_of_program(program):
    """"./build/all_reduce_perf_mpi" -> "all_reduce": the program name less its "_perf" suffix."""
    name = os.path.basename(program)
    return re.sub(r"_perf.*$", "", name)


def collective_of_option(name):
    """--collective as the file name would spell it ("allreduce", "all_reduce_perf", "bcast") -> its
    name in the rows ("all_reduce"); anything else is a ValueError listing the names, since a
    collective of its own ("banana", or "allreduce" kept as printed) would get a panel of its own
    beside the output's real one."""
    spelled = collective_of_program(name.strip().lower().replace("-", "_"))
    for pattern, collective in _FILE_NAME_COLLECTIVES:
        if pattern.fullmatch(spelled):
            return collective
    raise ValueError(f"--collective {name}: not a collective nccl-tests measures; one of: {', '.join(COLLECTIVES)}")


def collective_of_file_name(path):
    name = os.path.basename(str(path)).lower()
    for pattern, collective in _FILE_NAME_COLLECTIVES:
        if pattern.search(name):
            return collective
    return None


@dataclass
class ColumnHeader:
    """The table layout one column header line describes."""
    names: list        # every column name, as printed
    prefix: list       # size, count, type, ... (before the first time column)
    half: list         # one measurement: time algbw busbw #wrong [i_min ...]
    halves: int        # 2 (out-of-place, in-place) or 1
    trailing: list     # after the measurements (timestamp)
    time_scale: float  # to microseconds

    @classmethod
    def parse(cls, printed):
        names, lower = list(printed), [name.lower() for name in printed]
        trailing = []
        if lower[-1] == "timestamp":
            trailing = [names.pop()]
            lower.pop()
        times = [i for i, name in enumerate(lower) if name in TIME_COLUMNS]
        prefix = names[:times[0]]
        if len(times) >= 2:
            half = names[times[0]:times[1]]
            second = lower[times[1]:times[1] + len(half)]
            trailing = names[times[1] + len(half):] + trailing
            halves = 2 if second == [name.lower() for name in half] else None
        else:
            half, halves = names[times[0]:], 1
        # The 2017 format printed the time in milliseconds under a plain "time" with a "res" column.
        time_scale = 1000.0 if "res" in lower else 1.0
        return cls(list(printed), prefix, half, halves, trailing, time_scale)

    def describe(self):
        return " ".join(self.prefix + self.half * (self.halves or 1) + self.trailing)


def is_column_header(tokens):
    lower = [token.lower() for token in tokens]
    return bool(lower) and lower[0] in ("size", "bytes") and any(name in TIME_COLUMNS for name in lower)


class NcclTestsParser:
    def __init__(self, path, collective=None):
        self.path = path
        self.collective_option = None if collective is None else collective_of_option(collective)
        self.collective_said = None  # from "# Collective test starting"
        self.version = None
        self.header = None
        self.pending_ranks = []  # group numbers of the "#  Rank" lines since the last column header
        self.group_size = None
        self.rows = []
        self.summaries = []
        self.summary = None
        self.skipped = 0
        self.printed_rows = 0

    def error(self, line, message):
        return ImportFormatError(self.path, line, message)

    def parse(self):
        for number, raw in read_lines(self.path, is_whole=self.is_whole):
            line = strip_launcher_prefix(raw)
            if not line.strip():
                continue
            if line.lstrip().startswith("#"):
                self.hash_line(number, line.lstrip())
            elif _ROW_START.match(line):
                self.row_line(number, line)
            elif not self.footer_line(number, line):
                self.skipped += 1
        if not self.rows:
            raise self.error(0, "no nccl-tests result rows found (expected a '#  size  count ...' column header "
                                "followed by rows)")
        collectives = sorted({row["collective"] for row in self.rows})
        document = results_document("comm", TOOL, self.path, self.version,
                                    {"comm": {"results": self.rows, "summaries": self.summaries}})
        notes = [f"{self.printed_rows} sizes x in/out-of-place", "collectives: " + ", ".join(collectives)]
        return ImportResult(document, len(self.rows), self.skipped, notes)

    def is_whole(self, text):
        """Whether a last line without a newline is complete (see the module's docstring)."""
        line = strip_launcher_prefix(text).lstrip()
        if footer := _OUT_OF_BOUNDS.match(line) or _AVG_BUSBW.match(line):
            return re.match(r"\S+\s", footer.group(1)) is not None
        if line.startswith("#"):
            return True
        header, tokens = self.header, line.split()
        if header is None or not _ROW_START.match(line) or header.trailing:
            return False
        # Every half the header has: a row of two cut after its first half's check reads as an
        # out-of-place-only row, and such a last row cannot be told from a cut one.
        full = len(header.prefix) + len(header.half) * (header.halves or 1)
        return (header.half[-1].lower() in _CHECK_COLUMNS and tokens[-1] in ("0", "0e+00", "N/A")
                and len(tokens) == full)

    def hash_line(self, number, line):
        tokens = line[1:].split()
        if match := _VERSION.match(line):
            self.version = match.group(1)
        elif match := _TEST_STARTING.match(line):
            self.collective_said = collective_of_program(match.group(1))
            self.summary = None
        elif match := _RANK_LINE.match(line):
            self.pending_ranks.append(match.group(1))
        elif is_column_header(tokens):
            self.start_table(number, tokens)
        elif tokens and tokens[0].startswith("(") and self.header is not None:
            # The units line under the column header: "(us)" or, in some builds, "(ms)".
            if "(ms)" in tokens:
                self.header.time_scale = 1000.0
            elif "(us)" in tokens:
                self.header.time_scale = 1.0
        elif not self.footer_line(number, line):
            self.skipped += 1

    def start_table(self, number, tokens):
        header = ColumnHeader.parse(tokens)
        if header.halves is None:
            raise self.error(number, "the column header's second (in-place) group of columns does not repeat the "
                                     f"first: {' '.join(tokens)}")
        self.header = header
        self.summary = None  # a new table (of a test that did not announce itself) gets its own footer
        if self.pending_ranks:
            first_group = self.pending_ranks[0]
            self.group_size = sum(1 for group in self.pending_ranks if group == first_group)
        self.pending_ranks = []

    def footer_line(self, number, line):
        if match := _OUT_OF_BOUNDS.match(line):
            words = match.group(1).split()
            if not words:
                raise self.error(number, "'Out of bounds values' has no count")
            self.current_summary(number)["out_of_bounds"] = parse_int(words[0], self.path, number,
                                                                      "out of bounds values")
            return True
        if match := _AVG_BUSBW.match(line):
            words = match.group(1).split()
            if not words:
                raise self.error(number, "'Avg bus bandwidth' has no value")
            self.current_summary(number)["avg_busbw"] = parse_float(words[0], self.path, number, "avg bus bandwidth")
            return True
        return False

    def current_summary(self, number):
        if self.summary is None:
            self.summary = {"collective": self.collective(number), "avg_busbw": None, "out_of_bounds": None}
            self.summaries.append(self.summary)
        return self.summary

    def collective(self, number):
        from_file = collective_of_file_name(self.path)
        if self.collective_said and self.collective_option and self.collective_said != self.collective_option:
            raise self.error(number, f"--collective {self.collective_option} disagrees with the output, which says "
                                     f"{self.collective_said}")
        chosen = self.collective_said or self.collective_option or from_file
        if chosen is None:
            raise self.error(number, "cannot tell which collective this table measures: the output has no "
                                     "'# Collective test starting' line (nccl-tests before mid-2025) and the file name "
                                     "names none; pass --collective")
        return chosen

    def row_line(self, number, line):
        header = self.header
        if header is None:
            raise self.error(number, "a result row before any column header ('#  size  count  type ...')")
        tokens = line.split()
        width = len(header.half)
        full = len(header.prefix) + width * header.halves + len(header.trailing)
        if "timestamp" in [name.lower() for name in header.trailing] and len(tokens) == full + 1:
            tokens = tokens[:-2] + [tokens[-2] + " " + tokens[-1]]  # "2025-01-31 12:00:00"
        halves = header.halves
        if halves == 2 and len(tokens) == len(header.prefix) + width:
            halves = 1  # an out-of-place-only row
        elif len(tokens) != full:
            raise self.error(number, f"expected {full} columns ({header.describe()}), found {len(tokens)}: "
                                     f"{line.strip()!r}")
        common, extra = self.prefix_values(number, header.prefix, tokens[:len(header.prefix)])
        trailing_tokens = tokens[len(header.prefix) + width * halves:]
        for name, token in zip(header.trailing, trailing_tokens):
            extra[name] = token if name.lower() == "timestamp" else number_or_text(token)
        self.printed_rows += 1
        for index in range(halves):
            start = len(header.prefix) + index * width
            row = {"collective": self.collective(number), **common, "in_place": index == 1,
                   "time_us": None, "algbw": None, "busbw": None, "wrong": None, "group_size": self.group_size}
            row_extra = dict(extra)
            self.measurement_values(number, header, tokens[start:start + width], row, row_extra)
            if row_extra:
                row["extra"] = row_extra
            self.rows.append(row)

    def prefix_values(self, number, names, tokens):
        values = {"size": None, "count": None, "type": None, "redop": None, "root": None}
        extra = {}
        for name, token in zip(names, tokens):
            key = PREFIX_COLUMNS.get(name.lower())
            if key in ("size", "count", "root"):
                values[key] = parse_int(token, self.path, number, f"column {name}")
            elif key is not None:
                values[key] = token
            else:
                extra[name] = number_or_text(token)
        return values, extra

    def measurement_values(self, number, header, tokens, row, extra):
        for name, token in zip(header.half, tokens):
            lower = name.lower()
            what = f"column {name} ({'in-place' if row['in_place'] else 'out-of-place'})"
            if lower in TIME_COLUMNS:
                row["time_us"] = parse_non_negative(token, self.path, number, what) * header.time_scale
                if lower == "cputime":
                    extra["time_is_cpu_time"] = True
            elif lower in ("algbw", "busbw"):
                row[lower] = parse_non_negative(token, self.path, number, what)
            elif lower == "#wrong":
                row["wrong"] = None if token == "N/A" else parse_int(token, self.path, number, what)
            elif lower in ("error", "res"):
                # rccl-tests marks a deviation past the data check's threshold with a "*" right after
                # it ("2e-02*"): those are the ones its "Out of bounds values" counts.
                if token.endswith("*"):
                    token = token[:-1]
                    extra["max_error_over_threshold"] = True
                extra["max_error"] = None if token == "N/A" else parse_float(token, self.path, number, what)
            else:
                extra[name] = number_or_text(token)


def parse(path, collective=None):
    return NcclTestsParser(path, collective).parse()
