# shellcheck shell=bash
# The steps of ci/gpu-check.sh and the helpers they share. Each step runs in a child shell that
# sources this file, under `timeout`, so a hang kills only it. A step writes into $STEP_DIR (logs,
# JSON) and exits 0 (pass), 77 after `skip REASON`, 75 after `incomplete REASON`, anything else (fail);
# reports/gpu_check_summary.py reads the key figures from the files it leaves. In a dry run
# ($DRY_RUN = 1) the steps run their CPU form in miniature.

# ---- helpers for the steps (in the step's own shell) ----

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

# ---- the steps ----

step_probe() {
  local problems=()
  echo "== tools"
  local tool
  for tool in timeout tar ldd awk "$PY"; do
    command -v "$tool" >/dev/null || problems+=("$tool not found")
  done
  for f in reports/gpu_peer.py reports/torch_fp32.py reports/torch_gemm_rate.py reports/compare_training.py reports/gpu_check_summary.py reference/configs/tiny.json \
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

check_backend() {  # DTYPE [ONLY]: every operation (or those whose name holds ONLY) against the CPU backend
  local dtype=$1 only=${2:-}
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
  tripod train --backend "$backend" --config tiny --set data.dir="$WORK/data" --set train.dtype="$dtype" \
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
  for fusions in none bias residual bias-grad operands loss-stats layernorm-grads; do
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
# sums differs, which can move a bf16 operand by one rounding. The gate, 1e-4 on every loss, is
# 2.5x the whole bf16-vs-fp32 difference of this run on the CPU (at most 3.9e-5 over its 10 steps,
# 2026-12-04); gradient norms (bf16 vs fp32: up to 1.2e-2) and parameters are reported, not gated.
step_train-bf16() { train_vs_cpu bf16-mixed 1e-4; }
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

gemm_rate() {  # DTYPE SIZES (empty: the GPT-2 shapes only) JSON [more gemm-rate options]
  local dtype=$1 sizes=$2 json=$3 squares=()
  shift 3
  if dry; then
    tripod bench gemm-rate --backend cpu --dtype "$dtype" --sizes 64 --shapes gpt2 --tokens 16 --repeat 2 \
        --min-time-ms 0 --json "$STEP_DIR/$json" "$@"
  else
    [ -z "$sizes" ] || squares=(--sizes "$sizes")
    tripod bench gemm-rate --backend cuda --dtype "$dtype" "${squares[@]}" --shapes gpt2 --tokens "$GEMM_TOKENS" \
        --repeat 10 --json "$STEP_DIR/$json" "$@"
  fi
}
# PyTorch's bf16 matmul (bf16 C) on the squares, timed the same way: the peer of gemm-bf16out.json.
torch_gemm_rate() {
  if dry; then
    "$PY" "$ROOT/reports/torch_gemm_rate.py" --device cpu --sizes 64 --repeat 2 --min-time-ms 0 \
        --json "$STEP_DIR/torch-gemm.json"
  else
    "$PY" "$ROOT/reports/torch_gemm_rate.py" --device cuda --sizes "$GEMM_BF16_SIZES" --repeat 10 \
        --json "$STEP_DIR/torch-gemm.json"
  fi
}
# bf16 with fp32 C; the GPT-2 shapes as the trainer runs them (bf16-mixed: fp32 tensors, the
# operand conversions and the padding of the LM head's odd vocabulary in the time); bf16 with bf16
# C (as PyTorch's bf16 matmul, and what GEMMs writing bf16 activations would reach); PyTorch's.
step_gemm-bf16() {
  gemm_rate bf16 "$GEMM_BF16_SIZES" gemm.json && gemm_rate bf16-mixed "" gemm-mixed.json &&
    gemm_rate bf16 "$GEMM_BF16_SIZES" gemm-bf16out.json --c-dtype bf16 && torch_gemm_rate
}
step_gemm-fp32() { gemm_rate fp32 "$GEMM_FP32_SIZES" gemm.json; }

step_kernels() {
  # Twice: as the backend runs by default, then with its fused forms off (TRIPOD_CUDA_FUSIONS=none),
  # for the kernels whose fusion is inside one Backend call (LayerNorm backward's weight and bias
  # sums): the same row of both runs, as a ratio (on the CPU of a dry run the variable changes nothing).
  local fusions
  for fusions in all none; do
    local json="$STEP_DIR/kernels.json"
    [ "$fusions" = all ] || json="$STEP_DIR/kernels-unfused.json"
    if dry; then
      TRIPOD_CUDA_FUSIONS=$fusions tripod bench kernel-rate --backend cpu --tokens 64 --channels 64 --vocab 256 \
          --repeat 2 --min-time-ms 0 --json "$json"
    else
      TRIPOD_CUDA_FUSIONS=$fusions tripod bench kernel-rate --backend cuda --tokens "$GEMM_TOKENS" --repeat 10 \
          --json "$json"
    fi
  done
  "$PY" -c 'import json,sys; j=json.load(open(sys.argv[1])); print("copy %.0f GB/s; " % j["copy_gbps"] + ", ".join("%s %.0f%%" % (r["name"], r["pct_of_copy"]) + (" (%.2f ms, %.1f TFLOP/s nominal)" % (1e3 * r["median_seconds"], r["nominal_tflops"]) if "nominal_tflops" in r else "") for r in j["results"][1:]))' \
      "$STEP_DIR/kernels.json" | tee "$STEP_DIR/key.txt"
  "$PY" -c 'import json,sys
rows = [{r["name"]: r for r in json.load(open(f))["results"]} for f in sys.argv[1:3]]
name = "layernorm bwd"
fused, apart = rows[0][name]["median_seconds"], rows[1][name]["median_seconds"]
print("%s: %.3f ms, fusions off %.3f ms (fused %.2fx)" % (name, 1e3 * fused, 1e3 * apart, apart / fused))' \
      "$STEP_DIR/kernels.json" "$STEP_DIR/kernels-unfused.json" | tee -a "$STEP_DIR/key.txt"
}

# bench-train's fourth run, the flash step's second: the padded vocabulary at $GPT2_LARGE_BATCH
# sequences (none when it is 0). OUT DRY_BACKEND DRY_SEQ: the JSON, and the dry run's CPU form
# (tiny at batch 4 on DRY_BACKEND, DRY_SEQ tokens).
bench_large_batch() {
  if [ "$GPT2_LARGE_BATCH" -eq 0 ]; then return 0; fi
  local padding=()
  [ "$GPT2_VOCAB_MULTIPLE" -gt 1 ] && padding=(--make-vocab-size-divisible-by "$GPT2_VOCAB_MULTIPLE")
  if dry; then
    tripod bench train --backend "$2" --config tiny --set model.vocab_size=500 --set train.dtype="$GPT2_PRECISION" \
        --batch 4 --seq-len "$3" --steps 2 --gemm-size 128 "${padding[@]}" --json "$1"
  else
    tripod bench train --backend cuda --config gpt2-124m --set train.dtype="$GPT2_PRECISION" \
        --batch "$GPT2_LARGE_BATCH" --seq-len "$GPT2_SEQ" --steps "$GPT2_STEPS" "${padding[@]}" --json "$1"
  fi
}

step_bench-train() {
  # The vocabulary as it is (as the PyTorch peer runs it), then padded to a multiple of
  # $GPT2_VOCAB_MULTIPLE (50257 -> 50304, as Megatron-LM and llm.c train GPT-2): aligned rows and
  # whole tiles for the LM head's GEMMs, measured against the unpadded run in the same step. Then
  # the unpadded run with the CUDA backend's fused forms off (TRIPOD_CUDA_FUSIONS=none: the bias and
  # residual epilogues, the bf16 operand producers, the one-pass loss statistics), so the step says
  # what they are worth (on the CPU of a dry run the variable changes nothing). Last, the padded
  # vocabulary at $GPT2_LARGE_BATCH sequences: the issue's MFU target leaves the batch to us, and a
  # larger one spreads the step's fixed costs (AdamW, launches) and fills the GEMMs' tiles better.
  local padding=()
  [ "$GPT2_VOCAB_MULTIPLE" -gt 1 ] && padding=(--make-vocab-size-divisible-by "$GPT2_VOCAB_MULTIPLE")
  if dry; then
    tripod bench train --backend cpu --config tiny --set model.vocab_size=500 --set train.dtype="$GPT2_PRECISION" \
        --batch 2 --seq-len 32 --steps 2 --gemm-size 128 --json "$STEP_DIR/bench.json"
    [ ${#padding[@]} -eq 0 ] || tripod bench train --backend cpu --config tiny --set model.vocab_size=500 \
        --set train.dtype="$GPT2_PRECISION" --batch 2 --seq-len 32 --steps 2 --gemm-size 128 "${padding[@]}" \
        --json "$STEP_DIR/bench-padded.json"
    (export TRIPOD_CUDA_FUSIONS=none
     tripod bench train --backend cpu --config tiny --set model.vocab_size=500 --set train.dtype="$GPT2_PRECISION" \
         --batch 2 --seq-len 32 --steps 2 --gemm-size 128 --json "$STEP_DIR/bench-unfused.json")
    bench_large_batch "$STEP_DIR/bench-large.json" cpu 32
  else
    # Each run whether or not the one before failed: a fused form that fails at GPT-2's shapes
    # still leaves the step a measured step with the fusions off (the key figure says which ran).
    local failed=0
    tripod bench train --backend cuda --config gpt2-124m --set train.dtype="$GPT2_PRECISION" --batch "$GPT2_BATCH" \
        --seq-len "$GPT2_SEQ" --steps "$GPT2_STEPS" --json "$STEP_DIR/bench.json" || failed=1
    [ ${#padding[@]} -eq 0 ] || tripod bench train --backend cuda --config gpt2-124m --set train.dtype="$GPT2_PRECISION" \
        --batch "$GPT2_BATCH" --seq-len "$GPT2_SEQ" --steps "$GPT2_STEPS" "${padding[@]}" \
        --json "$STEP_DIR/bench-padded.json" || failed=1
    (export TRIPOD_CUDA_FUSIONS=none
     tripod bench train --backend cuda --config gpt2-124m --set train.dtype="$GPT2_PRECISION" --batch "$GPT2_BATCH" \
         --seq-len "$GPT2_SEQ" --steps "$GPT2_STEPS" --json "$STEP_DIR/bench-unfused.json") || failed=1
    bench_large_batch "$STEP_DIR/bench-large.json" cpu 32 || failed=1
    return "$failed"
  fi
}

# The flash attention kernels (TRIPOD_CUDA_ATTENTION=flash: fp32 attention under the bf16-operand
# policy without the T x T scores; written and replayed on the host, first run here), each part
# reported whether or not the one before passed:
#   check     check-backend's attention cases against the CPU (out, dq, dk, dv within 2^-8; probs
#             holds the flash state there and is not compared)
#   sanitize  compute-sanitizer memcheck and racecheck (shared-memory races) of the GPU test
#             CudaFlashAttention (flash on the GPU against the emulated device's blocks, small
#             shapes: seconds under the sanitizer); a part cut by its time limit gives no verdict
#             and makes the step incomplete, not failed
#   train     tiny bf16-mixed with flash against the CPU's emulation of the policy: every loss
#             within 2.5x the bf16 effect of the same run (the CPU's bf16-mixed vs fp32 losses).
#             Flash rounds each probability before the division by the row sum, the CPU after;
#             on a model this small that is most of what bf16 does to attention (on the emulated
#             device, flash vs the CPU: at most 0.6x the bf16 effect over 4 steps)
#   speed     kernel-rate's attention rows and bench-train's GPT-2 step, both with flash, against
#             the `kernels` and `bench-train` steps of this run; and the step padded at the large
#             batch (bench-train's fourth run) with flash: a passing flash step's runs count for
#             the MFU target beside bench-train's (flash holds no T x T scores: the large batch
#             is where it should pay most)
# The dry run takes every part but the sanitizer on the emulated device, which runs the same block
# algorithms on the host (TRIPOD_CUDA_ATTENTION=flash too).
step_flash() {
  export TRIPOD_CUDA_ATTENTION=flash TINY_DRY_SEQ=48  # T 48 > tiny's head size 32: flash takes it
  local failed="" cut="" key="" device=cuda steps=$TRAIN_STEPS sanitizer part rc effect tol
  local base_kernels=$OUT_DIR/kernels/kernels.json base_bench=$OUT_DIR/bench-train/bench.json
  if dry; then
    device=emulated steps=3
    base_kernels=$OUT_DIR/dry-kernels/kernels.json base_bench=$OUT_DIR/dry-bench-train/bench.json
  fi
  tripod check-backend --backend "$device" --against cpu --dtype fp32 bf16 --only attention \
      --json "$STEP_DIR/check.json" || failed+=" check"
  key+="check $("$PY" -c 'import json,sys; r=json.load(open(sys.argv[1]))["results"]; print("%d cases, %d failed, worst %.2g of bound" % (len(r), sum(not x["pass"] for x in r), max([x.get("error_over_bound", 0) for x in r] or [0])))' "$STEP_DIR/check.json" 2>/dev/null || echo "no results")"
  if dry; then
    key+="; sanitizer not in the dry run"
  elif sanitizer=$(find_sanitizer) && [ -x "$GTEST_BIN" ]; then
    write_tripod_wrapper "$GTEST_BIN" "$WORK/gtest-run"
    for part in memcheck racecheck; do
      rc=0
      timeout -k 3 40 "$sanitizer" --tool "$part" --target-processes all --error-exitcode 99 --print-limit 20 \
          "$WORK/gtest-run" --gtest_filter='CudaFlashAttention.*' >"$STEP_DIR/$part.log" 2>&1 || rc=$?
      tail -3 "$STEP_DIR/$part.log"
      case $rc in
        0) key+="; $part clean" ;;
        124|137) cut+=" $part"; key+="; $part cut at 40 s (no verdict)" ;;
        *) failed+=" $part(exit $rc)"; key+="; $part exit $rc" ;;
      esac
      grep -q '\[  PASSED  \] 1 test' "$STEP_DIR/$part.log" || [ "$rc" != 0 ] || { failed+=" $part(test did not pass)"; }
    done
  else
    key+="; compute-sanitizer or the GPU tests not found"
  fi
  # (Every part below reports and goes on: under the steps' `set -e`, a failing command or
  # substitution of its own would end the step before its key figure.)
  if train_tiny flash-cpu-fp32 cpu fp32 "$steps" && train_tiny flash-cpu-bf16 cpu bf16-mixed "$steps" &&
      train_tiny "flash-$device" "$device" bf16-mixed "$steps"; then
    (cd "$STEP_DIR" && "$PY" "$ROOT/reports/compare_training.py" --a flash-cpu-bf16.jsonl --b flash-cpu-fp32.jsonl \
        --rel-tol 1 --steps "$steps" --json "$STEP_DIR/bf16-effect.json" --label "tiny: cpu bf16-mixed vs fp32") \
        >/dev/null || true
    effect=$("$PY" -c 'import json,sys; print("%.3g" % json.load(open(sys.argv[1]))["loss_max_rel"])' \
        "$STEP_DIR/bf16-effect.json" 2>/dev/null || true)
    if [ -n "$effect" ]; then
      tol=$("$PY" -c 'import sys; print("%.3g" % max(2.5 * float(sys.argv[1]), 1e-7))' "$effect")
      (cd "$STEP_DIR" && compare_runs "flash-$device" flash-cpu-bf16 --rel-tol "$tol" --steps "$steps" \
          --label "tiny bf16-mixed: $device flash attention vs cpu") || failed+=" train"
    else
      failed+=" train(no bf16 effect measured)"
    fi
    key+="; train $("$PY" -c 'import json,sys; j=json.load(open(sys.argv[1])); print("loss max rel %.2g (bound %.2g = 2.5x the bf16 effect)" % (j["loss_max_rel"], j["rel_tol"]))' "$STEP_DIR/compare.json" 2>/dev/null || echo "no comparison")"
  else
    failed+=" train"
  fi
  # The GPT-2 step as bench-train's first run, then as its fourth (padded, large batch)
  if dry; then
    tripod bench kernel-rate --backend emulated --tokens 64 --channels 64 --vocab 256 --repeat 2 --min-time-ms 0 \
        --json "$STEP_DIR/kernels.json" || failed+=" kernels"
    tripod bench train --backend emulated --config tiny --set model.vocab_size=500 --set train.dtype="$GPT2_PRECISION" \
        --batch 2 --seq-len 48 --steps 2 --gemm-size 128 --json "$STEP_DIR/bench.json" || failed+=" bench"
  else
    tripod bench kernel-rate --backend cuda --tokens "$GEMM_TOKENS" --repeat 10 --json "$STEP_DIR/kernels.json" ||
        failed+=" kernels"
    tripod bench train --backend cuda --config gpt2-124m --set train.dtype="$GPT2_PRECISION" --batch "$GPT2_BATCH" \
        --seq-len "$GPT2_SEQ" --steps "$GPT2_STEPS" --json "$STEP_DIR/bench.json" || failed+=" bench"
  fi
  bench_large_batch "$STEP_DIR/bench-large.json" emulated 48 || failed+=" bench-large"
  key+="; $({ "$PY" "$ROOT/reports/flash_speed.py" "$STEP_DIR" --base-kernels "$base_kernels" \
      --base-bench "$base_bench" --json "$STEP_DIR/speed.json" 2>&1 || true; } | tail -1)"
  echo "$key" | tee "$STEP_DIR/key.txt"
  if [ -n "$failed" ]; then echo "FAILED:$failed"; exit 1; fi
  [ -z "$cut" ] || incomplete "cut by the time limit:$cut"
}

step_peer() {
  export PYTHONUNBUFFERED=1
  if dry; then
    "$PY" "$ROOT/reports/gpu_peer.py" --device cpu --config tiny --batch 2 --seq-len 32 --steps 2 --warmup 1 \
        --precision "$PEER_PRECISIONS" --json "$STEP_DIR/peer.json"
  else
    "$PY" "$ROOT/reports/gpu_peer.py" --device cuda --config gpt2-124m --batch "$GPT2_BATCH" --seq-len "$GPT2_SEQ" \
        --precision "$PEER_PRECISIONS" --json "$STEP_DIR/peer.json"
  fi
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

step_sanitizer() {
  local sanitizer
  sanitizer=$(find_sanitizer) || skip "compute-sanitizer not found"
  write_tripod_wrapper
  # One memcheck run over every family's small cases: each run of its own paid the sanitizer's,
  # CUDA's and cuBLASLt's start-up again (8 of them rarely fitted the step). A run the step's
  # time cuts short measured part of it: that is "unrun" (the verdict INCOMPLETE), not a pass.
  local rc=0 cases limit=$((STEP_LIMIT - 5))
  IFS=';' read -ra cases <<<"$SANITIZER_CASES"
  echo "== memcheck: check-backend --backend cuda --dtype fp32 bf16 --only ${cases[*]} (limit ${limit} s)"
  timeout -k 3 "$limit" "$sanitizer" --tool memcheck --target-processes all --error-exitcode 99 --print-limit 20 \
      "$WORK/tripod-run" check-backend --backend cuda --dtype fp32 bf16 --only "${cases[@]}" \
      --json "$STEP_DIR/check.json" >"$STEP_DIR/memcheck.log" 2>&1 || rc=$?
  tail -6 "$STEP_DIR/memcheck.log"
  if grep -qiE 'device not supported|error 999|not supported on this' "$STEP_DIR/memcheck.log"; then
    skip "compute-sanitizer refuses this device: $(grep -iE -m1 'device not supported|error 999|not supported on this' "$STEP_DIR/memcheck.log")"
  fi
  local rows
  rows=$(grep -cE ' (PASS|FAIL)' "$STEP_DIR/memcheck.log" || true)
  echo "memcheck over ${#cases[@]} kernel families: ${rows:-0} cases checked, exit $rc" | tee "$STEP_DIR/key.txt"
  case $rc in
    0) ;;
    99) echo "FAILED: compute-sanitizer reported errors (memcheck.log)"; exit 1 ;;
    124|137) incomplete "memcheck ran out of the step's ${limit} s after ${rows:-0} cases" ;;
    *) echo "FAILED: exit $rc (memcheck.log)"; exit 1 ;;
  esac
}

step_profile() {
  # Where bench-train's step spends its device time, kernel by kernel: Nsight Compute times each
  # kernel of one warm-up and one timed step (one metric, one pass a kernel; clocks and caches
  # left as they are), reports/kernel_profile.py sums them by name per step.
  local ncu rc=0 limit=$((STEP_LIMIT - 10))
  ncu=$(find_tool ncu /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu) || skip "ncu (Nsight Compute) not found"
  write_tripod_wrapper
  echo "== $ncu over tripod bench train --steps 1, gpt2-124m $GPT2_PRECISION B${GPT2_BATCH}xT${GPT2_SEQ} (limit ${limit} s)"
  timeout -k 3 "$limit" "$ncu" --metrics gpu__time_duration.sum --csv --print-kernel-base demangled \
      --cache-control none --clock-control none --target-processes all --log-file "$STEP_DIR/ncu.csv" \
      "$WORK/tripod-run" bench train --backend cuda --config gpt2-124m --set train.dtype="$GPT2_PRECISION" \
      --batch "$GPT2_BATCH" --seq-len "$GPT2_SEQ" --steps 1 --gemm-size 256 >"$STEP_DIR/train.log" 2>&1 || rc=$?
  tail -4 "$STEP_DIR/train.log"
  grep -m3 '==ERROR==\|==WARNING==' "$STEP_DIR/ncu.csv" || true
  if grep -qiE 'ERR_NVGPUCTRPERM|LibraryNotLoaded|not supported' "$STEP_DIR/ncu.csv"; then
    skip "ncu cannot profile here: $(grep -iE -m1 'ERR_NVGPUCTRPERM|LibraryNotLoaded|not supported' "$STEP_DIR/ncu.csv")"
  fi
  case $rc in
    0) ;;
    124|137) incomplete "ncu ran out of the step's ${limit} s" ;;
    *) echo "FAILED: exit $rc (train.log, ncu.csv)"; exit 1 ;;
  esac
  "$PY" "$ROOT/reports/kernel_profile.py" "$STEP_DIR/ncu.csv" --steps 2 --json "$STEP_DIR/profile.json" \
      --key "$STEP_DIR/key.txt"
}

# ---- several ranks (issue: NCCL, staged communicator) ----

# The bundle's Open MPI (ci/gpu-bundle.sh) lives outside the paths it was built for: its env.sh
# sets OPAL_PREFIX and the rest so that it finds its plugins, help files and orted. Every process
# that starts MPI needs them, a launch by orterun or a singleton. False where there is no bundle.
use_bundled_openmpi() {
  [ -n "$BUNDLE" ] && [ -f "$BUNDLE/openmpi/env.sh" ] || return 1
  # shellcheck disable=SC1091
  . "$BUNDLE/openmpi/env.sh"
}

# RANKS ARGS...: `tripod ARGS` on RANKS ranks of this node, through the bundle's Open MPI
# (openmpi/env.sh) where there is one, else the system's mpirun; each rank starts as `tripod`
# does (library path, or the bundle's loader). ENV=VALUE words before RANKS go to every rank's
# environment through a wrapper, with {rank} replaced by its rank (NCCL_HOSTID=h{rank}).
tripod_ranks() {
  local vars=()
  while [[ "$1" == *=* ]]; do vars+=("$1"); shift; done
  local ranks=$1
  shift
  local launcher=mpirun
  if use_bundled_openmpi; then launcher=orterun; fi
  command -v "$launcher" >/dev/null || { echo "no $launcher: a multi-rank run needs Open MPI (bundle it: ci/gpu-bundle.sh)"; return 1; }
  local app=("$TRIPOD_BIN")
  [ -z "$TRIPOD_LOADER" ] || app=("$TRIPOD_LOADER" --library-path "$TRIPOD_LIBS" "$TRIPOD_BIN")
  if [ ${#vars[@]} -gt 0 ]; then
    local wrapper=$WORK/rank-env.sh v
    { echo '#!/bin/sh'; echo 'r=${OMPI_COMM_WORLD_RANK:?not started by Open MPI}'
      for v in "${vars[@]}"; do printf 'export %s\n' "${v//\{rank\}/\$r}"; done
      echo 'exec "$@"'; } >"$wrapper"
    chmod +x "$wrapper"
    app=("$wrapper" "${app[@]}")
  fi
  # Shared-memory copies through buffers, not cross-process reads (CMA): sandboxed runtimes such as
  # gVisor refuse process_vm_readv, and these runs move little. No binding: Open MPI binds each of
  # 2 ranks to one core, and the CPU steps' 7 threads a rank then took turns on it (the first
  # overlap-cpu run on an H200 node ran out of its 60 s; tripod now warns of it).
  local mpi=("$(command -v "$launcher")" --oversubscribe --bind-to none --mca btl self,vader
             --mca btl_vader_single_copy_mechanism none --timeout "$((STEP_LIMIT - 3))" -np "$ranks")
  echo "== $launcher -np $ranks tripod $*${vars[*]:+ (per rank: ${vars[*]})}"
  if [ -n "$TRIPOD_LOADER" ]; then
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 \
        "$TRIPOD_LOADER" --library-path "$TRIPOD_LIBS" "${mpi[@]}" "${app[@]}" "$@"
  else
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 LD_LIBRARY_PATH=$TRIPOD_LIBS \
        "${mpi[@]}" "${app[@]}" "$@"
  fi
}

# NCCL at world size 1: the plumbing (unique id, communicator, streams, events) and every
# collective's values (#wrong must be 0), up to 32 MiB: bench comm fills and checks every element
# on the host (one thread per rank), which for the six collectives up to 128 MiB took 164 s of
# host work here, past this step's limit; up to 32 MiB, 18 s. One launch for the six (a list of
# collectives), so CUDA, cuBLASLt and NCCL start once. Not sendrecv: at world size 1 it is a send
# to itself and a receive from itself issued apart, which NCCL refuses outside one group.
step_nccl-1() {
  local rc=0 collectives=all_reduce,all_gather,reduce_scatter,broadcast,reduce,alltoall
  if dry; then
    tripod_ranks 2 bench comm "$collectives" --backend emulated --comm staged -b 8 -e 64K -f 8 -n 2 \
        -J "$STEP_DIR/comm.json" || rc=1
  else
    tripod_ranks 1 bench comm "$collectives" --backend cuda --comm nccl -b 8 -e 32M -f 8 -n 5 -d all \
        -J "$STEP_DIR/comm.json" || rc=1
  fi
  # (no row at all is no reason to end the step here: its exit code is rc's, under pipefail too)
  { grep -h '# Out of bounds' "$STEP_DIR/log.txt" || true; } | sort | uniq -c | tee "$STEP_DIR/key.txt"
  return $rc
}

# Issue 15's parse check: the very sweep `tripod bench comm all_reduce -b 8 -e 1G -f 2` (NCCL, world
# size 1, every element checked) must read as nccl-tests' own output, row for row
# (reports/nccl_tests_shape.py: today's column header, 28 sizes with both halves, #wrong 0, the
# footer). The host fills and checks 2 GiB here, on up to 8 of the node's threads.
step_nccl-1g() {
  local threads max=1G backend=(--backend cuda --comm nccl)
  threads=$(cores)
  [ "$threads" -le 8 ] || threads=8
  if dry; then max=1M; backend=(--backend emulated --comm staged); fi
  tripod_ranks OMP_NUM_THREADS="$threads" 1 bench comm all_reduce "${backend[@]}" -b 8 -e "$max" -f 2 \
      >"$STEP_DIR/all_reduce_perf.txt" || { cat "$STEP_DIR/all_reduce_perf.txt"; return 1; }
  PYTHONPATH="$ROOT" "$PY" -m reports.nccl_tests_shape "$STEP_DIR/all_reduce_perf.txt" --collective all_reduce \
      -b 8 -e "$max" -f 2 --json "$STEP_DIR/shape.json" | tee "$STEP_DIR/key.txt"
}

# The GPUs this node's ranks may use: CUDA_VISIBLE_DEVICES' entries where it is set, else the
# devices nvidia-smi lists (0 without it).
visible_gpus() {
  if [ -n "${CUDA_VISIBLE_DEVICES+set}" ]; then
    tr ',' '\n' <<<"$CUDA_VISIBLE_DEVICES" | grep -c '[^[:space:]]' || true
  elif command -v nvidia-smi >/dev/null; then
    nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true
  else
    echo 0
  fi
}

# Issue 15 on a node with several GPUs: a rank per GPU (2, 4 or 8, as many as there are, in powers
# of two) over NCCL itself, conform over a representative set of layouts that use every rank (fp64)
# and the collective sweep (every collective, float, 8 B - 128 MiB, every element checked on the
# host on the rank's share of the cores). Skipped, saying so, on a one-GPU node: NCCL refuses two
# ranks on one GPU, and the staged and socket steps cover several ranks there.
step_nccl-multi() {
  local gpus ranks=2 threads backend=(--backend cuda --comm nccl) max=128M layouts
  gpus=$(visible_gpus)
  if dry; then
    gpus=2
    backend=(--backend emulated --comm staged)
    max=64K
  fi
  [ "$gpus" -ge 2 ] || skip "$gpus GPU(s) on this node: conform and the collective sweep across GPUs need 2 or more"
  [ "$gpus" -ge 4 ] && ranks=4
  [ "$gpus" -ge 8 ] && ranks=8
  threads=$(( $(cores) / ranks ))
  [ "$threads" -ge 1 ] || threads=1
  [ "$threads" -le 8 ] || threads=8
  case $ranks in
    2) layouts="tp1-pp1-dp2-z1-mb1 tp2-pp1-dp1-z0-mb1 tp1-pp2-dp1-z0-mb2-1f1b tp1-pp1-dp2-z3-mb2" ;;
    4) layouts="tp2-pp2-dp1-z0-mb2-1f1b tp1-pp1-dp4-z3-mb1 tp2-pp1-dp2-z1-mb1 tp1-pp2-dp2-z2-mb2-1f1b tp4-pp1-dp1-z0-mb1-sp" ;;
    8) layouts="tp2-pp2-dp2-z1-mb4-1f1b tp1-pp1-dp8-z3-mb1 tp4-pp2-dp1-z3-mb4-sp-interleaved-v2 tp2-pp1-dp4-z2-mb2 tp4-pp1-dp2-z3-mb2-sp" ;;
  esac
  echo "$gpus GPUs: $ranks ranks, a GPU each, $threads threads a rank" | tee "$STEP_DIR/plan.txt"
  # shellcheck disable=SC2086  # the layouts are words
  tripod_ranks "$ranks" conform "${backend[@]}" --dtype fp64 --json "$STEP_DIR/conform.json" --layouts $layouts \
      || return 1
  tripod_ranks OMP_NUM_THREADS="$threads" "$ranks" bench comm all "${backend[@]}" -b 8 -e "$max" -f 2 -n 5 \
      -J "$STEP_DIR/comm.json" >"$STEP_DIR/comm.txt" || { cat "$STEP_DIR/comm.txt"; return 1; }
  { grep -h 'rows (' "$STEP_DIR/log.txt" || true; echo "$ranks GPUs: bench comm all to $max: $(grep -c '# Out of bounds values : 0 OK' "$STEP_DIR/comm.txt") collectives with #wrong 0"; } \
      | tee "$STEP_DIR/key.txt"
}

# The staged communicator: several ranks share the one GPU (NCCL refuses that), each layout's
# losses and parameters against the single-device reference: 2 ranks over every 2-rank layout in
# fp64, 4 ranks over a 3D set in fp32.
step_staged-conform() {
  local backend=cuda
  dry && backend=emulated
  tripod_ranks 2 conform --backend "$backend" --comm staged --dtype fp64 --json "$STEP_DIR/conform-2.json" || return 1
  tripod_ranks 4 conform --backend "$backend" --comm staged --dtype fp32 --json "$STEP_DIR/conform-4.json" \
      --layouts tp2-pp2-dp1-z0-mb2-1f1b tp1-pp1-dp4-z3-mb1 tp2-pp1-dp2-z1-mb1 tp1-pp2-dp2-z2-mb2-1f1b || return 1
  grep -h 'rows (' "$STEP_DIR/log.txt" | tee "$STEP_DIR/key.txt"
}

# ZeRO 1-3 in bf16-mixed gather the GEMM weights as bf16: ZeRO-3's GPU GEMMs take them as they are
# (parallel/param_gatherer.h), ZeRO-1/2 widen them into the other ranks' slices after the step
# (parallel/updated_param_gather.h). 2 ranks on the one GPU (staged), each layout against its
# -gfp32 twin, which must give the same fingerprint (reports/same_fingerprints.py), tied and untied;
# the overlapped gathers (-opg) are held to their ZeRO-2/3 twins by conform's bit-twin check.
step_bf16-gathers() {
  local backend=cuda heads
  dry && backend=emulated
  for heads in tied untied; do
    tripod_ranks 2 conform --backend "$backend" --comm staged --dtype bf16-mixed --heads "$heads" \
        --json "$STEP_DIR/conform-$heads.json" --layouts tp1-pp1-dp2-z3-mb2 tp1-pp1-dp2-z3-mb2-gfp32 \
        tp1-pp1-dp2-z3-mb1-pf0 tp1-pp1-dp2-z3-mb1-pf0-gfp32 tp1-pp1-dp2-z1-mb2 tp1-pp1-dp2-z1-mb2-gfp32 \
        tp1-pp1-dp2-z2-mb2 tp1-pp1-dp2-z2-mb2-gfp32 tp1-pp1-dp2-z2-mb2-opg || return 1
    "$PY" "$ROOT/reports/same_fingerprints.py" "$STEP_DIR/conform-$heads.json" --suffix=-gfp32 \
        --what "bf16 against fp32 gathers, $heads head" || return 1
  done
  grep -h 'bf16 against fp32 gathers' "$STEP_DIR/log.txt" | tee "$STEP_DIR/key.txt"
}

# NCCL with two ranks on the one GPU: each rank claims another host (NCCL_HOSTID) and NCCL talks
# through sockets only, as a public nccl-tests report did on one RTX 5090. Slow but real NCCL
# collectives under conform (ZeRO-2's gathers overlapped with the forward, -opg, held to its ZeRO-3
# twin bit for bit). NCCL may still refuse ("Duplicate GPU"): then skipped, with its words.
step_nccl-socket-conform() {
  local rc=0
  tripod_ranks 'NCCL_HOSTID=tripod-rank-{rank}' NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NET=Socket 2 \
      conform --backend cuda --comm nccl --dtype fp64 --json "$STEP_DIR/conform.json" \
      --timeout 20 --comm-timeout 20 \
      --layouts tp1-pp1-dp2-z1-mb1 tp2-pp1-dp1-z0-mb1 tp1-pp2-dp1-z0-mb2-1f1b tp1-pp1-dp2-z3-mb2 \
      tp1-pp1-dp2-z2-mb2-opg || rc=$?
  if [ $rc -ne 0 ] && grep -qi 'duplicate gpu' "$STEP_DIR/log.txt"; then
    skip "NCCL refuses two ranks on one GPU even with NCCL_HOSTID and sockets: $(grep -i -m1 'duplicate gpu' "$STEP_DIR/log.txt")"
  fi
  { grep -h 'rows (' "$STEP_DIR/log.txt" || true; } | tee "$STEP_DIR/key.txt"  # rc stays the step's exit code
  return $rc
}

# Issue 17's two targets that a 2-core machine cannot show need idle cores, and a GPU node has
# them: 2 ranks on the node's CPU (no GPU used), (cores - 2) / 2 threads each, so that a progress
# thread per rank has a core. The summary judges them (reports/gpu_check_summary.py).
many_core_threads() {  # the threads per rank; nothing below 6 cores
  local n
  n=$(cores)
  if dry; then echo 1; elif [ "$n" -ge 6 ]; then echo $(( (n - 2) / 2 )); fi
}
many_core_skip() { skip "$(cores) cores: the target needs idle cores beside 2 ranks (at least 6)"; }

# The DP reduction hidden behind backward (small, medians of 9; every mechanism interleaved).
step_overlap-cpu() {
  local threads model=(--repeats 9)
  threads=$(many_core_threads)
  [ -n "$threads" ] || many_core_skip
  dry && model=(--config tiny --seq-len 64 --repeats 1)
  tripod_ranks OMP_NUM_THREADS="$threads" 2 bench overlap "${model[@]}" --progress-us 200 --json "$STEP_DIR/overlap.json"
}

# The real tiny pp = 2 run with receives posted two ahead (the default) against blocking ones
# (-ra0): three alternating pairs in one run, the README's command.
step_pipeline-cpu() {
  local threads steps=11 pair=(tp1-pp2-dp1-z0-mb4-1f1b-ra0 tp1-pp2-dp1-z0-mb4-1f1b)
  threads=$(many_core_threads)
  [ -n "$threads" ] || many_core_skip
  dry && steps=2
  tripod_ranks OMP_NUM_THREADS="$threads" 2 bench layouts --config tiny --seq-len 64 --vocab 2048 --batch 8 \
      --steps "$steps" --layouts "${pair[@]}" "${pair[@]}" "${pair[@]}" --json "$STEP_DIR/layouts.json"
}

# NVML: temperature, power, SM clock, memory of every GPU, three readings.
step_health() {
  tripod bench health --samples 3 --interval-ms 300 --json "$STEP_DIR/health.json" | tee "$STEP_DIR/key.txt"
}

step_fake-hang() { echo "sleeping past the limit"; sleep 30; }
step_fake-fail() { echo "a step that fails"; exit 3; }
step_fake-exit124() { exit 124; }  # silent: an empty log
step_fake-crash() {  # a program's crash report, then the step's own words, as `tripod ... || return 1` leaves them
  local main_at  # a frame inside tripod's main, by its symbol table
  main_at=$(nm "$TRIPOD_BIN" | awk '$3 == "main" && !found { print $1; found = 1 }')  # read to the end: no SIGPIPE under pipefail
  printf '\ntripod: fatal signal SIGSEGV (segmentation fault); its stack follows (reports/symbolize_stack.py LOG BINARY names the functions):\n'
  printf '/lib/x86_64-linux-gnu/libc.so.6(+0x3c050)[0x7ffff7a3c050]\n'
  printf '/node/bundle/bin/tripod(+0x%x)[0x55555560e1f0]\n' $((0x$main_at + 8))
  echo "check-backend failed"
  exit 1
}
step_fake-orphan() {  # a process in a session of its own, as a rank outliving its mpirun would be
  setsid sleep 300 </dev/null >/dev/null 2>&1 &
  echo $! >"$STEP_DIR/orphan.pid"
}
