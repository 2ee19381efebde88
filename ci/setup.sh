#!/usr/bin/env bash
# Installs what Tripod needs from Debian's packages (when missing), then configures and builds the
# release preset. Safe to run repeatedly: installed packages and an up-to-date build are skipped.
# Works as root or with sudo on Debian 12 / Ubuntu 22.04+.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential cmake pkg-config git
  libopenblas-openmp-dev libopenmpi-dev openmpi-bin
  libgtest-dev googletest libbenchmark-dev nlohmann-json3-dev libcli11-dev
  libsentencepiece-dev sentencepiece libxxhash-dev
  python3 python3-numpy python3-scipy python3-matplotlib python3-pytest python3-torch
  python3-jsonschema  # suites/python/test_output_schemas.py checks the CLI's JSON outputs against reports/schemas/
  python3-xxhash  # reports/golden/bundle.py checks a golden bundle's files against the XXH64 bundle.json records
  bible-kjv
  dict-gcide jargon-text  # the natural-text scaling corpus (scaling/natural_corpus.py)
  clang libclang-rt-14-dev  # libFuzzer and the sanitizer runtimes for ci/fuzz.sh (clang 14 on Debian 12)
  chromium  # headless: `tripod report --check` renders the report to a PNG (reports/report/render_check.py)
)

missing=()
for pkg in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "ci/setup.sh: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The CUDA toolkit is optional; where it is installed but not on PATH, point CMake at it.
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi

cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)"
