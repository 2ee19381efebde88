# shellcheck shell=bash
# The steps of ci/gpu-check.sh and the helpers they share. Each step runs in a child shell that
# sources this file, under `timeout`, so a hang kills only it. A step writes into $STEP_DIR (logs,
# JSON) and exits 0 (pass), 77 after `skip REASON`, 75 after `incomplete REASON`, anything else (fail);
# reports/gpu_check_summary.py reads the key figures from the files it leaves. In a dry run
# ($DRY_RUN = 1) the steps run their CPU form in miniature.
#
# A file per kind of step, under ci/gpu-check-steps/; a step is the function step_NAME.
GPU_CHECK_STEP_FILES="helpers correctness speed flash ranks fakes"
for _part in $GPU_CHECK_STEP_FILES; do
  [ -f "$ROOT/ci/gpu-check-steps/$_part.sh" ] || { echo "gpu-check: ci/gpu-check-steps/$_part.sh is missing"; exit 1; }
  # shellcheck disable=SC1090
  source "$ROOT/ci/gpu-check-steps/$_part.sh"
done
unset _part
