"""python3 reports/symbolize_stack.py LOG BINARY [--out FILE] [--site]

Names the functions of a stack that Tripod printed when a fatal signal killed it
(reference/core/crash_report.h): each frame of BINARY prints as `path/tripod(+0xOFFSET)[0xADDRESS]`,
an offset into the binary, which is the same in every copy of one build (stripping moves no code).
So a crash on a GPU node is read here, against the build the bundle was made from
(build/gpu-bundle/reference/tripod, or the bundle's own binary, which keeps its symbol table):
every frame of BINARY's name gets `-> function` from binutils' addr2line (inlined calls too).
Other frames (libc, CUDA) stay as they are.

Prints the log with the names added (or writes it to --out); with --site, prints instead (beside
--out's file) only where the signal struck: the first named frame below the crash handler's, without its arguments (the GPU
check puts it in a failed step's reason). Exits 0 when a frame was named, 1 when the log holds no
frame of BINARY (or, with --site, none named), 2 when a file cannot be read or addr2line is missing.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

FRAME = re.compile(r"^(?P<path>\S*?)\(\+0x(?P<offset>[0-9a-fA-F]+)\)\s*\[0x[0-9a-fA-F]+\]\s*$")


def frames_of(lines, binary_name):
    """{line index: offset} for the frames in BINARY (matched by file name)."""
    found = {}
    for i, line in enumerate(lines):
        m = FRAME.match(line.strip())
        if m and os.path.basename(m.group("path")) == binary_name:
            found[i] = int(m.group("offset"), 16)
    return found


def names_of(binary, offsets):
    """addr2line's function names (inlined frames joined by ' < ') for each offset. A frame's
    address is where its call returns to: one byte back is inside the call, on the call's line."""
    if not offsets:
        return []
    query = "\n".join(hex(max(o - 1, 0)) for o in offsets) + "\n"
    # -a prints each address first, so the variable number of inlined lines per address can be split.
    out = subprocess.run(["addr2line", "-a", "-f", "-C", "-i", "-e", binary], input=query, capture_output=True,
                         text=True, check=True).stdout.splitlines()
    names, blocks = [], []
    for line in out:  # per address: the address, then (function, file:line) per inlining level
        if re.fullmatch(r"0x[0-9a-fA-F]+", line):
            blocks.append([])
        elif blocks:
            blocks[-1].append(line)
    for block in blocks:
        levels = []
        for function, where in zip(block[0::2], block[1::2]):
            if function == "??":
                continue
            levels.append(function if where.startswith("??") else f"{function} ({where})")
        names.append(" < ".join(levels))
    return names


def crash_site(names):
    """The first named frame below the crash handler's (frames run from the handler outwards), as a
    bare function name: no arguments, no clone suffix, the innermost of inlined calls."""
    for name in names:
        if not name or "on_fatal_signal" in name:
            continue
        innermost = name.split(" < ")[0]
        depth, i = 0, 0
        while i < len(innermost):  # cut at the argument list's '(' (not one inside <...>)
            c = innermost[i]
            if c == "<":
                depth += 1
            elif c == ">":
                depth -= 1
            elif c == "(" and i >= 8 and innermost.startswith("operator()", i - 8):
                i += 1  # the call operator's own "()" is its name
            elif c == "(" and depth == 0 and i > 0 and not innermost.startswith("(anonymous", i):
                return innermost[:i]
            i += 1
        return innermost.split(" [clone")[0]
    return None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("log")
    ap.add_argument("binary")
    ap.add_argument("--out")
    ap.add_argument("--site", action="store_true", help="print only the function the signal struck")
    a = ap.parse_args(argv)
    if shutil.which("addr2line") is None:
        print("symbolize_stack: addr2line (binutils) is not installed", file=sys.stderr)
        return 2
    try:
        with open(a.log, errors="replace") as f:
            lines = f.read().splitlines()
        open(a.binary, "rb").close()
    except OSError as e:
        print(f"symbolize_stack: {e}", file=sys.stderr)
        return 2
    frames = frames_of(lines, os.path.basename(a.binary))
    if not frames:
        print(f"symbolize_stack: {a.log} holds no frame of {os.path.basename(a.binary)} "
              "(a line 'NAME(+0xOFFSET)[0xADDRESS]')", file=sys.stderr)
        return 1
    order = sorted(frames)
    names = names_of(a.binary, [frames[i] for i in order])
    for i, name in zip(order, names):
        lines[i] = f"{lines[i]}  -> {name or '?? (no symbol: is this the build the binary came from?)'}"
    text = "\n".join(lines) + "\n"
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    elif not a.site:
        sys.stdout.write(text)
    if a.site:
        site = crash_site(names)
        if site is None:
            print(f"symbolize_stack: no named frame of {os.path.basename(a.binary)} below the handler", file=sys.stderr)
            return 1
        print(site)
    return 0


if __name__ == "__main__":
    sys.exit(main())
