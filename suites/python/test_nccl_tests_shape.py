"""reports/nccl_tests_shape.py, the GPU check's test that `tripod bench comm all_reduce -b 8 -e 1G -f 2`
reads as nccl-tests' own output row for row: it accepts Tripod's sweep and a (hand-written) nccl-tests
2.19 output, and refuses a missing size, an unchecked run (#wrong N/A), a wrong count, a column
nccl-tests does not print, a positive #wrong and a failed footer."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tripod_cli import MPI_ENV, MPIRUN, TRIPOD
FIXTURES = Path(__file__).parent / "fixtures" / "importers"
SOURCE = Path(os.environ.get("TRIPOD_SOURCE_DIR", Path(__file__).parents[2]))


def shape(path, *args, collective="all_reduce"):
    return subprocess.run([sys.executable, "-m", "reports.nccl_tests_shape", str(path), "--collective", collective,
                           *args], capture_output=True, text=True, timeout=60, cwd=SOURCE)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """Tripod's own sweep at world size 1 (no launcher needed), 8 B - 64 KiB by factors of 2."""
    if not TRIPOD.exists():
        pytest.fail(f"{TRIPOD} not built")
    out = subprocess.run([str(TRIPOD), "bench", "comm", "all_reduce", "-b", "8", "-e", "64K", "-f", "2", "-n", "2"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    path = tmp_path_factory.mktemp("sweep") / "all_reduce_perf.txt"
    path.write_text(out.stdout)
    return path


def edited(tmp_path, source, edit):
    path = tmp_path / "edited.txt"
    path.write_text(edit(Path(source).read_text()))
    return path


def test_tripods_sweep_reads_as_nccl_tests_output(sweep):
    r = shape(sweep, "-b", "8", "-e", "64K", "-f", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "14 sizes 8 B - 65536 B" in r.stdout and "#wrong 0" in r.stdout


def test_nccl_tests_own_output_passes_the_same_check():
    r = shape(FIXTURES / "nccl_all_reduce_2.19.txt", "-b", "1K", "-e", "64M", "-f", "16")
    assert r.returncode == 0, r.stdout + r.stderr


def bench_comm(tmp_path, *args, ranks=1):
    launcher = [MPIRUN, "-np", str(ranks), "--oversubscribe", "--mca", "btl", "self,vader"] if ranks > 1 else []
    out = subprocess.run([*launcher, str(TRIPOD), "bench", "comm", *args, "-n", "1"], capture_output=True, text=True,
                         timeout=120, env=MPI_ENV)
    assert out.returncode == 0, out.stdout + out.stderr
    path = tmp_path / "perf.txt"
    path.write_text(out.stdout)
    return path


# nccl-tests prints one rank's block as the count of these, rounded down to 16 bytes, and the whole
# buffer as the size: the check took every row of a correct all_gather sweep for a wrong count.
@pytest.mark.parametrize("collective, ranks", [("all_gather", 1), ("reduce_scatter", 1), ("alltoall", 1),
                                               ("all_gather", 2), ("alltoall", 3)])
def test_the_blocked_collectives_sweeps_read_as_nccl_tests_output(tmp_path, collective, ranks):
    if ranks > 1 and not MPIRUN:
        pytest.fail("mpirun is missing: ci/setup.sh installs Open MPI")
    path = bench_comm(tmp_path, collective, "-b", "8", "-e", "4K", "-f", "2", ranks=ranks)
    r = shape(path, "-b", "8", "-e", "4K", "-f", "2", collective=collective)
    assert r.returncode == 0, r.stdout + r.stderr
    # A count that is not the block is still caught.
    text = path.read_text().splitlines()
    row = max(i for i, line in enumerate(text) if line.split()[:1] and line.split()[0].isdigit())  # the largest
    fields = text[row].split()
    text[row] = text[row].replace(f" {fields[1]} ", f" {int(fields[1]) + 4} ", 1)
    path.write_text("\n".join(text) + "\n")
    r = shape(path, "-b", "8", "-e", "4K", "-f", "2", collective=collective)
    assert r.returncode == 1 and "is not size / (" in r.stdout, r.stdout


def test_sizes_that_are_no_whole_number_of_elements_read_as_nccl_tests_prints_them(tmp_path):
    # -b 6 of float: nccl-tests prints 4 B (one element); the check expected a row of 6 B.
    path = bench_comm(tmp_path, "all_reduce", "-b", "6", "-e", "24", "-f", "2")
    r = shape(path, "-b", "6", "-e", "24", "-f", "2")
    assert r.returncode == 0, r.stdout + r.stderr


def test_another_sweep_than_the_one_asked_for_fails(sweep):
    r = shape(sweep, "-b", "8", "-e", "128K", "-f", "2")
    assert r.returncode == 1 and "missing [131072]" in r.stdout


def test_a_missing_row_fails(sweep, tmp_path):
    path = edited(tmp_path, sweep, lambda t: "\n".join(l for l in t.splitlines() if not l.lstrip().startswith("1024 ")))
    r = shape(path, "-b", "8", "-e", "64K", "-f", "2")
    assert r.returncode == 1 and "missing [1024]" in r.stdout


def test_an_unchecked_run_fails(tmp_path):
    out = subprocess.run([str(TRIPOD), "bench", "comm", "all_reduce", "-b", "8", "-e", "1K", "-f", "2", "-n", "1",
                          "-c", "0"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    path = tmp_path / "unchecked.txt"
    path.write_text(out.stdout)
    r = shape(path, "-b", "8", "-e", "1K", "-f", "2")
    assert r.returncode == 1 and "#wrong N/A (unchecked)" in r.stdout


# nccl-tests' own output (a hand-written 2.19 fixture, -b 1K -e 64M -f 16) with one thing broken.
@pytest.mark.parametrize("old, new, message", [
    ("        1024           256 ", "        1024           255 ", "count 255 of float is not size / 4"),
    ("1.25       0\n", "1.25       3\n", "#wrong 3"),
    ("Out of bounds values : 0 OK", "Out of bounds values : 2 FAILED", "footer"),
])
def test_a_broken_nccl_tests_output_fails(tmp_path, old, new, message):
    fixture = FIXTURES / "nccl_all_reduce_2.19.txt"
    assert old in fixture.read_text()
    r = shape(edited(tmp_path, fixture, lambda t: t.replace(old, new)), "-b", "1K", "-e", "64M", "-f", "16")
    assert r.returncode == 1 and message in r.stdout, r.stdout


def test_a_column_nccl_tests_does_not_print_fails():
    r = shape(FIXTURES / "nccl_hypothetical_extra_columns.txt", "-b", "1K", "-e", "64M", "-f", "16",
              collective="all_gather")
    assert r.returncode == 1 and "columns nccl-tests does not print" in r.stdout


@pytest.mark.parametrize("args, message", [(["-e", "1X"], "K, M or G suffix"), (["-b", "2K", "-e", "1K"], "at most -e"),
                                           (["-f", "1"], "-f must be at least 2")])
def test_a_bad_sweep_is_refused_with_a_reason(sweep, args, message):
    r = shape(sweep, *args)
    assert r.returncode == 2 and message in r.stderr, r.stderr
