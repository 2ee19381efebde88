#!/usr/bin/env bash
# Set up, build and run every test suite (GoogleTest unit suites and the Python suites) via CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup.sh
# Passive OpenMP waiting keeps tests fast when other processes (or other ranks) share the cores.
export OMP_WAIT_POLICY=PASSIVE
# Two tests at a time on any machine: the suites' PROCESSORS (suites/CMakeLists.txt) are sized for two
# cores, and more at once would run several multi-rank suites side by side, which no run has proven.
ctest --preset release -j 2
