"""Every Python suite runs each test in an empty working directory of its own.

Commands that write to a default relative path (a preset's `runs/<preset>/metrics.jsonl`) wrote into
the folder pytest was started from: the checkout, or CTest's build folder, where every test run of
`tripod train --config tiny` shared one metrics file. Since the trainer locks its metrics file, two
such tests at once refused each other, and a run a failed test left behind made every later one fail.
The paths the suites take from the environment are made absolute first, so they still lead to the
build and the sources from there."""
import atexit
import os
import shutil
import sys
import tempfile

import pytest

for variable in ("TRIPOD_BINARY_DIR", "TRIPOD_SOURCE_DIR", "TRIPOD_QUICK_SWEEP"):
    if os.environ.get(variable):
        os.environ[variable] = os.path.abspath(os.environ[variable])
if os.environ.get("PYTHONPATH"):  # children run `python -m reports...` with it
    os.environ["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in os.environ["PYTHONPATH"].split(os.pathsep))
sys.path[:] = [os.path.abspath(p) for p in sys.path]

# Every MPI launch of this pytest process (mpirun, or a singleton's MPI_Init) keeps its Open MPI
# session directory in a folder of this process's own, removed at exit: in the folder that all of a
# user's launches share, a launch ending beside another's start can make that start fail
# (suites/support/own_mpi_session.sh says how; it does the same for CTest's multi-rank entries).
# The suites' launches inherit it from here, or from tripod_cli.MPI_ENV, a copy of this environment.
# (Inside the folder a user set for them, if any.)
os.environ["OMPI_MCA_orte_tmpdir_base"] = tempfile.mkdtemp(prefix="tripod-mpi.",
                                                           dir=os.environ.get("OMPI_MCA_orte_tmpdir_base") or None)
atexit.register(shutil.rmtree, os.environ["OMPI_MCA_orte_tmpdir_base"], ignore_errors=True)


@pytest.fixture(autouse=True)
def own_working_directory(tmp_path_factory, monkeypatch):
    monkeypatch.chdir(tmp_path_factory.mktemp("cwd"))
