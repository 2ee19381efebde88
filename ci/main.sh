#!/usr/bin/env bash
# The main job on its embedded default, what a user of a new node wants first (no GPU needed):
#   1. set up and build; prepare the default corpus (King James Bible, 2048-piece BPE)
#   2. train the `tiny` GPT on it for 400 steps (~30 s), loss falling from ~7.6 to ~4.4
#   3. `tripod conform` over every layout of 8 local CPU ranks (launched here with mpirun)
#   4. `tripod bench --quick`: GEMM, kernel, collective and end-to-end training sweeps
#   5. a short summary, and where the results and plots are (runs/main/)
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup.sh
bash ci/prepare-data.sh
TRIPOD=build/release/reference/tripod
OUT=runs/main
mkdir -p "$OUT"

echo "== train: tiny GPT on the King James Bible =="
"$TRIPOD" train --config tiny "$@"

echo "== conform: every layout of 8 ranks against the single-device reference =="
[ "$(id -u)" -ne 0 ] || export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun --oversubscribe --mca btl self,vader -np 8 \
  "$TRIPOD" conform --dtype fp64 --json "$OUT/conform.json" --junit "$OUT/conform.xml"

echo "== bench --quick =="
"$TRIPOD" bench --quick --out "$OUT/bench"

/usr/bin/python3 -m reports.main_summary "$OUT"
