# shellcheck shell=bash
# The flash attention step: its kernels checked, sanitised, trained with and timed, in one step.

# The flash attention kernels (TRIPOD_CUDA_ATTENTION=flash: fp32 attention under the bf16-operand
# policy without the T x T scores; written and replayed on the host, first run here), each part
# reported whether or not the one before passed:
#   check     check-backend's attention cases against the CPU (out, dq, dk, dv within 2^-8; probs
#             holds the flash state there and is not compared)
#   train     tiny bf16-mixed with flash against the CPU's emulation of the policy: every loss
#             within 2.5x the bf16 effect of the same run (the CPU's bf16-mixed vs fp32 losses).
#             Flash rounds each probability before the division by the row sum, the CPU after;
#             on a model this small that is most of what bf16 does to attention (on the emulated
#             device, test_emulated_flash_attention.cpp's 2-head model, flash vs the CPU: 0.8x
#             the bf16 effect over 10 steps, 2026-12-06; over 4 steps 4.4x, the effect's rounding
#             noise cancelling for a while: a gate wants the whole run)
#   speed     kernel-rate's attention rows and bench-train's GPT-2 step, both with flash, against
#             the `kernels` and `bench-train` steps of this run; and the step padded at the large
#             batch (bench-train's fourth run) with flash: a passing flash step's runs count for
#             the MFU target beside bench-train's (flash holds no T x T scores: the large batch
#             is where it should pay most)
#   sanitize  compute-sanitizer memcheck and racecheck (shared-memory races) of the GPU test
#             CudaFlashAttention (flash on the GPU against the emulated device's blocks, small
#             shapes: seconds under the sanitizer); last, each tool within what the step has left
#             (at most 40 s), so a step cut short loses them, not the GPT-2 runs; a part cut by
#             its time limit gives no verdict and makes the step incomplete, not failed
# The dry run takes every part but the sanitizer on the emulated device, which runs the same block
# algorithms on the host (TRIPOD_CUDA_ATTENTION=flash too).
#
# The step `flash-mma` runs the same parts for TRIPOD_CUDA_ATTENTION=flash-mma, whose kernels keep
# their tiles in mma.sync fragments (backend/kernels/flash_forward_warp.h, flash_backward_warp.h;
# the same state; written without a GPU on 2026-12-06), its sanitizer part on the GPU test of
# those kernels; its GPT-2 runs count for the MFU target the same way when it passes.
step_flash() { flash_step flash 'CudaFlashAttention.MatchesTheEmulatedDevicesBlocks'; }
# (the sanitizer part on the test against the emulated device's warps; the one from the model's bf16
# qkv, which adds four runs at T 200, runs in the gtest step: the sanitizer parts have 40 s at most)
step_flash-mma() { flash_step flash-mma 'CudaFlashAttention.TheRegisterKernelsMatchTheEmulatedDevicesWarps'; }

flash_step() {  # VARIANT (TRIPOD_CUDA_ATTENTION) GTEST_FILTER (its GPU test, for the sanitizer part)
  local variant=$1 gtest_filter=$2
  export TRIPOD_CUDA_ATTENTION=$variant TINY_DRY_SEQ=48  # T 48 > tiny's head size 32: flash takes it
  local failed="" cut="" key="" device=cuda steps=$TRAIN_STEPS sanitizer part rc effect tol
  local base_kernels=$OUT_DIR/kernels/kernels.json base_bench=$OUT_DIR/bench-train/bench.json
  if dry; then
    device=emulated steps=3
    base_kernels=$OUT_DIR/dry-kernels/kernels.json base_bench=$OUT_DIR/dry-bench-train/bench.json
  fi
  tripod check-backend --backend "$device" --against cpu --dtype fp32 bf16 --only attention \
      --json "$STEP_DIR/check.json" || failed+=" check"
  key+="check $("$PY" -c 'import json,sys; r=json.load(open(sys.argv[1]))["results"]; print("%d cases, %d failed, worst %.2g of bound" % (len(r), sum(not x["pass"] for x in r), max([float("inf") if x.get("error_over_bound") is None else x["error_over_bound"] for x in r] or [0])))' "$STEP_DIR/check.json" 2>/dev/null || echo "no results")"
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
  # The sanitizer parts last (the header says why), each within what the step has left
  local left limit parts=2
  if dry; then
    key+="; sanitizer not in the dry run"
  elif sanitizer=$(find_sanitizer) && [ -x "$GTEST_BIN" ]; then
    write_tripod_wrapper "$GTEST_BIN" "$WORK/gtest-run"
    for part in memcheck racecheck; do
      left=$((STEP_LIMIT - 5 - SECONDS))
      limit=$((left / parts))
      parts=$((parts - 1))
      [ "$limit" -le 40 ] || limit=40
      if [ "$limit" -lt 5 ]; then cut+=" $part"; key+="; $part: no time left"; continue; fi
      rc=0
      timeout -k 3 "$limit" "$sanitizer" --tool "$part" --target-processes all --error-exitcode 99 --print-limit 20 \
          "$WORK/gtest-run" --gtest_filter="$gtest_filter" >"$STEP_DIR/$part.log" 2>&1 || rc=$?
      tail -3 "$STEP_DIR/$part.log"
      case $rc in
        0) key+="; $part clean" ;;
        124|137) cut+=" $part"; key+="; $part cut at $limit s (no verdict)" ;;
        *) failed+=" $part(exit $rc)"; key+="; $part exit $rc" ;;
      esac
      { grep -Eq '\[  PASSED  \] [1-9][0-9]* tests?\.' "$STEP_DIR/$part.log" &&
          ! grep -q '\[  FAILED  \]' "$STEP_DIR/$part.log"; } || [ "$rc" != 0 ] ||
        { failed+=" $part(test did not pass)"; }
    done
  else
    key+="; compute-sanitizer or the GPU tests not found"
  fi
  echo "$key" | tee "$STEP_DIR/key.txt"
  if [ -n "$failed" ]; then echo "FAILED:$failed"; exit 1; fi
  [ -z "$cut" ] || incomplete "cut by the time limit:$cut"
}
