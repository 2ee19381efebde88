#!/usr/bin/env bash
# Prepares the default corpus: the King James Bible (public domain, Debian's bible-kjv), tokenized
# with a 2048-piece SentencePiece BPE into data/kjv. Skipped when already prepared.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -f data/kjv/meta.json ]; then exit 0; fi
mkdir -p data
# -l10000: one verse per line (no 80-column wrapping); sed drops the verse numbers.
bible -l10000 gen1:1-rev22:21 | sed -E 's/^ +[0-9]+ //' > data/kjv.txt
build/release/reference/tripod data prepare --input data/kjv.txt --out data/kjv --vocab-size 2048
