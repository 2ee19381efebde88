# shellcheck shell=bash
# Steps that only the tests of gpu-check.sh run (--only fake-...): a hang, a failure, a silent
# exit 124, a crash report, a process left behind.

step_fake-hang() { echo "sleeping past the limit"; sleep 60; }
step_fake-fail() { echo "a step that fails"; exit 3; }
step_fake-exit124() { exit 124; }  # silent: an empty log
step_fake-mpi-error() {  # a rank's error, then the banner mpirun prints after it
  echo "tripod: error: rank 1 of 2: the ranks read different training tokens from data.dir data"
  printf -- '--------------------------------------------------------------------------\n'
  echo "Primary job  terminated normally, but 1 process returned a non-zero exit code."
  printf -- '--------------------------------------------------------------------------\n'
  exit 1
}
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
