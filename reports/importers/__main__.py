"""python3 -m reports.importers KIND FILE --out X.json [--collective NAME]

Writes FILE's results as a "tripod-results" JSON document and prints one summary line (what was
imported, how many lines were skipped). Exit status 1 with "FILE:LINE: message" on stderr when a
line that looks like the tool's output cannot be read, or when the file holds none; 2 on bad usage.
"""
import argparse
import os
import sys

from . import PARSERS, import_file
from .common import ImportFormatError, write_document
from .nccl_tests import collective_of_option


def is_same_file(first, second):
    """Whether both paths name one existing file (another spelling, a link, a hard link)."""
    try:
        return os.path.samefile(first, second)
    except OSError:  # either missing: not the same file
        return False


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python3 -m reports.importers",
                                     description="Import another tool's output into Tripod's results schema.")
    parser.add_argument("kind", choices=sorted(PARSERS), help="the tool that wrote FILE")
    parser.add_argument("file", help="the tool's output or log")
    parser.add_argument("--out", required=True, help="the JSON document to write")
    parser.add_argument("--collective",
                        help="nccl-tests only: the collective, for an output that does not name it "
                             "(nccl-tests before mid-2025) in a file whose name does not either")
    args = parser.parse_args(argv)
    if is_same_file(args.file, args.out):
        parser.error(f"--out {args.out} is {args.file}, the file to import: writing the document there would "
                     "replace the log; give another path")
    options = {}
    if args.collective is not None:
        if args.kind != "nccl-tests":
            parser.error("--collective applies to nccl-tests only")
        try:
            options["collective"] = collective_of_option(args.collective)
        except ValueError as error:
            parser.error(str(error))
    try:
        result = import_file(args.kind, args.file, **options)
        write_document(result.document, args.out)
    except ImportFormatError as error:
        print(error, file=sys.stderr)
        return 1
    except OSError as error:
        print(f"{args.out}: cannot write: {error.strerror or error}", file=sys.stderr)
        return 1
    what = "rows" if result.document["kind"] == "comm" else "steps"
    details = "".join(f"; {note}" for note in result.notes)
    print(f"{args.kind} {args.file}: {result.imported} {what} imported, {result.skipped_lines} lines skipped"
          f"{details} -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
