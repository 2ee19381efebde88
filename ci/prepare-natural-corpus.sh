#!/usr/bin/env bash
# Prepares the natural-text scaling corpus from Debian's packages (bible-kjv, dict-gcide,
# jargon-text; scaling/natural_corpus.py says what and how): documents deduplicated, 2% held out
# at random by document, a 2048-piece BPE trained on the train split, into data/natural-text.
# Skipped when already prepared. The `natural` scaling preset reads it.
set -euo pipefail
cd "$(dirname "$0")/.."
out=data/natural-text
if [ -f "$out/tokens/meta.json" ]; then exit 0; fi
/usr/bin/python3 -m scaling.natural_corpus --out "$out"
build/release/reference/tripod data prepare --input "$out/train.txt" --val-input "$out/val.txt" \
  --out "$out/tokens" --vocab-size 2048
