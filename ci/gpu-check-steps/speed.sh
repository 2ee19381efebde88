# shellcheck shell=bash
# The steps that measure: cuBLASLt's GEMM rate, the kernels' bandwidth, GPT-2's training step and
# MFU, the PyTorch peer, the kernel-by-kernel profile and the GPUs' health.

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
# Each run goes ahead when one before it failed (a shape that fails is in its JSON with its error,
# the others timed: bench/gemm_rate_bench.h); the step then fails at the end.
step_gemm-bf16() {
  local rc=0
  gemm_rate bf16 "$GEMM_BF16_SIZES" gemm.json || rc=1
  gemm_rate bf16-mixed "" gemm-mixed.json || rc=1
  gemm_rate bf16 "$GEMM_BF16_SIZES" gemm-bf16out.json --c-dtype bf16 || rc=1
  torch_gemm_rate || rc=1
  return "$rc"
}
step_gemm-fp32() { gemm_rate fp32 "$GEMM_FP32_SIZES" gemm.json; }

step_kernels() {
  # Twice: as the backend runs by default, then with its fused forms off (TRIPOD_CUDA_FUSIONS=none),
  # for the kernels whose fusion is inside one Backend call (LayerNorm backward's weight and bias
  # sums): the same row of both runs, as a ratio (on the CPU of a dry run the variable changes nothing).
  # A row that fails is in the JSON with its error and the rest are timed (bench/timed_cases.h):
  # both runs and the key figure go ahead, and the step fails at the end.
  local fusions failed=""
  for fusions in all none; do
    local json="$STEP_DIR/kernels.json"
    [ "$fusions" = all ] || json="$STEP_DIR/kernels-unfused.json"
    if dry; then
      TRIPOD_CUDA_FUSIONS=$fusions tripod bench kernel-rate --backend cpu --tokens 64 --channels 64 --vocab 256 \
          --repeat 2 --min-time-ms 0 --json "$json" || failed+=" fusions=$fusions"
    else
      TRIPOD_CUDA_FUSIONS=$fusions tripod bench kernel-rate --backend cuda --tokens "$GEMM_TOKENS" --repeat 10 \
          --json "$json" || failed+=" fusions=$fusions"
    fi
  done
  "$PY" -c 'import json,sys; j=json.load(open(sys.argv[1])); print("copy %.0f GB/s; " % j["copy_gbps"] + ", ".join(("%s FAILED" % r["name"]) if "error" in r else "%s %.0f%%" % (r["name"], r["pct_of_copy"]) + (" (%.2f ms, %.1f TFLOP/s nominal)" % (1e3 * r["median_seconds"], r["nominal_tflops"]) if "nominal_tflops" in r else "") for r in j["results"][1:]))' \
      "$STEP_DIR/kernels.json" | tee "$STEP_DIR/key.txt" || true
  "$PY" -c 'import json,sys
rows = [{r["name"]: r for r in json.load(open(f))["results"]} for f in sys.argv[1:3]]
name = "layernorm bwd"
fused, apart = rows[0][name]["median_seconds"], rows[1][name]["median_seconds"]
print("%s: %.3f ms, fusions off %.3f ms (fused %.2fx)" % (name, 1e3 * fused, 1e3 * apart, apart / fused))' \
      "$STEP_DIR/kernels.json" "$STEP_DIR/kernels-unfused.json" | tee -a "$STEP_DIR/key.txt" || true
  if [ -n "$failed" ]; then echo "FAILED: kernel-rate with$failed (its failed rows: \"error\" in the JSON)"; exit 1; fi
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

# The PyTorch peer: GPT-2 trained in PyTorch eager, then its causal attention alone at GPT-2's
# shape through each SDPA backend (flash, cuDNN, memory-efficient, math; forward, backward, and
# whether the backward reruns bit for bit), beside the attention rows of the kernels step.
step_peer() {
  export PYTHONUNBUFFERED=1
  if dry; then
    "$PY" "$ROOT/reports/gpu_peer.py" --device cpu --config tiny --batch 2 --seq-len 32 --steps 2 --warmup 1 \
        --precision "$PEER_PRECISIONS" --json "$STEP_DIR/peer.json"
    # the dry kernels step's attention shape (kernel-rate's CPU form), so that the two compare
    "$PY" "$ROOT/reports/torch_attention_rate.py" --device cpu --batch 1 --seq-len 64 --heads 1 --head-dim 64 \
        --dtype fp32 --repeat 2 --min-time-ms 0 --json "$STEP_DIR/attention.json"
  else
    "$PY" "$ROOT/reports/gpu_peer.py" --device cuda --config gpt2-124m --batch "$GPT2_BATCH" --seq-len "$GPT2_SEQ" \
        --precision "$PEER_PRECISIONS" --json "$STEP_DIR/peer.json"
    # GPT-2's attention, as the kernels step's attention rows (kernel-rate at $GEMM_TOKENS tokens and its
    # defaults: T 1024, 12 heads of 64; the summary compares the two only where the shapes agree)
    "$PY" "$ROOT/reports/torch_attention_rate.py" --device cuda --batch $(( GEMM_TOKENS >= 2048 ? GEMM_TOKENS / 1024 : 1 )) \
        --seq-len 1024 --heads 12 --head-dim 64 --json "$STEP_DIR/attention.json"
  fi
}

step_profile() {
  # Where bench-train's step spends its device time, kernel by kernel: Nsight Compute times each
  # kernel of one warm-up and one timed step (one metric, one pass a kernel; clocks and caches
  # left as they are), reports/kernel_profile.py sums them by name per step. With the attention
  # of the flash step that passed and was fastest this run, where one beat the default (the step
  # the MFU target is then judged on: reports/flash_speed.py --fastest).
  local ncu rc=0 limit=$((STEP_LIMIT - 10)) attention
  ncu=$(find_tool ncu /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu) || skip "ncu (Nsight Compute) not found"
  write_tripod_wrapper
  attention=$("$PY" "$ROOT/reports/flash_speed.py" --fastest "$OUT_DIR" 2>/dev/null || true)
  if [ -n "$attention" ]; then export TRIPOD_CUDA_ATTENTION=$attention; fi
  echo "${attention:-default (gemm)}" >"$STEP_DIR/attention.txt"
  echo "== $ncu over tripod bench train --steps 1, gpt2-124m $GPT2_PRECISION B${GPT2_BATCH}xT${GPT2_SEQ}, attention ${attention:-default} (limit ${limit} s)"
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
  [ -z "$attention" ] || sed -i "1s/^/TRIPOD_CUDA_ATTENTION=$attention: /" "$STEP_DIR/key.txt"
}

step_health() {
  tripod bench health --samples 3 --interval-ms 300 --json "$STEP_DIR/health.json" | tee "$STEP_DIR/key.txt"
}
