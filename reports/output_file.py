"""Results files replaced whole, as Tripod's own are (core/output_file.h): the text goes to a staging
file beside the target and is renamed over it, so a failure midway (a full disk, a kill) or a second
writer leaves the previous file whole, never half of one. A target that is not a plain regular file
(/dev/stdout, a pipe, a symbolic link) is written in place."""
import os
import socket
import stat
from pathlib import Path


def write_text_replacing(path, text, encoding="utf-8"):
    path = Path(path)
    try:
        in_place = not stat.S_ISREG(os.lstat(path).st_mode)
    except FileNotFoundError:
        in_place = False
    if in_place:
        with open(path, "w", encoding=encoding) as handle:
            handle.write(text)
        return
    staging = path.with_name(f"{path.name}.tmp-{socket.gethostname()}-{os.getpid()}")
    try:
        with open(staging, "w", encoding=encoding) as handle:
            handle.write(text)
        os.replace(staging, path)
    except BaseException:
        staging.unlink(missing_ok=True)  # no half-written staging file left behind
        raise
