#!/usr/bin/env bash
# The main job on its embedded default, what a user of a new node wants first (no GPU needed):
#   1. set up and build; prepare the default corpus (King James Bible, 2048-piece BPE)
#   2. train the `tiny` GPT on it for 400 steps (~30 s), loss falling from ~7.6 to ~4.4
#   3. `tripod conform` over every layout of 8 local CPU ranks (launched here with mpirun)
#   4. `tripod bench --quick`: GEMM, kernel, collective and end-to-end training sweeps
#   5. `tripod golden`: a bundle of the first 8 steps, the PyTorch peer trained from it (Debian's
#      torch, fp32) and `tripod golden check` of the peer against Tripod's fp64 reference
#   6. `tripod report`: one HTML page of every figure (runs/main/report.html), checked in headless
#      Chromium (a few seconds): no broken image, no console error, not blank
#   7. a short summary, and where the results and the report are (runs/main/)
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

echo "== golden: the first 8 steps as a bundle, the PyTorch peer trained from it, and the check =="
rm -rf "$OUT/golden"
"$TRIPOD" golden --config tiny --steps 8 --out "$OUT/golden/bundle"
/usr/bin/python3 -m reports.peers.single "$OUT/golden/bundle" --precision fp32 --out "$OUT/golden/torch-fp32.json"
"$TRIPOD" golden check "$OUT/golden/bundle" "$OUT/golden/torch-fp32.json" --json "$OUT/golden/torch-fp32-check.json" \
  | tail -n 2

echo "== report: one page of figures, rendered in headless Chromium =="
# The training metrics are the tiny config's (train.metrics in reference/configs/tiny.json).
"$TRIPOD" report "$OUT" --extra runs/tiny/metrics.jsonl --check

/usr/bin/python3 -m reports.main_summary "$OUT"
