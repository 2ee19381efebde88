#!/usr/bin/env bash
# Set up, build and run every test suite (GoogleTest unit suites and the Python suites) via CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup.sh
# Passive OpenMP waiting keeps tests fast when other processes (or other ranks) share the cores.
export OMP_WAIT_POLICY=PASSIVE
ctest --preset release -j 1
