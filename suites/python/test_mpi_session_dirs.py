"""Each test's MPI launches keep their Open MPI session directories in a folder of the test's own.

Open MPI 4 puts every launch's session directory in one folder per user and host
(<tmp>/ompi.<host>.<uid>) and removes that folder when a launch ends and finds it empty; a launch
starting beside it then fails ("A call to mkdir was unable to create the desired directory",
orte_session_dir failed). Under `ctest -j 2` two suites' launches met there and failed a CI run
(python.test_bench_comm). The Python suites get a folder per pytest process (conftest.py), CTest's
multi-rank entries one per run (suites/support/own_mpi_session.sh)."""
import json
import os
import subprocess
from pathlib import Path

import pytest

from tripod_cli import BINARY_DIR, BUILD_DIR, MPIRUN
from tripod_cli import MPI_ENV as ENV

WRAPPER = Path(__file__).resolve().parents[1] / "support" / "own_mpi_session.sh"


def test_a_suites_mpirun_keeps_its_session_directory_in_a_folder_of_this_process():
    base = os.environ.get("OMPI_MCA_orte_tmpdir_base")
    assert base, "the suites' launches share the user's Open MPI session folder (conftest.py sets none)"
    assert Path(base).name.startswith("tripod-mpi.") and Path(base).is_dir()
    assert ENV["OMPI_MCA_orte_tmpdir_base"] == base
    if MPIRUN is None:
        pytest.fail("mpirun not found (install openmpi-bin)")
    # Each rank lists the folder while mpirun runs: mpirun's session directory is there.
    result = subprocess.run([MPIRUN, "--oversubscribe", "--mca", "btl", "self,vader", "--timeout", "50", "-np", "2",
                             "ls", base], capture_output=True, text=True, timeout=60, env=ENV)
    assert result.returncode == 0, result.stderr
    assert [line for line in result.stdout.split() if line.startswith("ompi.")], result.stdout
    # And it is gone again once mpirun has ended.
    assert not [p for p in Path(base).iterdir() if p.name.startswith("ompi.")]


def test_the_wrapper_gives_each_run_its_own_folder_inside_the_set_one_and_removes_it():
    runs = [subprocess.run(["sh", str(WRAPPER), "sh", "-c", 'echo "$OMPI_MCA_orte_tmpdir_base"; exit 3'],
                           capture_output=True, text=True, timeout=30) for _ in range(2)]
    assert [r.returncode for r in runs] == [3, 3], [r.stderr for r in runs]
    folders = [Path(r.stdout.strip()) for r in runs]
    assert folders[0] != folders[1]
    for folder in folders:
        # Inside the folder the environment set (here conftest.py's), named as its own, and removed.
        assert folder.parent == Path(os.environ["OMPI_MCA_orte_tmpdir_base"])
        assert folder.name.startswith("tripod-mpi.") and not folder.exists()


def test_every_ctest_entry_that_runs_mpirun_runs_it_through_the_wrapper():
    if not BINARY_DIR:
        pytest.skip("TRIPOD_BINARY_DIR is not set: run through ctest, or export it to a build directory")
    listing = subprocess.run(["ctest", "--show-only=json-v1", "--test-dir", str(BUILD_DIR)],
                             capture_output=True, text=True, timeout=60)
    assert listing.returncode == 0, listing.stderr
    launchers = {"mpirun", "mpiexec", "orterun"}
    entries = [t for t in json.loads(listing.stdout)["tests"]
               if any(Path(word).name in launchers for word in t.get("command", []))]
    assert len(entries) >= 10, [t["name"] for t in entries]  # mpi.np* and mpi.emulated.np*
    for entry in entries:
        command = entry["command"]
        assert command[1:2] == [str(WRAPPER)], f"{entry['name']} runs {command[:2]}, not {WRAPPER}"
