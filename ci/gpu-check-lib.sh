# shellcheck shell=bash
# The machinery of ci/gpu-check.sh, sourced by it: where the binaries' libraries and Python are,
# and how a step is run (in its own shell under `timeout`), timed and recorded in steps.tsv.
# The steps themselves are in gpu-check-steps.sh (which sources ci/gpu-check-steps/*.sh).

join_path() {  # non-empty arguments joined with ':'
  local out="" part
  for part in "$@"; do [ -z "$part" ] || out=${out:+$out:}$part; done
  printf '%s' "$out"
}

oneline() { printf '%s' "$1" | tr '\t\n' '  ' | cut -c1-400; }

# ARCHIVE.tar.xz unpacked into DIR: with tar and xz, or with Python's tarfile where a bare image
# has no xz.
unpack_xz() {
  if command -v xz >/dev/null; then
    tar -C "$2" -xJf "$1"
  else
    "$PY" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$1" "$2"
  fi
}

# The first Python that has numpy and torch (the peer needs torch), else one with numpy. Found, not
# imported: importing torch first reads its large CUDA libraries (seconds on a freshly started node),
# and the probe imports it anyway.
pick_python() {
  if [ -n "${TRIPOD_PYTHON:-}" ]; then echo "$TRIPOD_PYTHON"; return; fi
  local p modules
  for modules in "numpy torch" "numpy"; do
    for p in python3 /usr/bin/python3; do
      command -v "$p" >/dev/null && "$p" -c 'import importlib.util, sys
sys.exit(any(importlib.util.find_spec(m) is None for m in sys.argv[1:]))' $modules 2>/dev/null && { echo "$p"; return; }
    done
  done
  echo python3
}

# The "not found" lines of ldd for BIN with LD_LIBRARY_PATH=PATH (a library, or a symbol version:
# "version `GLIBC_2.36' not found"). Read whole before any grep, so no early exit breaks a pipe.
missing_libs() {
  local out
  out=$(LD_LIBRARY_PATH=$2 ldd "$1" 2>&1 || true)
  printf '%s\n' "$out" | grep 'not found' || true
}

is_cuda_soname() {
  case "$1" in libcuda.so.*|libcudart.so.*|libcublas.so.*|libcublasLt.so.*|libnccl.so.*) return 0 ;; esac
  return 1
}

# CUDA libraries the CUDA backend loads at run time (dlopen), which ldd therefore does not list:
# cuBLASLt (reference/backend/cuda/gemm/cublaslt_library.h; suites/python/test_gpu_check.py keeps
# this name equal to the one the binaries load).
CUDA_SONAMES_LOADED_AT_RUN_TIME="libcublasLt.so.13"

# The CUDA sonames the binaries need (from ldd with the bundle's libraries only), and those loaded
# at run time by binaries built with the CUDA backend (those linking libcudart).
cuda_sonames_needed() {
  local bin
  for bin in "$TRIPOD_BIN" "$GTEST_BIN"; do
    [ -x "$bin" ] || continue
    LD_LIBRARY_PATH=$BUNDLE_LIBS ldd "$bin" 2>/dev/null | awk '/=>/ {print $1}'
  done | while read -r soname; do
    is_cuda_soname "$soname" || continue
    echo "$soname"
    case "$soname" in libcudart.so.*) printf '%s\n' $CUDA_SONAMES_LOADED_AT_RUN_TIME ;; esac
  done | sort -u
}

# Folders holding the node's CUDA libraries: the toolkit's and the nvidia-* pip packages' of the
# Python that has torch (either first), then the driver's mount; only folders holding a needed
# soname. The toolkit-first choice is kept unless ldd finds a CUDA symbol version missing in it
# (the binaries were linked against CUDA 13.x here; the node's toolkit may be an older 13) and
# the pip-first choice has none missing.
find_cuda_lib_dirs() {
  local toolkit=() pip=() driver=(/usr/local/nvidia/lib64 /usr/local/nvidia/lib) dir
  [ -z "${CUDA_HOME:-}" ] || toolkit+=("$CUDA_HOME/lib64")
  toolkit+=(/usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib)
  while read -r dir; do pip+=("$dir"); done < <("$PY" - 2>/dev/null <<'EOF'
import pathlib
try:
    import nvidia
except ImportError:
    raise SystemExit(0)
for root in nvidia.__path__:
    for lib in sorted(pathlib.Path(root).glob("**/lib")):
        print(lib)
EOF
)
  local first second
  first=$(cuda_dirs_from "${toolkit[@]}" "${pip[@]:-}" "${driver[@]}")
  second=$(cuda_dirs_from "${pip[@]:-}" "${toolkit[@]}" "${driver[@]}")
  if cuda_versions_missing "$first" && ! cuda_versions_missing "$second"; then echo "$second"; else echo "$first"; fi
}

# For each needed CUDA soname, the first of the given folders that holds it.
cuda_dirs_from() {
  local dirs=() soname dir
  for soname in $(cuda_sonames_needed); do
    for dir in "$@"; do
      [ -n "$dir" ] && [ -e "$dir/$soname" ] || continue
      [[ " ${dirs[*]:-} " == *" $dir "* ]] || dirs+=("$dir")
      break
    done
  done
  join_path "${dirs[@]:-}"
}

cuda_versions_missing() {  # CUDA_DIRS: whether ldd finds a CUDA library or symbol version missing
  local bin
  for bin in "$TRIPOD_BIN" "$GTEST_BIN"; do
    [ -x "$bin" ] || continue
    missing_libs "$bin" "$(join_path "$BUNDLE_LIBS" "$1")" | grep -E 'libcudart|libcublas|libnccl' >/dev/null &&
        return 0
  done
  return 1
}

# The bundle's libstdc++/libgcc_s only where the node's are missing or older than the binaries
# need (ldd then reports "version `GLIBCXX_3.4.30' not found" or the library "not found").
compat_dir_if_needed() {
  [ -n "$BUNDLE" ] && [ -d "$BUNDLE/lib/compat" ] || return 0
  local bin
  for bin in "$TRIPOD_BIN" "$GTEST_BIN"; do
    [ -x "$bin" ] || continue
    if missing_libs "$bin" "$(join_path "$BUNDLE_LIBS" "$CUDA_LIBS")" |
        grep -E 'GLIBCXX|CXXABI|GCC_|libstdc\+\+|libgcc_s' >/dev/null; then
      echo "$BUNDLE/lib/compat"
      return 0
    fi
  done
}

# Whether the node's glibc is older than the binaries need (ldd: "version `GLIBC_2.36' not found")
# and the bundle carries its own (lib/glibc).
# TRIPOD_GPU_CHECK_BUNDLED_GLIBC=1 forces that path (tests run it on a machine that does not need it).
needs_bundled_glibc() {
  [ -n "$BUNDLE" ] && [ -x "$BUNDLE/lib/glibc/ld-linux-x86-64.so.2" ] || return 1
  [ "${TRIPOD_GPU_CHECK_BUNDLED_GLIBC:-0}" != 1 ] || return 0
  local bin
  for bin in "$TRIPOD_BIN" "$GTEST_BIN"; do
    [ -x "$bin" ] || continue
    missing_libs "$bin" "$(join_path "$BUNDLE_LIBS" "$BUNDLE/lib/compat" "$CUDA_LIBS")" |
        grep "GLIBC_[0-9]" >/dev/null && return 0
  done
  return 1
}

record() {  # name status seconds reason key
  printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$(oneline "$4")" "$(oneline "$5")" >>"$STEPS_TSV"
  printf '[%4ss] %-18s %-8s %s\n' "$(( $(date +%s) - START ))" "$1" "$2" "$(oneline "$4")"
}

# Every process a step left behind, killed: Open MPI starts each rank in a process group of its
# own, so `timeout`'s kill of the step's group misses ranks whose mpirun was killed first (-k), and
# they would hold the GPU through the next steps. A step's processes carry its marker in their
# environment (inherited through mpirun); one grep over /proc finds them.
kill_step_leftovers() {  # marker name
  local files pid pids=()
  files=$(grep -lzxF "TRIPOD_GPU_CHECK_STEP=$1" /proc/[0-9]*/environ 2>/dev/null || true)
  for pid in $files; do
    pid=${pid#/proc/}
    pids+=("${pid%/environ}")
  done
  [ ${#pids[@]} -gt 0 ] || return 0
  kill -KILL "${pids[@]}" 2>/dev/null || true
  echo "gpu-check: killed ${#pids[@]} process(es) step $2 left running: ${pids[*]}" | tee -a "$OUT_DIR/$2/log.txt"
}

# " in FUNCTION" where a crash report's frames name one (reports/symbolize_stack.py --site, with
# the binaries' own symbol tables; the named stack beside the log), else nothing.
crash_site() {  # step dir
  local bin site
  for bin in "$TRIPOD_BIN" "$GTEST_BIN"; do
    [ -f "$bin" ] || continue
    if site=$("$PY" "$ROOT/reports/symbolize_stack.py" "$1/log.txt" "$bin" --site \
                --out "$1/stack-$(basename "$bin").txt" 2>/dev/null); then
      printf ' in %s' "$site"
      return 0
    fi
  done
}

run_step() {  # name limit function
  local name=$1 limit=$2 fn=$3
  local left=$((DEADLINE - $(date +%s))) cut=0
  if [ "$left" -lt 5 ]; then
    # not "skipped": a step that never ran leaves the check incomplete, never green
    record "$name" unrun 0 "out of the ${BUDGET} s budget" ""
    return 0
  fi
  if [ "$limit" -gt "$left" ]; then limit=$left; cut=1; fi
  local dir=$OUT_DIR/$name rc=0 t0 secs status reason="" marker="$name.$$.$RANDOM"
  mkdir -p "$dir"
  t0=$(date +%s.%N)
  STEP_DIR=$dir STEP_LIMIT=$limit TRIPOD_GPU_CHECK_STEP=$marker timeout -k 5 "$limit" \
      bash -c 'set -euo pipefail; source "$ROOT/ci/gpu-check-steps.sh"; '"$fn" >"$dir/log.txt" 2>&1 || rc=$?
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  kill_step_leftovers "$marker" "$name"
  # The step's last words (an empty log is no reason to stop the whole run under pipefail): the
  # last error a program reported (tripod's, a Python exception's), else the last line that is not
  # a rule of Open MPI's banner (an MPI step's failure read "exit 1: -------", the banner mpirun
  # prints after a rank's error).
  local last crash
  last=$({ grep -E '^(tripod: (internal )?error: |[A-Za-z_.]*(Error|Exception): )' "$dir/log.txt" || true; } | tail -1)
  [ -n "$last" ] || last=$({ grep -Ev '^[[:space:]]*$|^-+$' "$dir/log.txt" || true; } | tail -1)
  # A program killed by a fatal signal printed its stack first (reference/core/crash_report.h):
  # that, not whatever the step printed after it, is the reason.
  crash=$({ grep -m1 ': fatal signal ' "$dir/log.txt" || true; } | sed 's/; its stack follows.*//')
  case $rc in
    0) status=pass ;;
    77) status=skipped; reason=$(cat "$dir/skip.txt" 2>/dev/null || echo "skipped") ;;
    75) status=unrun; reason=$(cat "$dir/skip.txt" 2>/dev/null || echo "incomplete") ;;
    124|137)
      if awk -v s="$secs" -v l="$limit" 'BEGIN { exit !(s < l - 1) }'; then
        # before its limit: the program's own exit (tripod's communication watchdog exits 124,
        # a kill for memory 137), not `timeout`'s
        status=fail; reason="exit $rc after ${secs} s, before its ${limit} s limit (the program's own: a communication timeout, or killed for memory?): $last"
      elif [ "$cut" = 1 ]; then
        # its limit was what the budget had left, not its own: not measured, not failed
        status=unrun; reason="cut at ${limit} s, all the budget had left (its own limit is $2 s)"
      else
        status=timeout; reason="killed at its ${limit} s limit"
      fi ;;
    *)
      status=fail
      if [ -n "$crash" ]; then
        reason="exit $rc: $crash$(crash_site "$dir"); its stack is in $name/log.txt (reports/symbolize_stack.py LOG BINARY names the functions)"
      else
        reason="exit $rc: $last"
      fi ;;
  esac
  record "$name" "$status" "$secs" "$reason" ""
}

print_plan() {
  {
    local mode="on this machine's GPU"
    [ "$DRY_RUN" = 0 ] || mode="DRY RUN (no GPU needed)"
    echo "gpu-check: $mode, budget ${BUDGET} s, results in $OUT_DIR"
    echo "  tripod            $TRIPOD_BIN"
    echo "  tripod_gpu_tests  $GTEST_BIN"
    echo "  library path      ${TRIPOD_LIBS:-(the system default)}"
    echo "  python            $PY"
    printf '  %-14s %8s  %s\n' "step" "limit s" "runs"
    local entry name limit needs_gpu has_dry what
    for entry in "${PLAN[@]}"; do
      read -r name limit needs_gpu has_dry <<<"$entry"
      [ -z "$ONLY" ] || [[ "$ONLY" == *",$name,"* ]] || continue
      what="on the GPU"
      [ "$needs_gpu" = 0 ] && what="on the CPU"
      if [ "$DRY_RUN" = 1 ] && [ "$needs_gpu" = 1 ]; then
        what="skipped: no GPU"
        [ "$has_dry" = 1 ] && what="$what; its CPU form as dry-$name"
      fi
      printf '  %-14s %8s  %s\n' "$name" "$limit" "$what"
    done
  } | tee "$OUT_DIR/plan.txt"
}
