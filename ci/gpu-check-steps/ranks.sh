# shellcheck shell=bash
# The steps of several ranks: NCCL at world size 1 and across GPUs, the staged communicator,
# ZeRO's bf16 gathers, NCCL over sockets; and issue 17's targets on the node's idle cores.

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
