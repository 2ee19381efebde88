"""Shared by the command-line suites: where the `tripod` binary is, and how to launch it under
mpirun here (as root, oversubscribed, shared memory only, one passive thread per rank)."""
import contextlib
import fcntl
import os
import resource
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

BINARY_DIR = os.environ.get("TRIPOD_BINARY_DIR")
# Absolute: each test runs in a folder of its own (conftest.py), not where pytest was started.
BUILD_DIR = Path(BINARY_DIR).resolve() if BINARY_DIR else Path(__file__).resolve().parents[2] / "build" / "release"
TRIPOD = BUILD_DIR / "reference" / "tripod"
MPIRUN = shutil.which("mpirun")
MPI_ENV = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"}


def file_size_limit(limit):
    """preexec_fn of a child whose writes past `limit` bytes fail with EFBIG, as on a full disk
    (RLIMIT_FSIZE), instead of SIGXFSZ ending it."""
    def apply():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    return apply


@contextlib.contextmanager
def folder_lock_held(folder):
    """Holds what a writer at work holds on an output folder itself (core/folder_writer_lock.h)."""
    descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        yield
    finally:
        os.close(descriptor)


def fixture_library(name, folder):
    """fixtures/NAME.c built into FOLDER/libNAME.so: a stand-in library, or one to LD_PRELOAD in
    front of libc (a failing flock, a kill at one rename)."""
    library = Path(folder) / f"lib{name}.so"
    source = Path(__file__).resolve().parent / "fixtures" / f"{name}.c"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(library), str(source), "-ldl"], check=True, timeout=60)
    return library


def hang_up_by_default():
    """preexec_fn of a child a test sends SIGHUP. Under nohup, or any runner that ignores SIGHUP, the
    child would inherit the ignoring, which Tripod keeps on purpose (nohup asks the run to go on),
    and the test would wait out its timeout instead."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def require_tripod():
    """Skip when run by hand before a build; fail under CTest (which sets TRIPOD_BINARY_DIR)."""
    if not TRIPOD.exists():
        if BINARY_DIR:
            pytest.fail(f"{TRIPOD} is missing: build the project first")
        pytest.skip(f"{TRIPOD} not built")


def quick_sweep(out):
    """The quick scaling preset's sweep (`tripod scale run quick`), trained into OUT. Under CTest the
    fixture test scale.quick_sweep trains it once (TRIPOD_QUICK_SWEEP names its folder; ~150 s on 2
    cores) and each suite that needs one gets a copy, so that its fits write only into its own; run
    by hand, each suite trains its own."""
    require_tripod()
    shared = os.environ.get("TRIPOD_QUICK_SWEEP")
    if shared:
        runs = Path(shared) / "runs.jsonl"
        assert runs.exists(), f"{runs} is missing: the fixture test scale.quick_sweep did not finish"
        shutil.copytree(shared, out)
        return out
    result = subprocess.run([str(TRIPOD), "scale", "run", "quick", "--out", str(out), "--jobs", "2",
                             "--progress-every", "0"], capture_output=True, text=True, timeout=1200)
    assert result.returncode == 0, result.stdout + result.stderr
    return out


def mpirun_command(ranks, *args, timeout=100):
    """mpirun ... tripod ARGS, with mpirun's own timeout so a hang kills every rank."""
    assert MPIRUN, "mpirun not found (install openmpi-bin)"
    return [MPIRUN, "--oversubscribe", "--mca", "btl", "self,vader", "--timeout", str(timeout), "-np", str(ranks),
            str(TRIPOD), *map(str, args)]


def make_markov_corpus(out, tokens=20000):
    """A small synthetic corpus (vocabulary 64, first-order Markov) for the command-line suites."""
    require_tripod()
    result = subprocess.run([str(TRIPOD), "data", "synthetic", "--out", str(out), "--vocab-size", "64", "--order", "1",
                             "--tokens", str(tokens)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return out
