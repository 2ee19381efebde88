"""What a compute-sanitizer log says, in one line: the tool's error count and the kernels named.

    python3 reports/sanitizer_log.py TOOL LOG [--json OUT]

compute-sanitizer (memcheck, initcheck, racecheck, synccheck) prints every finding as a record of
lines that start with its prefix "========= ": a first line saying what happened ("Invalid
__global__ read of size 4 bytes", "Uninitialized __global__ memory read of size 4 bytes", "Error:
Race reported between Write access at K+0x1f0 in f.cu:12 and Read access at ..."), then indented
lines, the first of which names the kernel ("    at K+0x70 in f.cu:6"), and at the end a summary
("ERROR SUMMARY: 2 errors", "RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)").
The kernel names say whose fault it is: ours are in namespace tripod::, anything else is a
library's (cuBLASLt's, CUB's) running on our tensors, which may still be our doing (an operand's
padding never written, read by cuBLASLt), so every finding counts.

Prints e.g. "initcheck: 2 errors in 1 kernel (ours: tripod::cuda::foo<float>): Uninitialized
__global__ memory read of size 4 bytes"; "initcheck: clean" when the summary says 0 errors, and
"initcheck: no summary (cut short?)" when there is none. Exit 0: the log was read.
"""
import argparse
import json
import re
import sys

PREFIX = "========= "
SUMMARY = re.compile(r"^(ERROR|RACECHECK|SYNCCHECK|INITCHECK) SUMMARY: (.*)$")
# "at KERNEL+0x70 in file.cu:6", "at 0x70 in file.cu:6:KERNEL" (older), "access at KERNEL+0x1f0"
AT_OFFSET = re.compile(r"\bat (.+?)\+0x[0-9a-fA-F]+")
AT_OLD = re.compile(r"\bat 0x[0-9a-fA-F]+ in (?:\S+:\d+:)?(.+)$")


def kernel_of(line):
    m = AT_OFFSET.search(line) or AT_OLD.search(line)
    return m.group(1).strip() if m else None


def read_records(text):
    """[(first line, [kernels named])] and the summary's words (None when absent)."""
    records, summary = [], None
    for raw in text.splitlines():
        if not raw.startswith(PREFIX.rstrip()):
            continue
        body = raw[len(PREFIX):] if raw.startswith(PREFIX) else ""
        if not body.strip():
            continue
        m = SUMMARY.match(body)
        if m:
            summary = m.group(2)
            continue
        if body.startswith(" "):  # a detail line of the current record
            if records:
                k = kernel_of(body)
                if k and not records[-1][1]:
                    records[-1][1].append(k)
            continue
        if body.startswith(("COMPUTE-SANITIZER", "Target application returned", "Saved host backtrace",
                            "Note:", "Host Frame")):
            continue
        kernels = [k for k in (kernel_of(part) for part in body.split(" and ")) if k]
        records.append((body.strip(), kernels))
    return records, summary


def summary_errors(summary):
    """The error count a summary line gives ('2 errors', '1 hazard displayed (1 error, 0 warnings)')."""
    if summary is None:
        return None
    m = re.search(r"\((\d+) errors?", summary) or re.search(r"^(\d+) errors?", summary)
    return int(m.group(1)) if m else None


def describe(tool, text):
    records, summary = read_records(text)
    errors = summary_errors(summary)
    kernels = sorted({k for _, ks in records for k in ks})
    ours = [k for k in kernels if "tripod::" in k]
    result = {"tool": tool, "errors": errors, "records": len(records), "kernels": kernels, "ours": ours,
              "first": records[0][0] if records else None}
    if errors is None and not records:
        line = f"{tool}: no summary (cut short?)"
    elif not records and errors == 0:
        line = f"{tool}: clean"
    else:
        count = errors if errors is not None else len(records)
        where = f" in {len(kernels)} kernel{'s' if len(kernels) != 1 else ''}" if kernels else ""
        whose = f" (ours: {', '.join(ours)})" if ours else (" (none of them ours)" if kernels else "")
        line = f"{tool}: {count} error{'s' if count != 1 else ''}{where}{whose}: {records[0][0] if records else summary}"
    result["line"] = line
    return result


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tool")
    ap.add_argument("log")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    with open(args.log, errors="replace") as f:
        result = describe(args.tool, f.read())
    print(result["line"])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
