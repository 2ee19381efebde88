"""`tripod launch`: the supervisor that restarts a failed job. Its jobs here are small shell scripts
standing in for `mpirun ... tripod train --resume auto` (no training needed): they print progress
lines, fail, hang, or write a fake checkpoint root, and keep their state between attempts in a file."""
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tripod_cli import (MPI_ENV, MPIRUN, TRIPOD, hang_up_by_default,
                        make_markov_corpus, mpirun_command, require_tripod)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "reports"))
from tripod_ckpt import read_checkpoint  # noqa: E402

FAST = ["--restart-delay", "0", "--kill-grace", "1"]


def launch(*args, timeout=30, env=None):
    require_tripod()
    return subprocess.run([str(TRIPOD), "launch", *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env=env)


def script(tmp_path, name, body):
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def launches(path):
    """The events of each launch that wrote to `path`, its "start" line first, in order."""
    runs = []
    for line in path.read_text().splitlines():
        event = json.loads(line)
        if event["event"] == "start":
            runs.append([])
        assert runs, f"{path} does not begin with a start event: {line}"
        runs[-1].append(event)
    return runs


def events(path):
    """The last launch's events after its start line."""
    return launches(path)[-1][1:]


def gone(pid):
    """No such process, or only its zombie (which init may not have reaped yet)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_fails_twice_then_succeeds(tmp_path):
    job = script(tmp_path, "job.sh", """
n=$(cat "$1" 2>/dev/null || echo 0); n=$((n + 1)); echo $n > "$1"
echo "step     $n/3 | loss 1.0"
if [ $n -lt 3 ]; then echo "tripod: error: rank 1 of 2: fake failure $n" >&2; exit 3; fi
echo "finished"
""")
    log = tmp_path / "events.jsonl"
    r = launch("--max-restarts", 3, *FAST, "--events", log, "--", job, tmp_path / "count")
    assert r.returncode == 0, r.stderr
    # The job's stdout passes through unchanged; the supervisor writes only to stderr.
    assert r.stdout == "step     1/3 | loss 1.0\nstep     2/3 | loss 1.0\nstep     3/3 | loss 1.0\nfinished\n"
    assert r.stderr.count("failed after") == 2 and "exit status 3" in r.stderr, r.stderr
    assert "its last error: tripod: error: rank 1 of 2: fake failure 2" in r.stderr
    assert "succeeded: 3 attempts, 2 restarts" in r.stderr
    ev = events(log)
    assert [e["event"] for e in ev] == ["failure", "restart", "failure", "restart", "finish"]
    first = ev[0]
    assert (first["attempt"], first["cause"], first["exit_code"], first["signal"]) == (1, "exit", 3, None)
    assert first["error"] == "tripod: error: rank 1 of 2: fake failure 1" and first["last_step"] == 1
    assert first["checkpoint_step"] is None and first["lost_seconds"] is None  # no checkpoint root known
    assert (ev[1]["restart"], ev[1]["attempt"], ev[3]["restart"], ev[3]["attempt"]) == (1, 2, 2, 3)
    assert ev[4] | {"wall_seconds": 0} == {"event": "finish", "status": "succeeded", "exit_code": 0, "attempts": 3,
                                           "restarts": 2, "max_restarts": 3, "wall_seconds": 0, "lost_seconds": None}


def test_always_failing_job_ends_after_max_restarts_with_its_exit_code(tmp_path):
    log = tmp_path / "events.jsonl"
    r = launch("--max-restarts", 2, *FAST, "--events", log, "--", "sh", "-c", "exit 7")
    assert r.returncode == 7, r.stderr
    assert r.stderr.count("failed after") == 3 and "exit status 7" in r.stderr
    assert "failed (exit code 7): 3 attempts, 2 restarts (--max-restarts 2 used up)" in r.stderr
    assert [e["event"] for e in events(log)] == ["failure", "restart"] * 2 + ["failure", "finish"]
    assert events(log)[-1]["status"] == "failed"
    # A signal: 128 + its number, as a shell says it.
    r = launch("--max-restarts", 0, *FAST, "--", "sh", "-c", "kill -KILL $$")
    assert r.returncode == 128 + 9, r.stderr
    assert "killed by signal 9" in r.stderr and "attempt 2" not in r.stderr


def test_silent_job_is_killed_after_the_progress_timeout_and_restarted(tmp_path):
    # The first attempt ignores SIGTERM (as does its sleep, which inherits that), so only the
    # SIGKILL after --kill-grace ends it; the second attempt finishes.
    job = script(tmp_path, "job.sh", """
if [ ! -e "$1" ]; then touch "$1"; echo "step     1/2 | loss 1.0"; trap '' TERM; sleep 60 & echo $! > "$2"; wait; fi
echo "step     2/2 | loss 1.0"
""")
    log, sleeper = tmp_path / "events.jsonl", tmp_path / "sleep.pid"
    started = time.monotonic()
    r = launch("--max-restarts", 1, "--progress-timeout", 1, *FAST, "--events", log, "--",
               job, tmp_path / "started", sleeper)
    assert r.returncode == 0, r.stderr
    assert time.monotonic() - started < 15
    assert "no output for 1.0 s (--progress-timeout)" in r.stderr and "sending SIGKILL" in r.stderr, r.stderr
    failure = events(log)[0]
    assert failure["cause"] == "progress_timeout" and failure["signal"] == 9 and failure["last_step"] == 1
    assert 2.0 <= failure["attempt_seconds"] < 10
    assert gone(int(sleeper.read_text()))  # the whole process group went, not just the script


def test_steps_to_recompute_and_time_lost_from_the_checkpoint_root(tmp_path):
    # Attempt 1 reports steps 1..12, checkpoints step 10 (ROOT/latest), works 0.5 s past it, dies.
    # The root is found from the command's own --save. Only real progress lines count.
    root = tmp_path / "ckpt"
    job = script(tmp_path, "job.sh", """
root="$2"
if [ -e "$root/latest" ]; then echo "step    11/12 | loss 1.0"; echo "step    12/12 | loss 1.0"; exit 0; fi
mkdir -p "$root"
for s in 1 2 3 4 5 6 7 8 9; do echo "step     $s/12 | loss 1.0"; done
echo "step    10/12 | loss 1.0"
mkdir "$root/step-00000010"; touch "$root/step-00000010/manifest.json"; echo step-00000010 > "$root/latest"
mkdir "$root/step-00000012"  # a save that never finished: no manifest
echo "  checkpoint: step 10 saved to $root/step-00000010"
sleep 0.5
echo "step    11/12 | loss 1.0"
echo "[1,0]<stdout>:step    12/12 | loss 1.0"
echo "  stopped after step 99/100"
echo "tripod: error: rank 0 of 2: fake crash" >&2
exit 1
""")
    log = tmp_path / "events.jsonl"
    r = launch("--max-restarts", 1, *FAST, "--events", log, "--", job, "--save", root)
    assert r.returncode == 0, r.stderr
    assert "last step reported: 12; checkpoint: step 10; 2 steps to recompute" in r.stderr, r.stderr
    assert "attempt 2 resumes from checkpoint step 10" in r.stderr
    failure, restart, finish = events(log)
    assert (failure["last_step"], failure["checkpoint_step"], failure["steps_to_recompute"]) == (12, 10, 2)
    assert 0.45 <= failure["lost_seconds"] < failure["attempt_seconds"]
    assert restart["resume_step"] == 10
    assert finish["lost_seconds"] == failure["lost_seconds"]

    # A `latest` that cannot be followed: the trainer resumes from the newest complete step, and the
    # report says so (it read `latest` literally: "checkpoint unknown").
    (root / "latest").write_text("garbage\n")
    r = launch("--max-restarts", 0, *FAST, "--checkpoints", root, "--",
               "sh", "-c", "echo 'step    11/12 | loss 1'; exit 2")
    assert "last step reported: 11; checkpoint: step 10; 1 step to recompute" in r.stderr, r.stderr
    # ... and warns, naming the file, what it says and where the resume goes instead (it was silent).
    assert (f"warning: {root / 'latest'} names 'garbage', which is not a step directory's name "
            "(step-NNNNNNNN); the newest complete checkpoint, step-00000010, is used instead") in r.stderr, r.stderr

    # --checkpoints names the root; without `latest` a restart starts at step 0 and the whole attempt is lost.
    empty = tmp_path / "empty"
    empty.mkdir()
    r = launch("--max-restarts", 0, *FAST, "--checkpoints", empty, "--events", log, "--",
               "sh", "-c", "echo 'step     3/9 | loss 1'; exit 2")
    assert r.returncode == 2
    failure = events(log)[0]
    assert (failure["checkpoint_step"], failure["steps_to_recompute"]) == (0, 3)
    assert failure["lost_seconds"] == failure["attempt_seconds"]
    # The second launch appended to the first's events (they were truncated), each after its start line.
    first, second = launches(log)
    assert [e["event"] for e in first] == ["start", "failure", "restart", "finish"]
    assert [e["event"] for e in second] == ["start", "failure", "finish"]
    assert second[0]["command"] == ["sh", "-c", "echo 'step     3/9 | loss 1'; exit 2"]
    assert second[0]["max_restarts"] == 0 and second[0]["unix_time"] >= first[0]["unix_time"]


def test_empty_or_missing_command_is_a_clear_error(tmp_path):
    for args in ([], ["--"], ["--max-restarts", "2", "--"]):
        r = launch(*args)
        assert r.returncode == 1, r.stderr
        assert "tripod: error: no command to run: give the job's command line after `--`" in r.stderr
    r = launch("--", "no-such-command-for-tripod")
    assert r.returncode == 1
    assert "cannot run 'no-such-command-for-tripod': no such executable on PATH" in r.stderr


# SIGHUP (the terminal gone) killed the supervisor and left the job to PR_SET_PDEATHSIG, unreported.
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_sigterm_ends_the_job_group_without_a_restart(tmp_path, signum):
    job = script(tmp_path, "job.sh", """
sleep 60 & echo "$$ $!" > "$1.tmp"; mv "$1.tmp" "$1"
echo "step     1/9 | loss 1.0"
wait
""")
    pids, log = tmp_path / "pids", tmp_path / "events.jsonl"
    require_tripod()
    supervisor = subprocess.Popen([str(TRIPOD), "launch", "--max-restarts", "3", *FAST, "--events", log, "--",
                                   job, pids], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  preexec_fn=hang_up_by_default)
    try:
        for _ in range(200):
            if pids.exists():
                break
            time.sleep(0.02)
        assert pids.exists(), "the job did not start"
        supervisor.send_signal(signum)
        _, err = supervisor.communicate(timeout=15)
    finally:
        supervisor.kill()
    assert supervisor.returncode != 0, err
    assert "interrupted: sending SIGTERM to attempt 1" in err and "attempt 2" not in err, err
    assert all(gone(int(p)) for p in pids.read_text().split())
    assert [e["event"] for e in events(log)] == ["failure", "finish"]
    assert events(log)[0]["cause"] == "interrupted" and events(log)[-1]["status"] == "interrupted"


def test_a_failed_attempt_leaves_no_process_behind(tmp_path):
    # The command exits, its background child (same group, holding the output pipes) lives on:
    # it is ended before the restart, not left to hold a GPU.
    pid = tmp_path / "pid"
    r = launch("--max-restarts", 0, *FAST, "--", "sh", "-c", f"sleep 60 & echo $! > {pid}; exit 4")
    assert r.returncode == 4, r.stderr
    assert "processes of attempt 1 outlived its command" in r.stderr
    assert gone(int(pid.read_text()))


@pytest.mark.parametrize("moves", [False, True])
def test_a_divergence_at_the_same_step_twice_is_not_restarted_again(tmp_path, moves):
    # Tripod resumes bit for bit, so a run that diverged once diverges at the same step on every
    # restart: all --max-restarts were spent replaying it. One restart is still made (a NaN from a
    # flaky GPU would not come back); a divergence elsewhere the second time is restarted as before.
    job = script(tmp_path, "job.sh", f"""
n=$(cat "$1" 2>/dev/null || echo 0); n=$((n + 1)); echo $n > "$1"
echo "step     4/9 | loss 1.0"
step={"$((4 + n))" if moves else 5}
echo "tripod: error: rank 1 of 2: step $step: the loss is -nan (training diverged); parameters were not updated" >&2
exit 1
""")
    log = tmp_path / "events.jsonl"
    r = launch("--max-restarts", 3, *FAST, "--events", log, "--", job, tmp_path / "count")
    assert r.returncode == 1, r.stderr
    finish = events(log)[-1]
    if not moves:
        assert "attempt 2 diverged at step 5 as attempt 1 did: a resumed run replays its batches bit for bit, " \
               "so a restart would too; not restarting" in r.stderr, r.stderr
        assert (finish["status"], finish["attempts"], finish["restarts"]) == ("diverged", 2, 1)
        assert "diverged (exit code 1): 2 attempts, 1 restart; wall time" in r.stderr
    else:
        assert "not restarting" not in r.stderr
        assert (finish["status"], finish["attempts"]) == ("failed", 4)


@pytest.mark.parametrize("ranks", [1, 2])
def test_a_training_run_that_diverges_is_restarted_once(tmp_path, ranks):
    # The real thing, through the save's refusal of an overflowed state (fp32 at a learning rate of
    # 1e39): "after step 1's update (training diverged)" both times. On two ranks each rank's refusal
    # is a line of its own after the error line ("  rank 1: rank 1's tensor ...").
    corpus = make_markov_corpus(tmp_path / "markov")
    root, log = tmp_path / "ckpt", tmp_path / "events.jsonl"
    train = ["train", "--config", "tiny", "--set", f"data.dir={corpus}", "--set", "model.n_layer=1",
             "--set", "model.d_model=32", "--set", "model.n_head=2", "--set", "model.d_ff=64",
             "--set", "model.context=16", "--set", "train.seq_len=16", "--set", "train.batch_size=4",
             "--set", "train.eval_batches=1", "--set", "train.dtype=fp32", "--set", "optim.lr=1e39",
             "--set", "optim.min_lr=1e39", "--set", "optim.warmup_steps=0", "--set", "train.steps=9",
             "--set", "train.save_every=1", "--save", root, "--resume", "auto"]
    job = mpirun_command(2, *train, "--zero", 1, timeout=60) if ranks == 2 else [TRIPOD, *train]
    r = launch("--max-restarts", 3, *FAST, "--events", log, "--", *job, timeout=120, env=MPI_ENV)
    assert r.returncode == 1, r.stdout + r.stderr
    failures = [e for e in events(log) if e["event"] == "failure"]
    assert len(failures) == 2 and all(f["checkpoint_step"] == 0 for f in failures), failures
    assert events(log)[-1]["status"] == "diverged"
    assert "attempt 2 diverged at step 1 as attempt 1 did" in r.stderr, r.stderr
    if ranks == 2:
        assert "\n  rank 1: rank 1's tensor '" in r.stderr and "after step 1's update (training diverged)" in r.stderr


def test_restarts_a_two_rank_training_job_from_its_checkpoint(tmp_path):
    # The real thing: rank 1 kills itself at the start of step 8 (TRIPOD_FAULT, armed only in a run
    # that did not resume); the restart resumes from step 5 with --resume auto and finishes.
    assert MPIRUN, "mpirun not found (install openmpi-bin)"
    corpus = make_markov_corpus(tmp_path / "markov")
    root, log = tmp_path / "ckpt", tmp_path / "events.jsonl"
    small = ["--set", "model.n_layer=1", "--set", "model.d_model=32", "--set", "model.n_head=2", "--set", "model.d_ff=64",
             "--set", "model.context=16", "--set", "train.seq_len=16", "--set", "train.batch_size=4",
             "--set", "train.eval_batches=1", "--set", "train.log_every=1"]
    job = mpirun_command(2, "train", "--config", "tiny", "--set", f"data.dir={corpus}", *small, "--set", "train.steps=12",
                         "--set", "train.save_every=5", "--save", root, "--resume", "auto", timeout=60)
    r = launch("--max-restarts", 2, "--restart-delay", 0, "--events", log, "--", *job, timeout=120,
               env={**MPI_ENV, "TRIPOD_FAULT": "kill:1:8"})
    assert r.returncode == 0, r.stdout + r.stderr
    failure, restart, finish = events(log)
    assert failure["exit_code"] != 0 and failure["last_step"] == 7, failure
    assert (failure["checkpoint_step"], failure["steps_to_recompute"], restart["resume_step"]) == (5, 2, 5)
    assert 0 < failure["lost_seconds"] < failure["attempt_seconds"]
    assert (finish["status"], finish["attempts"]) == ("succeeded", 2)
    assert "step    12/12" in r.stdout and (root / "latest").read_text().strip() == "step-00000012"
    # The recovered run ends exactly where an uninterrupted one does: same layout, bit for bit.
    straight = tmp_path / "straight"
    uninterrupted = subprocess.run([*job[:job.index("--save")], "--save", str(straight)], capture_output=True,
                                   text=True, timeout=120, env=MPI_ENV)
    assert uninterrupted.returncode == 0, uninterrupted.stdout + uninterrupted.stderr
    recovered_manifest, recovered = read_checkpoint(root)
    straight_manifest, expected = read_checkpoint(straight)
    assert recovered_manifest["data"] == straight_manifest["data"]
    for kind in expected:
        for name in expected[kind]:
            np.testing.assert_array_equal(recovered[kind][name], expected[kind][name], err_msg=f"{kind} {name}")


def test_a_huge_restart_delay_waits_instead_of_restarting_at_once(tmp_path):
    # --restart-delay 1e10 overflowed the clock: "restart 1 of 1 in 10000000000.0 s", then at once.
    require_tripod()
    events = tmp_path / "events.jsonl"
    job = subprocess.Popen([str(TRIPOD), "launch", "--restart-delay", "1e10", "--max-restarts", "1", "--events",
                            str(events), "--", "false"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(2)
    still_waiting = job.poll() is None
    job.send_signal(signal.SIGINT)  # this test's own child: the interruption ends the wait
    job.communicate(timeout=30)
    kinds = [json.loads(line)["event"] for line in events.read_text().splitlines()]
    assert still_waiting and kinds.count("failure") == 1, kinds
