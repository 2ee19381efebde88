# shellcheck shell=bash
# The helpers the steps share (in the step's own shell): starting the bundle's binaries, the
# libraries they resolve to, the verdicts other than pass and fail, the tools a step looks for.

# A bundled binary as it must start here: through the bundle's loader where the node's glibc is
# too old, else with the library path.
run_bundled() {
  local bin=$1
  shift
  if [ -n "$TRIPOD_LOADER" ]; then
    "$TRIPOD_LOADER" --library-path "$TRIPOD_LIBS" "$bin" "$@"
  else
    LD_LIBRARY_PATH=$TRIPOD_LIBS "$bin" "$@"
  fi
}
tripod() { run_bundled "$TRIPOD_BIN" "$@"; }
# The libraries a binary resolves to, as it will start (ldd, or the bundle's loader's --list).
list_libs() {
  if [ -n "$TRIPOD_LOADER" ]; then
    "$TRIPOD_LOADER" --library-path "$TRIPOD_LIBS" --list "$1"
  else
    LD_LIBRARY_PATH=$TRIPOD_LIBS ldd "$1"
  fi
}
# The first folder of the ':'-separated PATH holding SONAME, else the system's loader cache entry
# (dlopen searches both); nothing when neither has it.
find_soname() {  # SONAME PATH
  local dir folders=()
  IFS=: read -ra folders <<<"$2"
  for dir in "${folders[@]}"; do
    [ -n "$dir" ] && [ -e "$dir/$1" ] && { echo "$dir/$1"; return 0; }
  done
  { ldconfig -p 2>/dev/null || true; } | awk -v so="$1" '$1 == so {print $NF; exit}'
}
skip() { echo "$*" >"$STEP_DIR/skip.txt"; echo "skipped: $*"; exit 77; }
# Part of the step ran and what ran passed, but it measured less than it should: "unrun", so the
# verdict is INCOMPLETE, neither PASS nor FAIL.
incomplete() { echo "$*" >"$STEP_DIR/skip.txt"; echo "incomplete: $*"; exit 75; }
dry() { [ "$DRY_RUN" = 1 ]; }
# The cores this process may run on (its affinity). Not plain nproc: GNU nproc answers
# OMP_NUM_THREADS when that is set (CTest sets it to 2), which is no count of cores.
cores() { env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc; }
# Whether this tripod was built with the CUDA backend: its --backend line lists it (only that line:
# --comm's help names "--backend cuda" in every build). The help text is captured first: `| grep -q`
# would close the pipe early and pipefail would read that as failure.
has_cuda_backend() {
  local help line
  help=$(tripod train --help 2>/dev/null || true)
  line=$(printf '%s\n' "$help" | grep -E '^ *--backend ' || true)
  [[ "$line" == *cuda* ]]
}

# $WORK/tripod-run: tripod as one executable for a tool that starts it (compute-sanitizer, ncu),
# which itself runs with the node's libraries; only tripod gets the bundle's (through exec).
# [BIN WRAPPER]: another binary of the bundle (the GPU tests) the same way.
write_tripod_wrapper() {
  local bin=${1:-$TRIPOD_BIN} wrapper=${2:-$WORK/tripod-run}
  if [ -n "$TRIPOD_LOADER" ]; then
    printf '#!/bin/sh\nexec "%s" --library-path "%s" "%s" "$@"\n' "$TRIPOD_LOADER" "$TRIPOD_LIBS" "$bin" >"$wrapper"
  else
    printf '#!/bin/sh\nLD_LIBRARY_PATH="%s" exec "%s" "$@"\n' "$TRIPOD_LIBS" "$bin" >"$wrapper"
  fi
  chmod +x "$wrapper"
}

# NAME [PLACES...]: the first executable of NAME on the PATH, else of the places (globs expanded).
find_tool() {
  local name=$1 c
  shift
  for c in "$(command -v "$name" || true)" "$@"; do
    [ -n "$c" ] && [ -x "$c" ] && { echo "$c"; return 0; }
  done
  return 1
}
find_sanitizer() {
  find_tool compute-sanitizer /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer
}
