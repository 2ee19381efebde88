"""Importers of other tools' output into Tripod's results schema (reports/FORMATS.md section 3):
nccl-tests tables -> kind "comm" (the rows of `tripod bench comm`), Megatron-LM and torchtitan
training logs and Tripod's own metrics.jsonl -> kind "train" (one row per logged step, steps
counted from 1). Run as `python3 -m reports.importers KIND FILE --out X.json`, or through
`tripod import KIND FILE --out X.json`.

Each parser returns an ImportResult; a line it recognises but cannot read raises
ImportFormatError, whose text is "FILE:LINE: message".
"""
from . import megatron, nccl_tests, torchtitan, tripod_metrics
from .common import ImportFormatError, ImportResult, write_document

# KIND on the command line -> the module that parses it.
PARSERS = {
    "nccl-tests": nccl_tests,
    "megatron": megatron,
    "torchtitan": torchtitan,
    "tripod-metrics": tripod_metrics,
}


def import_file(kind, path, **options):
    """Parses PATH as KIND; options are the parser's own (nccl-tests: collective)."""
    return PARSERS[kind].parse(path, **options)


__all__ = ["ImportFormatError", "ImportResult", "PARSERS", "import_file", "write_document"]
