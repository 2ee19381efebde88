"""`tripod launch` against the ways a job and its surroundings misbehave: mpirun's local ranks,
which Open MPI 4 starts in process groups of their own, get the SIGTERM themselves (so they save
within --kill-grace) and never outlive a failed attempt; a closed output pipe does not kill the
supervisor; a failure that repeats before any step is not restarted again; a command that cannot
be executed says why; a second interrupt ends the job at once."""
import json
import signal
import subprocess
import time

import pytest

from tripod_cli import MPI_ENV, MPIRUN, TRIPOD, require_tripod

FAST = ["--restart-delay", "0", "--kill-grace", "1"]


def launch(*args, timeout=60, env=None):
    require_tripod()
    return subprocess.run([str(TRIPOD), "launch", *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env=env)


def script(tmp_path, name, body, shebang="#!/bin/sh\n"):
    path = tmp_path / name
    path.write_text(shebang + body)
    path.chmod(0o755)
    return path


def gone(pid):
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def mpirun(ranks, program, *args):
    if not MPIRUN:
        pytest.skip("mpirun not found")
    return [MPIRUN, "--oversubscribe", "--mca", "btl", "self,vader", "-np", str(ranks), str(program), *map(str, args)]


def test_mpiruns_ranks_get_the_sigterm_themselves_and_have_the_grace_to_save(tmp_path):
    # Each rank, on SIGTERM, works 3 s more ("saving") and then records it. The supervisor sent
    # SIGTERM to mpirun's group only; mpirun forwarded it and killed its ranks about a second later,
    # whatever --kill-grace said: neither rank saved.
    rank = script(tmp_path, "rank.sh", """
dir="$1"
trap 'sleep 3; echo saved > "$dir/saved.$OMPI_COMM_WORLD_RANK"; exit 1' TERM
echo "step     1/9 | loss 1.0"
while true; do sleep 0.1; done
""")
    started = time.monotonic()
    r = launch("--max-restarts", 0, "--progress-timeout", 1, "--kill-grace", 20, "--restart-delay", 0, "--",
               *mpirun(2, rank, tmp_path), env=MPI_ENV)
    assert r.returncode != 0, r.stderr
    assert sorted(p.name for p in tmp_path.glob("saved.*")) == ["saved.0", "saved.1"], r.stderr
    assert time.monotonic() - started < 15, r.stderr


def test_ranks_that_ignore_sigterm_do_not_outlive_a_failed_attempt(tmp_path):
    # mpirun was killed after --kill-grace and reported; its ranks, in groups of their own, were
    # never signalled and trained on as orphans (holding the checkpoint root's lock, so the next
    # attempt was refused), with exit 0 reported when a second attempt succeeded.
    rank = script(tmp_path, "rank.sh", """
echo $$ >> "$1/pids"
trap '' TERM
echo "step     1/9 | loss 1.0"
exec sleep 120
""")
    r = launch("--max-restarts", 0, "--progress-timeout", 1, *FAST, "--", *mpirun(2, rank, tmp_path), env=MPI_ENV)
    assert r.returncode != 0, r.stderr
    pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
    assert len(pids) == 2 and all(gone(p) for p in pids), r.stderr


def test_a_closed_output_does_not_kill_the_supervisor(tmp_path):
    # `tripod launch ... | head -n 1`: the supervisor's next write of the job's output raised
    # SIGPIPE, which killed it (exit 141) with no report, no events and no restart.
    job = script(tmp_path, "job.sh", """
i=0; while [ $i -lt 300 ]; do echo "line $i"; i=$((i + 1)); done
sleep 0.5; echo "last"
exit 3
""")
    log = tmp_path / "events.jsonl"
    require_tripod()
    proc = subprocess.Popen([str(TRIPOD), "launch", "--max-restarts", "0", *FAST, "--events", str(log), "--", str(job)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.readline()
    proc.stdout.close()  # as `head -n 1` does
    err = proc.stderr.read()
    proc.wait(timeout=30)
    assert proc.returncode == 3, err
    finish = json.loads(log.read_text().splitlines()[-1])
    assert finish["event"] == "finish" and finish["status"] == "failed", log.read_text()


def test_the_same_error_before_any_step_twice_is_not_restarted_again(tmp_path):
    # A bad --set failed alike in all --max-restarts + 1 attempts, each after --restart-delay.
    job = script(tmp_path, "job.sh", """
echo "tripod: error: unknown config key 'model.bogus'" >&2
exit 1
""")
    r = launch("--max-restarts", 5, *FAST, "--", job)
    assert r.returncode == 1, r.stderr
    assert "attempt 3" not in r.stderr and ("attempt 2 failed before any step with the same error as attempt 1: "
                                            "a restart would too; not restarting") in r.stderr, r.stderr
    assert "used up" not in r.stderr
    # An error that changes, or one after a step, is restarted as before.
    changing = script(tmp_path, "changing.sh", """
n=$(cat "$1" 2>/dev/null || echo 0); n=$((n + 1)); echo $n > "$1"
echo "tripod: error: failure number $n" >&2
exit 1
""")
    r = launch("--max-restarts", 2, *FAST, "--", changing, tmp_path / "count")
    assert r.returncode == 1 and "attempt 3 of at most 3" in r.stderr and "used up" in r.stderr, r.stderr


@pytest.mark.parametrize("body, why", [
    ("echo hi\n", "not a program the system can run (a script needs a #! line)"),
    ("#!/nonexistent/interpreter\necho hi\n", "it, or the interpreter its #! line names, does not exist"),
], ids=["no-shebang", "missing-interpreter"])
def test_a_command_that_cannot_be_executed_says_which_and_why(tmp_path, body, why):
    # "tripod launch: error: cannot execute the command", no name, no reason, restarted each time.
    job = script(tmp_path, "job.sh", body, shebang="")
    r = launch("--max-restarts", 3, *FAST, "--", job)
    assert r.returncode == 127, r.stderr
    assert f"its last error: tripod: error: tripod launch cannot execute {job}: {why}" in r.stderr, r.stderr
    assert "attempt 3" not in r.stderr, r.stderr


def test_a_second_interrupt_sends_sigkill_at_once(tmp_path):
    # The second Ctrl-C was ignored: the supervisor waited out --kill-grace (30 s by default).
    pids = tmp_path / "pids"
    job = script(tmp_path, "job.sh", f"""
trap '' TERM INT
echo $$ > {pids}
exec sleep 120
""")
    require_tripod()
    proc = subprocess.Popen([str(TRIPOD), "launch", "--max-restarts", "3", "--kill-grace", "60", "--", str(job)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(250):
            if pids.exists() and pids.read_text().strip():
                break
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        time.sleep(0.5)
        started = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert time.monotonic() - started < 10, err
    assert "interrupted again: sending SIGKILL to attempt 1" in err, err
    assert proc.returncode != 0 and gone(int(pids.read_text()))


def test_a_huge_restart_budget_is_counted_right(tmp_path):
    r = launch("--max-restarts", 2147483647, *FAST, "--", "true")
    assert r.returncode == 0 and "attempt 1 of at most 2147483648:" in r.stderr, r.stderr
