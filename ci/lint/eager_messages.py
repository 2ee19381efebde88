#!/usr/bin/env python3
"""Refuse check() calls whose message parts compute something.

check(condition, parts...) is a function (reference/core/error.h): every part is evaluated before
the condition is tested. A part that dereferences a pointer (`p->describe()`, `*p`) crashes where
the pointer is null and the condition holds, and one that builds a string (`t.describe()`,
`shape_str(...)`) formats it on every call for nothing. Such checks must be TRIPOD_CHECK, whose
parts are evaluated only on failure. The first GPU run of the bf16-operand GEMMs died of exactly
this (`check(..., c_in->describe(), ...)` with `c_in` null).

Usage: eager_messages.py [ROOT or FILE ...]   (default: the repository's C++/CUDA sources)
Prints one line per offending call (file:line and the computing part); exit status 1 if any.
"""
import pathlib
import re
import sys

SOURCE_SUFFIXES = (".cpp", ".h", ".cu", ".cuh")
SOURCE_DIRS = ("reference", "microbench", "suites")

# A free call of check( (not obj.check(, ptr->check(, CLI's ->check(, ns::check( or any_check().
CALL = re.compile(r"(?<![\w.>:])check\(")
# Parts that compute: a pointer dereference, a string built per call.
COMPUTING = [
    (re.compile(r"->"), "a pointer dereference (->)"),
    (re.compile(r"(?:^|[,(?:!])\s*\*\s*[A-Za-z_(]"), "a pointer dereference (*)"),
    (re.compile(r"\bdescribe\s*\("), "describe()"),
    (re.compile(r"\bshape_str\s*\("), "shape_str()"),
    (re.compile(r"\bstr_cat\s*\("), "str_cat()"),
    (re.compile(r"\bto_string\s*\("), "to_string()"),
    (re.compile(r"\.string\s*\(\s*\)"), "path.string()"),
    (re.compile(r"\bToString\s*\("), "ToString()"),
]


def blank_strings_and_comments(text):
    """The text with string/char literals and comments replaced by spaces (same offsets)."""
    out = list(text)
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out[i:j] = " " * (j - i)
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out[i:j] = [ch if ch == "\n" else " " for ch in text[i:j]]
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out[i + 1:j] = " " * (j - i - 1)
            i = j + 1
        else:
            i += 1
    return "".join(out)


def split_top_level(args):
    """The arguments of a call, split at commas outside brackets."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(args):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(args[start:i])
            start = i + 1
    parts.append(args[start:])
    return parts


def offending_calls(text):
    """(line, what) for each check() call in text whose message parts compute."""
    code = blank_strings_and_comments(text)
    found = []
    for match in CALL.finditer(code):
        depth, i = 1, match.end()
        while i < len(code) and depth:
            depth += {"(": 1, ")": -1}.get(code[i], 0)
            i += 1
        args = split_top_level(code[match.end():i - 1])
        if len(args) < 2:
            continue
        for part in args[1:]:
            hit = next((what for pattern, what in COMPUTING if pattern.search(part)), None)
            if hit:
                found.append((code.count("\n", 0, match.start()) + 1, f"{hit} in '{' '.join(part.split())}'"))
                break
    return found


def source_files(paths):
    for path in paths:
        path = pathlib.Path(path)
        if path.is_file():
            yield path
        else:
            for sub in SOURCE_DIRS if (path / "reference").is_dir() else ("",):
                yield from sorted(p for p in (path / sub).rglob("*") if p.suffix in SOURCE_SUFFIXES)


def main(argv):
    roots = argv or [pathlib.Path(__file__).resolve().parents[2]]
    count = 0
    for file in source_files(roots):
        for line, what in offending_calls(file.read_text(errors="replace")):
            print(f"{file}:{line}: check() computes its message eagerly: {what}; use TRIPOD_CHECK")
            count += 1
    if count:
        print(f"{count} check() call(s) whose message parts compute (reference/core/error.h)", file=sys.stderr)
    return 1 if count else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
