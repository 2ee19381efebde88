#!/bin/sh
# Runs a command (an mpirun) with an Open MPI session directory of its own, removed afterwards;
# exits with the command's status.
#
# Why: every Open MPI 4 launch (mpirun, or a singleton's MPI_Init) makes its session directory
# under one folder shared by all of a user's launches, <tmp>/ompi.<host>.<uid>, and when it ends
# removes that folder if it looks empty. Another launch starting at that moment has just found the
# folder and fails creating its own inside it ("A call to mkdir was unable to create the desired
# directory ... orte_session_dir failed"; Open MPI issue 8510). CTest runs two tests at a time, so
# two suites' launches met there and one CI run failed on it. A base folder per test shares nothing.
# The Python suites do the same for each pytest process (suites/python/conftest.py).
set -u
# Inside the folder a user set for them, if any.
base=$(mktemp -d "${OMPI_MCA_orte_tmpdir_base:-${TMPDIR:-/tmp}}/tripod-mpi.XXXXXX") || exit 1
OMPI_MCA_orte_tmpdir_base=$base "$@"
status=$?
rm -rf "$base"
exit $status
