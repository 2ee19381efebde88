"""python3 -m reports.nccl_tests_shape FILE --collective all_reduce -b 8 -e 1G -f 2 [--json OUT]

Does FILE, the output of one `tripod bench comm` (or nccl-tests) sweep, read as nccl-tests' own
output would, row for row? The GPU check runs it on `tripod bench comm all_reduce -b 8 -e 1G -f 2`
(issue 15: "parses with the same columns as nccl-tests'"). It reads FILE with the nccl-tests importer
(reports/importers/nccl_tests.py, the parser that reads real nccl-tests output), then checks:
- the column header is today's nccl-tests header, every column known (nothing left in "extra");
- one printed row per size of the sweep (-b, -e, -f as nccl-tests steps them), each with its
  out-of-place and in-place halves, in that order, with size and count as nccl-tests prints them:
  count = size / the type's bytes, rounded down, and size = count x bytes; for all_gather,
  reduce_scatter and alltoall count is one rank's block, (count / ranks) rounded down to 16 bytes,
  and size the whole buffer, block x ranks x bytes (the ranks from the "#  Rank" lines);
- #wrong is 0 in every half (N/A, an unchecked run, is not accepted) and the footer says
  "Out of bounds values : 0 OK" and gives an average bus bandwidth.
Prints one line (sizes, the largest size's busbw, the average) and exits 0, or prints each problem
and exits 1.
"""
import argparse
import json
import sys

from .importers.common import ImportFormatError
from .importers.nccl_tests import parse

TYPE_BYTES = {"float": 4, "double": 8, "int32": 4, "bfloat16": 2, "half": 2, "int8": 1, "uint8": 1, "int64": 8}
UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_bytes(text):
    """'8' -> 8, '1G' -> 2**30: nccl-tests' -b/-e suffixes (binary multiples)."""
    text = text.strip().upper().rstrip("B")
    unit = text[-1] if text and text[-1] in UNITS else ""
    return int(text[:len(text) - len(unit)]) * UNITS[unit]


# Collectives whose printed count is one rank's block of the buffer (nccl-tests' *GetCollByteCount).
BLOCKED = {"all_gather", "reduce_scatter", "alltoall"}


def printed_size_and_count(size, type_bytes, collective, ranks):
    """(size, count) of the row nccl-tests prints for a requested size."""
    count = size // type_bytes
    if collective in BLOCKED:
        block = (count // ranks) & ~(max(16 // type_bytes, 1) - 1)
        return block * ranks * type_bytes, block
    return count * type_bytes, count


def sweep_sizes(min_bytes, max_bytes, factor):
    """The sizes an nccl-tests sweep prints: min, min*f, ... up to max (-f multiplies)."""
    sizes, size = [], min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= factor
    return sizes


def problems_of(rows, summaries, collective, sizes):
    problems = []
    mine = [r for r in rows if r["collective"] == collective]
    if not mine:
        return [f"no {collective} rows (collectives found: {sorted({r['collective'] for r in rows})})"]
    for r in mine:
        if r.get("extra"):
            problems.append(f"size {r['size']}: columns nccl-tests does not print: {sorted(r['extra'])}")
            break
    width = TYPE_BYTES.get(mine[0]["type"])
    if width is None:
        return [f"size {mine[0]['size']}: unknown type {mine[0]['type']!r}"]
    ranks = mine[0].get("group_size") or 1
    expected = [printed_size_and_count(size, width, collective, ranks) for size in sizes]
    printed = [r["size"] for r in mine if not r["in_place"]]
    if printed != [size for size, _ in expected]:
        missing = sorted(set(size for size, _ in expected) - set(printed))
        extra = sorted(set(printed) - set(size for size, _ in expected))
        problems.append(f"sizes printed {len(printed)}, expected {len(sizes)} ({sizes[0]} .. {sizes[-1]} B requested)"
                        + (f"; missing {missing[:5]}" if missing else "") + (f"; unexpected {extra[:5]}" if extra else "")
                        + ("" if missing or extra else "; out of order"))
    halves = [(r["size"], r["in_place"]) for r in mine]
    if halves != [(s, p) for s in printed for p in (False, True)]:
        problems.append("every row must hold its out-of-place and then its in-place measurement")
    counts = dict(expected)
    for r in mine:
        if r["type"] != mine[0]["type"]:
            problems.append(f"size {r['size']}: type {r['type']!r}, where the sweep's first row is {mine[0]['type']!r}")
        elif r["size"] in counts and r["count"] != counts[r["size"]]:
            what = f"size / ({ranks} ranks x {width})" if collective in BLOCKED else f"size / {width}"
            problems.append(f"size {r['size']}: count {r['count']} of {r['type']} is not {what}")
        for key in ("time_us", "algbw", "busbw", "redop", "root"):
            if r[key] is None:
                problems.append(f"size {r['size']} ({'in' if r['in_place'] else 'out-of'}-place): no {key}")
        if r["wrong"] != 0:
            problems.append(f"size {r['size']} ({'in' if r['in_place'] else 'out-of'}-place): #wrong "
                            f"{'N/A (unchecked)' if r['wrong'] is None else r['wrong']}")
    footer = [s for s in summaries if s["collective"] == collective]
    if not footer or footer[-1]["out_of_bounds"] != 0 or footer[-1]["avg_busbw"] is None:
        problems.append(f"footer: expected 'Out of bounds values : 0 OK' and an average bus bandwidth, got {footer}")
    return problems


def main(argv=None):
    p = argparse.ArgumentParser(prog="python3 -m reports.nccl_tests_shape", description=__doc__.splitlines()[2])
    p.add_argument("file")
    p.add_argument("--collective", required=True)
    p.add_argument("-b", "--minbytes", default="8")
    p.add_argument("-e", "--maxbytes", default="1G")
    p.add_argument("-f", "--stepfactor", type=int, default=2)
    p.add_argument("--json", help="write the verdict and the rows here")
    args = p.parse_args(argv)
    if args.stepfactor < 2:
        p.error("-f must be at least 2")
    try:
        low, high = parse_bytes(args.minbytes), parse_bytes(args.maxbytes)
    except ValueError:
        p.error(f"-b/-e: sizes are a number with an optional K, M or G suffix (got {args.minbytes!r}, {args.maxbytes!r})")
    if not 0 < low <= high:
        p.error(f"-b must be positive and at most -e (got {low} and {high})")
    sizes = sweep_sizes(low, high, args.stepfactor)
    try:
        result = parse(args.file, args.collective)
    except ImportFormatError as error:
        print(f"not nccl-tests output: {error}")
        return 1
    comm = result.document["comm"]
    problems = problems_of(comm["results"], comm["summaries"], args.collective, sizes)
    largest = [r for r in comm["results"] if r["collective"] == args.collective and not r["in_place"]][-1:]
    largest += [r for r in comm["results"] if r["collective"] == args.collective and r["in_place"]][-1:]
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"file": args.file, "collective": args.collective, "sizes": sizes, "problems": problems,
                       "rows": comm["results"], "summaries": comm["summaries"]}, f, indent=1)
    if problems:
        for problem in problems[:10]:
            print(f"{args.file}: {problem}")
        if len(problems) > 10:
            print(f"{args.file}: ... {len(problems) - 10} more problems")
        return 1
    algbw, busbw = ("/".join(f"{r[key]:g}" for r in largest) for key in ("algbw", "busbw"))
    print(f"{args.collective}: {len(sizes)} sizes {sizes[0]} B - {sizes[-1]} B, out-of-place and in-place, "
          f"read as nccl-tests output (same columns), #wrong 0; at {largest[0]['size']} B algbw {algbw}, busbw {busbw} GB/s "
          f"(out-of-place/in-place); average busbw {comm['summaries'][-1]['avg_busbw']:g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
