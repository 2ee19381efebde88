# shellcheck shell=bash
# The steps that check results: the probe of the node, every kernel against the CPU, training on
# the GPU against the CPU, the golden bundle, the GPU tests and compute-sanitizer.

step_probe() {
  local problems=()
  echo "== tools"
  local tool
  for tool in timeout tar ldd awk "$PY"; do
    command -v "$tool" >/dev/null || problems+=("$tool not found")
  done
  for f in reports/gpu_peer.py reports/torch_fp32.py reports/torch_gemm_rate.py reports/torch_attention_rate.py reports/compare_training.py reports/gpu_check_summary.py reference/configs/tiny.json \
           reference/configs/gpt2-124m.json ci/gpu-check-lib.sh ci/gpu-check-steps.sh; do
    [ -f "$ROOT/$f" ] || problems+=("$f missing")
  done
  "$PY" -c 'import numpy' || problems+=("$PY cannot import numpy")
  "$PY" - >"$STEP_DIR/python.json" <<'EOF' || problems+=("$PY cannot import torch (the peer needs it)")
import json, platform, sys
info = {"python": sys.executable, "version": platform.python_version()}
try:
    import numpy
    info["numpy"] = numpy.__version__
    import torch
    info.update(torch=torch.__version__, torch_cuda=torch.version.cuda, cuda_available=torch.cuda.is_available())
    if torch.cuda.is_available():
        info["device"] = torch.cuda.get_device_name(0)
finally:
    print(json.dumps(info))
import torch  # fail the probe when torch is missing
EOF
  cat "$STEP_DIR/python.json"
  echo "== system"
  { echo "kernel $(uname -r)"; grep -m1 'model name' /proc/cpuinfo || true; echo "cores $(cores)";
    grep -m1 MemTotal /proc/meminfo || true; } | tee "$STEP_DIR/system.txt"
  echo "== binaries and their libraries (library path $TRIPOD_LIBS${TRIPOD_LOADER:+, through $TRIPOD_LOADER})"
  { echo "library path: $TRIPOD_LIBS"; echo "loader: ${TRIPOD_LOADER:-the system}"; } >"$STEP_DIR/library_path.txt"
  local bin name missing has_cuda=0
  for bin in "$TRIPOD_BIN" "$GTEST_BIN"; do
    name=$(basename "$bin")
    if [ ! -x "$bin" ]; then
      if [ "$name" = tripod_gpu_tests ] && dry && ! has_cuda_backend; then
        echo "note: $bin not built (this build has no CUDA backend; a GPU run needs a CUDA build)"
        continue
      fi
      problems+=("$bin not found")
      continue
    fi
    list_libs "$bin" >"$STEP_DIR/ldd-$name.txt" 2>&1 || true
    sed 's/^/    /' "$STEP_DIR/ldd-$name.txt"
    missing=$(grep 'not found' "$STEP_DIR/ldd-$name.txt" || true)
    if dry; then  # the node provides CUDA; here only the others must resolve
      missing=$(echo "$missing" | grep -vE 'libcuda\.so|libcudart|libcublas|libnccl' || true)
    fi
    [ -z "$missing" ] || problems+=("$name: $(echo "$missing" | tr -s ' \t\n' ' ')")
  done
  if [ -x "$TRIPOD_BIN" ] && has_cuda_backend; then has_cuda=1; fi
  # The build's identity and the libraries it runs on (commit, OpenBLAS, Open MPI, CUDA runtime and
  # driver, NCCL), as the binary itself reports them: the record says what was measured.
  if [ -x "$TRIPOD_BIN" ]; then
    echo "== tripod --version"
    if tripod --version >"$STEP_DIR/version.txt" 2>&1; then
      sed 's/^/    /' "$STEP_DIR/version.txt"
    elif dry; then
      echo "note: tripod --version did not start here: $(tail -1 "$STEP_DIR/version.txt")"
    else
      problems+=("tripod --version failed: $(tail -1 "$STEP_DIR/version.txt")")
    fi
  fi
  # What the CUDA backend loads itself (ldd cannot list it): found now, or a clear probe failure
  # instead of an error at the first CUDA step.
  if [ "$has_cuda" = 1 ]; then
    local soname found
    for soname in $CUDA_SONAMES_LOADED_AT_RUN_TIME; do
      found=$(find_soname "$soname" "$TRIPOD_LIBS")
      echo "    $soname (loaded by the CUDA backend) => ${found:-not found}"
      echo "$soname (loaded at run time) => ${found:-not found}" >>"$STEP_DIR/ldd-$(basename "$TRIPOD_BIN").txt"
      [ -n "$found" ] || dry || problems+=("$soname, which the CUDA backend loads, is in none of $TRIPOD_LIBS nor the loader cache")
    done
  fi
  if ! dry; then
    [ "$has_cuda" = 1 ] || problems+=("$TRIPOD_BIN has no cuda backend (build with CUDA: ci/gpu-bundle.sh)")
    echo "== GPU"
    if ! command -v nvidia-smi >/dev/null; then
      echo "nvidia-smi not found" >"$WORK/no_gpu"
    else
      nvidia-smi || true
      nvidia-smi -q >"$STEP_DIR/nvidia-smi-q.txt" 2>&1 || true
      nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,compute_cap --format=csv,noheader \
          >"$STEP_DIR/gpus.csv" 2>&1 || true
      grep -q . "$STEP_DIR/gpus.csv" && ! grep -qi 'fail\|error\|no devices' "$STEP_DIR/gpus.csv" ||
          echo "nvidia-smi lists no usable GPU: $(head -1 "$STEP_DIR/gpus.csv")" >"$WORK/no_gpu"
    fi
    [ ! -f "$WORK/no_gpu" ] || problems+=("$(cat "$WORK/no_gpu")")
    local nvcc
    nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
    "$nvcc" --version >"$STEP_DIR/nvcc.txt" 2>&1 || echo "nvcc not found (not needed: the binaries are built)" >"$STEP_DIR/nvcc.txt"
    cat "$STEP_DIR/nvcc.txt"
  fi
  local sanitizer
  sanitizer=$(find_sanitizer || true)
  echo "compute-sanitizer: ${sanitizer:-not found}"
  if [ ${#problems[@]} -gt 0 ]; then
    printf 'PROBLEM: %s\n' "${problems[@]}"
    exit 1
  fi
  echo "probe: everything the run needs was found"
}

step_data() {
  # A Markov corpus (vocabulary 512) instead of the KJV BPE: the node has no prepared data, and a
  # GPU-vs-CPU comparison needs only the same tokens on both.
  tripod data synthetic --out "$WORK/data" --vocab-size 512 --order 1 --tokens 300000
}

# The device's memory for overwrite is NaN bytes (TRIPOD_POISON_UNWRITTEN; the CPU reference's is
# not): a kernel, or cuBLASLt, reading a padded operand's padding or a buffer's unwritten part then
# gives NaNs where the CPU has numbers, a failed case instead of whatever the pool last held.
check_backend() {  # DTYPE [ONLY]: every operation (or those whose name holds ONLY) against the CPU backend
  local dtype=$1 only=${2:-}
  export TRIPOD_POISON_UNWRITTEN=1
  if dry; then
    tripod check-backend --backend emulated --against cpu --dtype "$dtype" --only "${only:-layernorm}" \
        --json "$STEP_DIR/check.json"
  else
    tripod check-backend --backend cuda --against cpu --dtype "$dtype" ${only:+--only "$only"} --json "$STEP_DIR/check.json"
  fi
}
step_check-fp64() { check_backend fp64; }
step_check-fp32() { check_backend fp32; }
# The bf16 group: bf16 GEMMs, fp32 GEMMs with bf16 operands and the kernels that write those
# operands, attention under that policy, conversions to and from bf16 (each at its own bound).
step_check-bf16() { check_backend bf16 "$(dry && echo gemm || true)"; }

# One `tripod train` of tiny: NAME BACKEND DTYPE STEPS; metrics in $STEP_DIR/NAME.jsonl, checkpoint
# in $WORK/ckpt-NAME.
train_tiny() {
  local name=$1 backend=$2 dtype=$3 steps=$4 small=()
  # a miniature on CI's CPU (TINY_DRY_SEQ: a longer one where a step needs T > tiny's head size, 32)
  dry && small=(--set train.batch_size=4 --set train.seq_len="${TINY_DRY_SEQ:-32}")
  echo "== $name: tripod train --backend $backend, $dtype, $steps steps"
  rm -rf "${WORK:?}/ckpt-$name"  # a rerun into the same --out starts over (train refuses a root holding checkpoints)
  # The preset by its path: the fusion bisection runs this from $STEP_DIR, where a name is looked up
  # under ./reference/configs and then the build machine's source tree, absent on a GPU node (every
  # fusion read "fail": "config 'tiny' is neither a file nor a preset").
  tripod train --backend "$backend" --config "$ROOT/reference/configs/tiny.json" --set data.dir="$WORK/data" \
      --set train.dtype="$dtype" \
      --set train.steps="$steps" --set train.log_every=1 --set train.eval_every=0 "${small[@]}" \
      --set train.metrics="$STEP_DIR/$name.jsonl" --save "$WORK/ckpt-$name"
}
compare_runs() {  # A B MODE... : the run under test, the reference, then compare_training.py's options
  local a=$1 b=$2
  shift 2
  "$PY" "$ROOT/reports/compare_training.py" --a "$a.jsonl" --b "$b.jsonl" --ckpt-a "$WORK/ckpt-$(basename "$a")" \
      --ckpt-b "$WORK/ckpt-$(basename "$b")" --json "$STEP_DIR/compare.json" "$@"
}
train_vs_cpu() {  # DTYPE TOLERANCE
  local dtype=$1 tol=$2 device=cuda steps=$TRAIN_STEPS status=0
  if dry; then device=emulated; steps=3; fi
  train_tiny "cpu-$dtype" cpu "$dtype" "$steps"
  train_tiny "$device-$dtype" "$device" "$dtype" "$steps" || status=$?
  cd "$STEP_DIR" || exit 1
  [ "$status" -ne 0 ] ||
    compare_runs "$device-$dtype" "cpu-$dtype" --rel-tol "$tol" --steps "$steps" --label "tiny $dtype: $device vs cpu" ||
    status=$?
  if [ "$dtype" = bf16-mixed ] && { [ "$status" -ne 0 ] || [ "${TRIPOD_GPU_CHECK_BISECT:-}" = always ]; }; then
    bisect_fusions "$dtype" "$tol" "$device" "$steps"
  fi
  return "$status"
}
# A bf16-mixed GPU run that crashed or left the CPU's: is one of the CUDA backend's fused forms
# (TRIPOD_CUDA_FUSIONS) the cause? The GPU run again with none of them, then with each one alone,
# held to the same bound; one line each in fusions.txt, which the key figure shows. Saves a rerun of
# the lease to find out. (TRIPOD_GPU_CHECK_BISECT=always runs it on a pass too: the dry run's test.)
bisect_fusions() {  # DTYPE TOLERANCE DEVICE STEPS
  local dtype=$1 tol=$2 device=$3 steps=$4 fusions verdict
  : > "$STEP_DIR/fusions.txt"
  for fusions in none bias residual bias-grad operands loss-stats layernorm-grads qkv-bf16 loss-gradient; do
    verdict=fail
    if TRIPOD_CUDA_FUSIONS=$fusions train_tiny "$device-$dtype-$fusions" "$device" "$dtype" "$steps" \
           > "$STEP_DIR/fusions-$fusions.log" 2>&1 &&
       "$PY" "$ROOT/reports/compare_training.py" --a "$device-$dtype-$fusions.jsonl" --b "cpu-$dtype.jsonl" \
           --json "$STEP_DIR/compare-fusions-$fusions.json" --rel-tol "$tol" --steps "$steps" \
           --label "tiny $dtype: $device with TRIPOD_CUDA_FUSIONS=$fusions vs cpu" >> "$STEP_DIR/fusions-$fusions.log" 2>&1
    then verdict=pass; fi
    echo "$fusions $verdict" | tee -a "$STEP_DIR/fusions.txt"
  done
}
step_train-fp64() { train_vs_cpu fp64 1e-10; }
step_train-fp32() { train_vs_cpu fp32 1e-5; }
# bf16-mixed on the GPU against the CPU's emulation of the same policy: only the order of the fp32
# sums differs, which can move a bf16 rounding. The gate on every loss is 2.5x the whole
# bf16-vs-fp32 difference of this run on the CPU: 2e-4 since 2026-12-06 (8.0e-5 over its 10 steps,
# with the logits, the MLP's pre-activation and the gradient of gelu(fc) rounded to bf16: each
# rounded tensor is another place a sum order can move a rounding); 1e-4 before (3.9e-5,
# 2026-12-04). Gradient norms (bf16 vs fp32: up to 1.7e-2) and parameters are reported, not gated.
step_train-bf16() { train_vs_cpu bf16-mixed 2e-4; }
step_train-rerun() {
  local device=cuda steps=$TRAIN_STEPS
  if dry; then device=emulated; steps=3; fi
  # The first run is train-fp32's when it ran (same settings); else made here.
  if [ -f "$OUT_DIR/train-fp32/$device-fp32.jsonl" ] && [ -d "$WORK/ckpt-$device-fp32" ] && ! dry; then
    cp "$OUT_DIR/train-fp32/$device-fp32.jsonl" "$STEP_DIR/first.jsonl"
    cp -r "$WORK/ckpt-$device-fp32" "$WORK/ckpt-first"
  else
    train_tiny first "$device" fp32 "$steps"
  fi
  train_tiny second "$device" fp32 "$steps"
  cd "$STEP_DIR" || exit 1
  compare_runs second first --bitwise --steps "$steps" --label "tiny fp32: $device rerun, bit for bit"
}

golden_check() {  # NAME RESULTS: the bundle's checker on a peer's results; its verdict line goes to key.txt
  local log="$STEP_DIR/check-$1.log" status=0
  PYTHONPATH="$ROOT" "$PY" -m reports.golden.check "$STEP_DIR/bundle" "$2" --json "$STEP_DIR/check-$1.json" \
      > "$log" || status=$?
  echo "$1: $(tail -n 1 "$log")" | tee -a "$STEP_DIR/key.txt"
  return $status
}
step_golden() {
  # A golden bundle of tiny's first 5 steps (cut on the CPU), replayed by Tripod on the GPU and by
  # the PyTorch peer on the same device, fp64 and fp32, each held to the bundle's fp64 reference.
  local device=cuda torch_device=cuda small=() failed=0
  if dry; then device=emulated; torch_device=cpu; small=(--set train.batch_size=4 --set train.seq_len=32); fi
  tripod golden --config tiny --set data.dir="$WORK/data" "${small[@]}" --steps 5 --out "$STEP_DIR/bundle"
  for p in fp64 fp32; do
    tripod golden run "$STEP_DIR/bundle" --backend "$device" --precision "$p" --out "$STEP_DIR/tripod-$p.json" || failed=1
    golden_check "tripod-$device-$p" "$STEP_DIR/tripod-$p.json" || failed=1
    PYTHONPATH="$ROOT" "$PY" -m reports.peers.single "$STEP_DIR/bundle" --device "$torch_device" --precision "$p" \
        --out "$STEP_DIR/torch-$p.json" || failed=1
    golden_check "torch-$torch_device-$p" "$STEP_DIR/torch-$p.json" || failed=1
  done
  exit $failed
}

step_gtest() {
  [ -x "$GTEST_BIN" ] || { echo "$GTEST_BIN not found (a build without CUDA?)"; exit 1; }
  # The NCCL test starts MPI without mpirun (a singleton): the bundle's Open MPI then finds its
  # plugins, help files and orted only through the variables of its env.sh, as a launch does.
  use_bundled_openmpi || true
  run_bundled "$GTEST_BIN" --gtest_output="json:$STEP_DIR/gtest.json"
  local skipped
  skipped=$(grep -c '"result": "SKIPPED"' "$STEP_DIR/gtest.json" || true)
  if [ "${skipped:-0}" -gt 0 ]; then
    echo "$skipped GPU test(s) skipped on a machine whose probe found a GPU: the CUDA backend did not start"
    exit 1
  fi
}

# compute-sanitizer over every kernel family's small check-backend cases, one run a tool (each run
# pays the sanitizer's, CUDA's and cuBLASLt's start-up; a run a family rarely fitted the step):
#   memcheck   out-of-bounds and misaligned accesses, device-side faults
#   initcheck  reads of device memory nothing wrote: a padded operand's padding that cuBLASLt
#              reads, a buffer allocated for overwrite and not wholly overwritten
#   racecheck  shared-memory hazards (the row, reduction and column-sum kernels share partials)
# Each tool runs whatever the one before it found, with the step's time left but 30 s for each
# tool after it (when less is left, an equal share of it). A run cut short measured part of it: "unrun" (the verdict INCOMPLETE), not a
# pass. reports/sanitizer_log.py reads each log: the error count and the kernels named (ours are
# in namespace tripod::; a library's kernel reading our tensors counts too).
step_sanitizer() {
  local sanitizer
  sanitizer=$(find_sanitizer) || skip "compute-sanitizer not found"
  write_tripod_wrapper
  local cases tools tool i rc rows limit left after line failed="" cut="" key=""
  IFS=';' read -ra cases <<<"$SANITIZER_CASES"
  read -ra tools <<<"$SANITIZER_TOOLS"
  for i in "${!tools[@]}"; do
    tool=${tools[$i]}
    after=$((${#tools[@]} - 1 - i))
    left=$((STEP_LIMIT - 5 - SECONDS))
    limit=$((left - 30 * after))
    [ "$limit" -ge $((left / (after + 1))) ] || limit=$((left / (after + 1)))
    if [ "$limit" -lt 5 ]; then cut+=" $tool"; key+="; $tool: no time left"; continue; fi
    echo "== $tool: check-backend --backend cuda --dtype fp32 bf16 --only ${cases[*]} (limit ${limit} s)"
    rc=0
    timeout -k 3 "$limit" "$sanitizer" --tool "$tool" --target-processes all --error-exitcode 99 --print-limit 20 \
        "$WORK/tripod-run" check-backend --backend cuda --dtype fp32 bf16 --only "${cases[@]}" \
        --json "$STEP_DIR/check-$tool.json" >"$STEP_DIR/$tool.log" 2>&1 || rc=$?
    tail -4 "$STEP_DIR/$tool.log"
    if grep -qiE 'device not supported|error 999|not supported on this' "$STEP_DIR/$tool.log"; then
      skip "compute-sanitizer refuses this device: $(grep -iE -m1 'device not supported|error 999|not supported on this' "$STEP_DIR/$tool.log")"
    fi
    rows=$(grep -cE ' (PASS|FAIL)' "$STEP_DIR/$tool.log" || true)
    line=$("$PY" "$ROOT/reports/sanitizer_log.py" "$tool" "$STEP_DIR/$tool.log" --json "$STEP_DIR/$tool.json" ||
        echo "$tool: its log could not be read")
    case $rc in
      0) key+="; $line (${rows:-0} cases)" ;;
      99) failed+=" $tool"; key+="; $line" ;;
      124|137) cut+=" $tool"; key+="; $tool cut at its ${limit} s after ${rows:-0} cases" ;;
      *) failed+=" $tool(exit $rc)"; key+="; $tool exit $rc: $(tail -1 "$STEP_DIR/$tool.log")" ;;
    esac
  done
  echo "${#cases[@]} kernel families$key" | tee "$STEP_DIR/key.txt"
  if [ -n "$failed" ]; then echo "FAILED:$failed (the tools' logs: $(printf '%s.log ' "${tools[@]}"))"; exit 1; fi
  [ -z "$cut" ] || incomplete "cut by the time limit:$cut"
}
