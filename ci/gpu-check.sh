#!/usr/bin/env bash
# The one prepared check for a machine with an NVIDIA GPU: every result as JSON and logs under
# OUT_DIR, a summary table and OUT_DIR/summary.json, exit status non-zero when any step failed.
#
#   bash ci/gpu-check.sh OUT_DIR [--bundle DIR | --build-dir DIR] [--dry-run] [--only a,b]
#                                [--budget SECONDS] [--export DIR]
#
#   --bundle DIR     binaries from ci/gpu-bundle.sh's bundle (DIR/bin, DIR/lib, lib-packed.tar.xz);
#                    else from --build-dir (default build/release)
#   --dry-run        for CI, on a machine without a GPU: checks that everything the real run needs
#                    is there (binaries, their libraries, scripts, Python modules), prints the plan,
#                    runs each step's CPU form in miniature, reports the GPU steps "skipped: no GPU"
#   --only LIST      run only these steps (comma-separated names from the table below)
#   --budget S       the whole run's time limit (default 420 s = 7 min): a step never gets more
#                    than what is left, and a step with under 5 s left is "unrun" (the verdict is
#                    then INCOMPLETE), so one slow step cannot push the run past the limit
#   --export DIR     also put summary.json, summary.txt and gpu-check.tar.gz (everything) in DIR:
#                    few files, for a tool that brings back only a handful (the device tool's $OUT)
#
# Steps, in run order: cheap and decisive first, so a short budget still gives a verdict; then the
# steps of the one target no GPU has measured yet (GPT-2's MFU: kernels, bench-train, flash-mma,
# peer); then what earlier leases measured already (the GEMM rates, NCCL; session 31's H100):
#   probe        nvidia-smi, driver, nvcc, python/torch, each binary's libraries (ldd)   [issue item a]
#   data         a synthetic Markov corpus for `tiny` (the node has no prepared data)
#   check-fp64   tripod check-backend --backend cuda --dtype fp64 (every op vs the CPU)  [b]
#   check-fp32   the same in fp32                                                         [b]
#   check-bf16   --dtype bf16: bf16 GEMMs, GEMM operands and the kernels that write them,
#                attention under that policy, conversions to and from bf16                [b]
#   train-fp64   tiny, 10 steps, cuda vs cpu: every loss within 1e-10 relative            [e]
#   train-fp32   the same in fp32: within 1e-5                                             [e]
#   train-bf16   the same in bf16-mixed against the CPU's emulation of the policy: within 2e-4 [e];
#                on a failure again with TRIPOD_CUDA_FUSIONS=none and with each fusion alone
#   train-rerun  a second cuda fp32 run: losses, norms and checkpoint bytes identical      [e]
#   golden       a golden bundle (tiny, 5 steps): Tripod on cuda and the PyTorch peer on cuda,
#                fp64 and fp32, each through `tripod golden check` against the fp64 reference
#   gtest        tripod_gpu_tests --gtest_output=json (the last correctness step: before the
#                benchmarks, so a short budget leaves benchmarks unrun, not it)          [c]
#   health       tripod bench health: NVML temperature, power, SM clock, memory, energy
#   kernels      tripod bench kernel-rate: LayerNorm, GELU, AdamW, cross-entropy... in GB/s
#                and % of a device-to-device copy measured in the same run; again with the fused
#                forms off (TRIPOD_CUDA_FUSIONS=none): LayerNorm backward's two forms as a ratio
#   bench-train  tripod bench train, GPT-2 124M, $GPT2_PRECISION, batch 8 x context 1024: MFU [g];
#                again with the vocabulary padded to a multiple of $GPT2_VOCAB_MULTIPLE (50304);
#                again with the fused forms off (TRIPOD_CUDA_FUSIONS=none): what they are worth;
#                and padded at batch $GPT2_LARGE_BATCH (32): the issue lets us choose the batch
#   flash-mma    the flash attention kernels with their tiles in mma.sync fragments, forward and
#                backward (TRIPOD_CUDA_ATTENTION=flash-mma; written without a GPU, 2026-12-06), first
#                run on a GPU: their attention cases against the CPU, tiny bf16-mixed vs the CPU
#                (2.5x the bf16 effect), memcheck and racecheck last, and the attention rows and GPT-2 step
#                (B8, and padded at the large batch) against bench-train's; when it passes, its GPT-2
#                runs count for the MFU target. Right after bench-train: the attention the 40 % MFU step needs
#                (session 31's H100 timed flash's fp32 block kernels at 1.64x the GEMM attention
#                forward, 0.79x its backward), so a short budget leaves flash unrun, not it
#   peer         reports/gpu_peer.py: PyTorch eager GPT-2 124M, bf16 autocast and fp32   [h]
#                (before flash, which may take long: the MFU target's line compares with it)
#   gemm-bf16    tripod bench gemm-rate, bf16, squares + GPT-2 124M layer shapes; then those
#                shapes as trained (--dtype bf16-mixed: conversions and padding included); then
#                bf16 with bf16 C (--c-dtype bf16), and PyTorch's bf16 matmul on the squares
#                (reports/torch_gemm_rate.py), timed the same way                           [f]
#   gemm-fp32    the same in fp32 (TF32 off; smaller squares)                             [f]
#   nccl-1       tripod bench comm, six collectives in one launch, --comm nccl at world size 1, 8 B - 32 MiB
#                (#wrong 0; every element is filled and checked on the host, so larger sizes
#                would spend the step's time there)
#   nccl-1g      tripod bench comm all_reduce -b 8 -e 1G -f 2 over NCCL at world size 1, checked:
#                its output must read as nccl-tests' own, row for row (reports/nccl_tests_shape.py)
#   nccl-multi   on a node with 2+ GPUs (skipped on one): a rank per GPU over NCCL, conform over a
#                representative layout set using every rank (fp64) and bench comm all, 8 B - 128 MiB
#   staged-conform  tripod conform --comm staged: 2 ranks on the one GPU (every layout, fp64),
#                4 ranks (a 3D set, fp32), through the bundle's Open MPI
#   flash        the same for TRIPOD_CUDA_ATTENTION=flash: the same state, fp32 block kernels
#   sanitizer    compute-sanitizer memcheck, initcheck and racecheck on check-backend --only <small cases>;
#                skipped (with the reason) where it is missing or refuses the device      [d]
#   profile      ncu over bench-train's step (one warm-up, one timed): device time per kernel name,
#                summed per step (reports/kernel_profile.py); skipped where ncu is missing or refused
#   bf16-gathers  ZeRO 1-3 in bf16-mixed, 2 ranks on the one GPU (staged): the GEMM weights
#                gathered as bf16 against -gfp32, the same fingerprints (reports/same_fingerprints.py)
#   overlap-cpu  issue 17 on the node's idle CPU cores (no GPU): tripod bench overlap, 2 ranks, small,
#                medians of 9 - the DP reduction hidden behind backward (target >= 80 %)
#   pipeline-cpu issue 17: tiny pp = 2 with receives posted ahead vs blocking (-ra0), three
#                alternating pairs - tokens/s before/after (target: a measurable gain)
#   nccl-socket-conform  2 ranks on the one GPU through NCCL itself: NCCL_HOSTID per rank and
#                sockets only; skipped with NCCL's words where it still refuses. Last: the most
#                likely to be refused or to hang, so it can cost nothing of the rest
#
# Binaries: tripod and tripod_gpu_tests, from a copy of the bundle with lib-packed.tar.xz unpacked
# in it, run with LD_LIBRARY_PATH = the bundle's lib/ (plus lib/compat only where the node's
# libstdc++ is older than the binaries need; through lib/glibc's loader only where the node's glibc
# is) + the node's CUDA libraries: $CUDA_HOME/lib64, /usr/local/cuda/lib64,
# /usr/local/cuda/targets/x86_64-linux/lib, then the lib folders of the nvidia-* pip packages of
# the Python that has torch. Python (reports/*.py, torch) never gets the bundle's folders.
# Statuses: pass, fail (an exit 124/137 well before the limit included: the program's own),
# timeout (killed at its own limit), skipped (with the reason), unrun (the budget ran out first, or
# cut the step at what it had left), pending (in a summary written mid-run: not reached yet). unrun
# and pending make the verdict INCOMPLETE, never PASS.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# ---- the knobs, in one place ----
# GPT-2 124M training benchmark: its precision policy (train.dtype): bf16-mixed (the MFU target's),
# fp32 or fp64 - the one setting to change.
GPT2_PRECISION=${GPT2_PRECISION:-bf16-mixed}
GPT2_BATCH=${GPT2_BATCH:-8}           # sequences per step
GPT2_SEQ=${GPT2_SEQ:-1024}            # context: 8 x 1024 = 8192 tokens per step
GPT2_STEPS=${GPT2_STEPS:-5}           # timed steps after one warm-up
GPT2_VOCAB_MULTIPLE=${GPT2_VOCAB_MULTIPLE:-128}  # bench-train's second run: vocabulary padded to it (1: no second run)
# bench-train's fourth run: the padded vocabulary at this batch (0: no fourth run). 32 x 1024 holds
# about 4 x B8's 16.5 GB (session 20's allocator peak): ~60 GB, within an H100's 80 GB.
GPT2_LARGE_BATCH=${GPT2_LARGE_BATCH:-32}
PEER_PRECISIONS=${PEER_PRECISIONS:-bf16,fp32}
GEMM_BF16_SIZES=${GEMM_BF16_SIZES:-4096,8192}
GEMM_FP32_SIZES=${GEMM_FP32_SIZES:-2048,4096}  # fp32 without TF32 runs ~60 TFLOP/s: smaller squares
GEMM_TOKENS=${GEMM_TOKENS:-8192}      # B*T rows of the GPT-2 shapes, as the training benchmark
TRAIN_STEPS=${TRAIN_STEPS:-10}
# The compute-sanitizer run covers the check-backend cases whose names hold one of these: each kernel
# family ("_operand": the kernels that write a GEMM's bf16 operand; "logits_stats": the one-pass loss statistics).
SANITIZER_CASES=${SANITIZER_CASES:-"layernorm;bias_add;attention;cross;embedding;adamw;sum_;gather_rows;gemm NN;gemm_operands;gemm_bias_residual;at offsets;_operand;logits_stats"}
# ... and the tools it runs over them, one run each, in this order (memcheck, initcheck, racecheck, synccheck).
SANITIZER_TOOLS=${SANITIZER_TOOLS:-"memcheck initcheck racecheck"}

usage() { sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

OUT_DIR=""
BUNDLE=""
BUILD_DIR=$ROOT/build/release
DRY_RUN=0
ONLY=""
BUDGET=420
EXPORT_DIR=""
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) DRY_RUN=1; shift ;;
    --bundle) BUNDLE=$(cd "${2:?--bundle needs a folder}" && pwd); shift 2 ;;
    --build-dir) BUILD_DIR=$(cd "${2:?--build-dir needs a folder}" && pwd); shift 2 ;;
    --only) ONLY=",${2:?--only needs step names},"; shift 2 ;;
    --budget) BUDGET=${2:?--budget needs seconds}; shift 2 ;;
    --export) EXPORT_DIR=${2:?--export needs a folder}; shift 2 ;;
    -h|--help) usage ;;
    -*) echo "gpu-check: unknown option $1" >&2; usage ;;
    *) [ -z "$OUT_DIR" ] || { echo "gpu-check: one OUT_DIR, got $OUT_DIR and $1" >&2; exit 2; }; OUT_DIR=$1; shift ;;
  esac
done
[ -n "$OUT_DIR" ] || usage
# The knobs are whole numbers (a typo such as GPT2_LARGE_BATCH=3x2 would otherwise reach a step as
# a shell test's "integer expression expected" or a tripod option error, minutes into a lease).
for knob in GPT2_BATCH GPT2_SEQ GPT2_STEPS GPT2_VOCAB_MULTIPLE GEMM_TOKENS TRAIN_STEPS BUDGET GPT2_LARGE_BATCH; do
  least=1
  [ "$knob" != GPT2_LARGE_BATCH ] || least=0  # 0: no fourth bench-train run
  if ! [[ "${!knob}" =~ ^[0-9]+$ ]] || [ "${!knob}" -lt "$least" ]; then
    name=$knob
    [ "$knob" != BUDGET ] || name=--budget
    echo "gpu-check: $name must be a whole number >= $least, got '${!knob}'" >&2
    exit 2
  fi
done
# The sanitizer's tools: compute-sanitizer's own names, at least one.
for tool in $SANITIZER_TOOLS; do
  case $tool in memcheck|initcheck|racecheck|synccheck) ;; *)
    echo "gpu-check: SANITIZER_TOOLS holds memcheck, initcheck, racecheck or synccheck, not '$tool'" >&2; exit 2 ;;
  esac
done
[ -n "${SANITIZER_TOOLS// /}" ] || { echo "gpu-check: SANITIZER_TOOLS is empty" >&2; exit 2; }
# The training, golden and flash steps read the corpus that `data` writes: --only brings it along (a
# run of `--only train-fp32` failed with "data directory ... does not exist").
if [[ "$ONLY" =~ ,(train-fp64|train-fp32|train-bf16|train-rerun|golden|flash|flash-mma), ]] &&
   [[ "$ONLY" != *",data,"* ]]; then
  ONLY="${ONLY}data,"
  echo "gpu-check: --only adds step data (the training, golden and flash steps read its corpus)"
fi
mkdir -p "$OUT_DIR"
OUT_DIR=$(cd "$OUT_DIR" && pwd)
[ -z "$EXPORT_DIR" ] || { mkdir -p "$EXPORT_DIR" && EXPORT_DIR=$(cd "$EXPORT_DIR" && pwd); }
cd "$ROOT"  # presets (reference/configs) and the scripts resolve from the source tree
# Results of this run only; but never empty a folder that is not an earlier run's (`.` by mistake).
if [ -n "$(ls -A "$OUT_DIR")" ] && [ ! -f "$OUT_DIR/.gpu-check" ]; then
  echo "gpu-check: $OUT_DIR is not empty and holds no earlier gpu-check results: give a new or empty folder" >&2
  exit 2
fi
rm -rf "${OUT_DIR:?}"/* "$OUT_DIR/.gpu-check"
touch "$OUT_DIR/.gpu-check"
WORK=$OUT_DIR/work      # data, checkpoints, unpacked libraries: left out of the exported tarball
mkdir -p "$WORK"
STEPS_TSV=$OUT_DIR/steps.tsv
: >"$STEPS_TSV"
START=$(date +%s)
DEADLINE=$((START + BUDGET))

source "$ROOT/ci/gpu-check-lib.sh"  # the machinery; each step sources ci/gpu-check-steps.sh

# ---- where the binaries, their libraries and Python are ----
PY=$(pick_python)
TRIPOD_LOADER=""  # set when the node's glibc is too old: tripod then starts through lib/glibc's loader
if [ -n "$BUNDLE" ]; then
  # A copy, with the compressed libraries unpacked in it (the carried bundle stays as it came).
  mkdir -p "$WORK/bundle"
  cp -a "$BUNDLE/." "$WORK/bundle/"
  [ ! -f "$WORK/bundle/lib-packed.tar.xz" ] || unpack_xz "$WORK/bundle/lib-packed.tar.xz" "$WORK/bundle"
  BUNDLE=$WORK/bundle
  cp "$BUNDLE/bundle.json" "$OUT_DIR/bundle.json" 2>/dev/null || true  # which build this run measured
  TRIPOD_BIN=$BUNDLE/bin/tripod
  GTEST_BIN=$BUNDLE/bin/tripod_gpu_tests
  BUNDLE_LIBS=$BUNDLE/lib
else
  TRIPOD_BIN=$BUILD_DIR/reference/tripod
  GTEST_BIN=$BUILD_DIR/suites/tripod_gpu_tests
  BUNDLE_LIBS=""
fi
CUDA_LIBS=$(find_cuda_lib_dirs)
if needs_bundled_glibc; then
  TRIPOD_LOADER=$BUNDLE/lib/glibc/ld-linux-x86-64.so.2
  TRIPOD_LIBS=$(join_path "$BUNDLE/lib/glibc" "$BUNDLE_LIBS" "$BUNDLE/lib/compat" "$CUDA_LIBS" "${LD_LIBRARY_PATH:-}")
else
  TRIPOD_LIBS=$(join_path "$BUNDLE_LIBS" "$(compat_dir_if_needed)" "$CUDA_LIBS" "${LD_LIBRARY_PATH:-}")
fi
export ROOT OUT_DIR WORK DRY_RUN TRIPOD_BIN GTEST_BIN TRIPOD_LIBS TRIPOD_LOADER CUDA_SONAMES_LOADED_AT_RUN_TIME PY BUNDLE BUILD_DIR GPT2_PRECISION \
       GPT2_BATCH GPT2_SEQ GPT2_STEPS GPT2_VOCAB_MULTIPLE GPT2_LARGE_BATCH PEER_PRECISIONS GEMM_BF16_SIZES GEMM_FP32_SIZES GEMM_TOKENS TRAIN_STEPS \
       SANITIZER_CASES SANITIZER_TOOLS

# name, time limit (s), needs a GPU, has a CPU form for the dry run
PLAN=(
  "probe 30 0 0"
  "data 30 0 0"
  "check-fp64 60 1 1"
  "check-fp32 60 1 1"
  "check-bf16 40 1 1"
  "train-fp64 60 1 1"
  "train-fp32 60 1 1"
  "train-bf16 100 1 1"
  "train-rerun 45 1 1"
  "golden 60 1 1"
  "gtest 90 1 0"
  "health 15 1 0"
  "kernels 40 1 1"
  "bench-train 120 1 1"
  "flash-mma 120 1 1"
  "peer 90 1 1"
  "gemm-bf16 90 1 1"
  "gemm-fp32 45 1 1"
  "nccl-1 45 1 1"
  "nccl-1g 90 1 1"
  "nccl-multi 120 1 1"
  "staged-conform 100 1 1"
  "flash 170 1 1"
  "sanitizer 150 1 0"
  "profile 120 1 0"
  "bf16-gathers 50 1 1"
  "overlap-cpu 60 0 0"
  "pipeline-cpu 40 0 0"
  "nccl-socket-conform 60 1 0"
)
# A test hook (suites/python/test_gpu_check.py): a fake last step that hangs past its limit, fails,
# leaves a process running in a session of its own, or exits 124 at once without a word (as
# tripod's watchdog does), to prove that such a step is reported as what it is and turns the run
# red, and that what it left behind is killed.
case "${TRIPOD_GPU_CHECK_FAKE_STEP:-}" in
  hang) PLAN+=("fake-hang 16 0 0") ;;
  fail) PLAN+=("fake-fail 10 0 0") ;;
  orphan) PLAN+=("fake-orphan 10 0 0") ;;
  exit124) PLAN+=("fake-exit124 10 0 0") ;;
  crash) PLAN+=("fake-crash 10 0 0") ;;
  mpi-error) PLAN+=("fake-mpi-error 10 0 0") ;;
  "") ;;
  *) echo "gpu-check: TRIPOD_GPU_CHECK_FAKE_STEP is hang, fail, orphan, exit124, crash or mpi-error, not $TRIPOD_GPU_CHECK_FAKE_STEP" >&2; exit 2 ;;
esac

# The summary and the export, written again after every step: a run killed from outside (the
# device lease's own time limit) still leaves everything up to its last finished step, and the
# steps it has not reached are listed as pending, so such a summary says INCOMPLETE, never PASS.
summarise_and_export() {  # quiet|loud [pending step names, comma-separated]; returns the summary's status
  local status
  set +e
  "$PY" "$ROOT/reports/gpu_check_summary.py" "$OUT_DIR" --dry-run "$DRY_RUN" --budget "$BUDGET" \
      --elapsed "$(( $(date +%s) - START ))" --pending "${2:-}" >"$OUT_DIR/summary.txt.new"
  status=$?
  set -e
  mv "$OUT_DIR/summary.txt.new" "$OUT_DIR/summary.txt"
  [ "$1" = quiet ] || cat "$OUT_DIR/summary.txt"
  if [ -n "$EXPORT_DIR" ]; then
    mkdir -p "$EXPORT_DIR"
    tar -C "$OUT_DIR" --exclude=./work --exclude='*.safetensors' --exclude='*.npy' --exclude=ncu.csv -czf "$EXPORT_DIR/gpu-check.tar.gz.new" . &&
        mv "$EXPORT_DIR/gpu-check.tar.gz.new" "$EXPORT_DIR/gpu-check.tar.gz"
    cp "$OUT_DIR/summary.json" "$OUT_DIR/summary.txt" "$EXPORT_DIR/" 2>/dev/null || true
    [ "$1" = quiet ] || echo "exported: $EXPORT_DIR/{summary.json,summary.txt,gpu-check.tar.gz}"
  fi
  return "$status"
}

print_plan
SELECTED=()  # the steps this run will take, in order
for entry in "${PLAN[@]}"; do
  read -r name _ <<<"$entry"
  [ -z "$ONLY" ] || [[ "$ONLY" == *",$name,"* ]] || continue
  SELECTED+=("$name")
done
pending_after() {  # NAME: the selected steps after it, comma-separated
  local seen=0 out="" n
  for n in "${SELECTED[@]}"; do
    if [ "$seen" = 1 ]; then out=${out:+$out,}$n; fi
    [ "$n" != "$1" ] || seen=1
  done
  printf '%s' "$out"
}
summarise_and_export quiet "$(IFS=,; echo "${SELECTED[*]:-}")" || true
GPU_REASON=""
for entry in "${PLAN[@]}"; do
  read -r name limit needs_gpu has_dry <<<"$entry"
  [ -z "$ONLY" ] || [[ "$ONLY" == *",$name,"* ]] || continue
  if [ "$DRY_RUN" = 1 ] && [ "$needs_gpu" = 1 ]; then
    record "$name" skipped 0 "no GPU (dry run)" ""
    if [ "$has_dry" = 1 ]; then run_step "dry-$name" "$limit" "step_$name"; fi
  elif [ "$needs_gpu" = 1 ] && [ -n "$GPU_REASON" ]; then
    record "$name" skipped 0 "no GPU: $GPU_REASON" ""
  else
    run_step "$name" "$limit" "step_$name"
    if [ "$name" = probe ] && [ "$DRY_RUN" = 0 ] && [ -f "$WORK/no_gpu" ]; then GPU_REASON=$(cat "$WORK/no_gpu"); fi
  fi
  summarise_and_export quiet "$(pending_after "$name")" || true
done

status=0
summarise_and_export loud || status=$?
exit "$status"
