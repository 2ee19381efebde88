#!/usr/bin/env bash
# The main job on its embedded default: set up, build, prepare the default corpus and train the
# `tiny` preset on it (about a minute on 2 CPU cores), printing one line per 10 steps.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup.sh
bash ci/prepare-data.sh
build/release/reference/tripod train --config tiny "$@"
