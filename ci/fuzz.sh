#!/usr/bin/env bash
# Fuzzes Tripod's file readers with libFuzzer under ASan/UBSan for a bounded time:
#   ci/fuzz.sh [SECONDS_PER_TARGET]   (default 20)
# Builds suites/fuzz with clang in build/fuzz (-DTRIPOD_FUZZ=ON), writes each target's seed corpus
# with the project's own writers, runs every target for the given time (several at once, up to one
# per core; TRIPOD_FUZZ_JOBS overrides), and prints per target the executions, exec/s and libFuzzer's
# final coverage (cov: edges, ft: features). Exits 1 on any crash, hang (-timeout), memory blow-up
# (-rss_limit_mb) or sanitizer report, leaving the input that caused it in build/fuzz/crashes/<target>/;
# exits 77 (CTest: skipped) when clang or its libFuzzer runtime is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET=${1:-20}
BUILD=${TRIPOD_FUZZ_BUILD_DIR:-build/fuzz}
JOBS=${TRIPOD_FUZZ_JOBS:-$(nproc)}

# clang and libFuzzer (Debian: clang, libclang-rt-14-dev; ci/setup.sh installs them).
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
if ! command -v clang >/dev/null || ! command -v clang++ >/dev/null; then
  echo "ci/fuzz.sh: skipped: clang/clang++ not found (ci/setup.sh installs Debian's clang)"
  exit 77
fi
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' > "$probe/probe.cpp"
if ! clang++ -fsanitize=fuzzer,address,undefined "$probe/probe.cpp" -o "$probe/probe" 2>"$probe/err"; then
  echo "ci/fuzz.sh: skipped: clang++ cannot link libFuzzer with ASan/UBSan (ci/setup.sh installs libclang-rt-14-dev):"
  cat "$probe/err"
  exit 77
fi

echo "== build ($BUILD, clang, -fsanitize=fuzzer,address,undefined)"
CC=clang CXX=clang++ cmake -S . -B "$BUILD" -DTRIPOD_FUZZ=ON >/dev/null
cmake --build "$BUILD" -j "$(nproc)" | grep -v '^\[' || true
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "ci/fuzz.sh: the fuzz build failed"; exit 1; }

targets=()
for program in "$BUILD"/suites/fuzz/fuzz_*; do
  [ -f "$program" ] && [ -x "$program" ] && targets+=("$(basename "$program")")
done
((${#targets[@]})) || { echo "ci/fuzz.sh: no fuzz targets were built"; exit 1; }

# Every run starts from fresh seeds (the readers' real files), so its figures are comparable; crash
# inputs are kept, under names libFuzzer derives from their contents.
for target in "${targets[@]}"; do
  name=${target#fuzz_}
  rm -rf "$BUILD/corpus/$name"
  mkdir -p "$BUILD/crashes/$name" "$BUILD/logs"
  TRIPOD_FUZZ_WRITE_SEEDS="$BUILD/corpus/$name" "$BUILD/suites/fuzz/$target"
done

run_target() {
  local target=$1 name=${1#fuzz_} dict=()
  [ -f "$BUILD/suites/fuzz/$target.dict" ] && dict=(-dict="$BUILD/suites/fuzz/$target.dict")
  local rc=0
  UBSAN_OPTIONS=print_stacktrace=1 "$BUILD/suites/fuzz/$target" "${dict[@]}" \
    -max_total_time="$SECONDS_PER_TARGET" -timeout=5 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$BUILD/crashes/$name/" "$BUILD/corpus/$name" >"$BUILD/logs/$name.log" 2>&1 || rc=$?
  echo "$rc" >"$BUILD/logs/$name.rc"
}

echo "== fuzz ${#targets[@]} targets for ${SECONDS_PER_TARGET} s each, $JOBS at a time"
running=0
for target in "${targets[@]}"; do
  run_target "$target" &
  running=$((running + 1))
  if ((running >= JOBS)); then
    wait -n || true
    running=$((running - 1))
  fi
done
wait

failed=0
printf '%-20s %-8s %12s %9s %7s %7s\n' target result execs exec/s cov ft
for target in "${targets[@]}"; do
  name=${target#fuzz_}
  log="$BUILD/logs/$name.log"
  rc=$(cat "$BUILD/logs/$name.rc")
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]* ft: [0-9]*' "$log" | tail -1 || true)
  result=ok
  [ "$rc" -eq 0 ] || { result=FAILED; failed=1; }
  printf '%-20s %-8s %12s %9s %7s %7s\n' "$name" "$result" "${execs:-?}" "${rate:-?}" \
    "$(echo "$cov" | awk '{print $2}')" "$(echo "$cov" | awk '{print $4}')"
done

if ((failed)); then
  for target in "${targets[@]}"; do
    name=${target#fuzz_}
    [ "$(cat "$BUILD/logs/$name.rc")" -eq 0 ] && continue
    echo
    echo "== $name failed (exit $(cat "$BUILD/logs/$name.rc")); the report (full log: $BUILD/logs/$name.log):"
    grep -v -E '^#[0-9]+\s+(NEW|REDUCE|pulse|INITED|RELOAD)|NEW_FUNC' "$BUILD/logs/$name.log" | grep -v '^"' | tail -40
    echo "the input that caused it: $(grep -o "Test unit written to .*" "$BUILD/logs/$name.log" | sed 's/Test unit written to //')"
    echo "reproduce: $BUILD/suites/fuzz/$target <that file>"
  done
  echo
  echo "ci/fuzz.sh: FAILED; crash inputs are in $BUILD/crashes/"
  exit 1
fi
echo "ci/fuzz.sh: no crash, hang or sanitizer report (crash inputs would be in $BUILD/crashes/)"
