"""No silent hang: a rank that stops (SIGSTOP, a debugger, a hung driver) ends the job within the
communication timeout, with the waiting operation, group and rank named and a non-zero exit; and
the communicator is chosen by --comm, with a clear error when it cannot move the backend's tensors."""
import os
import re
import signal
import subprocess
import time

import pytest

from tripod_cli import MPI_ENV, TRIPOD, make_markov_corpus, mpirun_command, require_tripod

SMALL = ["--set", "model.n_layer=1", "--set", "model.d_model=32", "--set", "model.n_head=2",
         "--set", "model.d_ff=64", "--set", "model.context=16", "--set", "train.seq_len=16",
         "--set", "train.batch_size=8", "--set", "train.eval_batches=1", "--set", "train.dtype=fp64",
         "--set", "optim.warmup_steps=1"]


def run(cmd, timeout=60, env=MPI_ENV):
    require_tripod()
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return make_markov_corpus(tmp_path_factory.mktemp("corpus") / "markov")


def children(pid):
    found = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return [int(p) for p in found]


def test_a_stopped_rank_ends_the_job_within_the_timeout(corpus, tmp_path):
    # Before the watchdog, the running rank waited in its all_reduce forever.
    require_tripod()
    cmd = mpirun_command(2, "train", "--config", "tiny", "--set", f"data.dir={corpus}", *SMALL,
                         "--set", "train.steps=1000000", "--comm-timeout", "3", timeout=90)
    job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=MPI_ENV)
    victim = None
    try:
        assert job.stdout.readline(), "the job printed nothing"  # ranks are up and training
        for _ in range(100):
            ranks = children(job.pid)
            if len(ranks) == 2:
                break
            time.sleep(0.05)
        assert len(ranks) == 2, ranks
        victim = max(ranks)
        os.kill(victim, signal.SIGSTOP)
        stopped_at = time.monotonic()
        _, err = job.communicate(timeout=60)
        waited = time.monotonic() - stopped_at
    finally:
        if victim is not None:
            try:
                os.kill(victim, signal.SIGKILL)  # mpirun's SIGTERM waits for a SIGCONT that never comes
            except ProcessLookupError:
                pass
        if job.poll() is None:
            job.kill()
    assert job.returncode != 0
    assert "waited 3 s for its peers without completing (--comm-timeout 3)" in err, err
    assert re.search(r"rank [01] of 2: \w+ on mpi:world\S* \(rank [01] of 2\) waited", err), err
    assert waited < 30, f"the job ended {waited:.1f} s after the stop (timeout 3 s)"


def test_an_exception_that_is_not_tripods_on_one_rank_ends_the_job_at_once(corpus):
    # A std::bad_alloc on one rank (an allocation that fails on one node) unwound to main through
    # MPI_Finalize, which waited for a peer that waited in a collective for it: the job hung for the
    # whole --comm-timeout (exit 124, the peer blaming "a peer rank is stopped, hung") and the
    # failing rank's error was never printed.
    started = time.monotonic()
    result = run(mpirun_command(2, "train", "--config", "tiny", "--set", f"data.dir={corpus}", *SMALL,
                                "--set", "train.steps=5", "--comm-timeout", "60", timeout=90),
                 timeout=120, env={**MPI_ENV, "TRIPOD_FAULT": "bad-alloc:1:2"})
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert "tripod: internal error: rank 1 of 2: std::bad_alloc" in result.stderr, result.stderr
    assert "waited" not in result.stderr and time.monotonic() - started < 40, result.stderr


def test_timeout_must_not_be_negative():
    result = run([str(TRIPOD), "bench", "comm", "all_reduce", "-b", "8", "-e", "64", "--comm-timeout", "-1"])
    assert result.returncode != 0
    assert "--comm-timeout: -1 s is out of range (seconds, 0-1e9; 0 turns the timeout off)" in result.stderr


@pytest.mark.parametrize("args, message", [
    (["--comm", "bogus"], "--comm: unknown communicator 'bogus' (one of: auto, mpi, staged, nccl)"),
    (["--comm", "nccl"], "--comm nccl moves CUDA tensors only: use it with --backend cuda"),
    (["--backend", "emulated", "--comm", "mpi"], "--comm mpi moves host memory only"),
])
def test_a_communicator_that_cannot_move_the_tensors_is_refused(args, message):
    result = run([str(TRIPOD), "bench", "comm", "all_reduce", "-b", "8", "-e", "64", *args])
    assert result.returncode != 0
    assert message in result.stderr, result.stderr


def test_staged_is_the_emulated_backends_communicator():
    result = run(mpirun_command(2, "bench", "comm", "all_reduce", "-b", "8", "-e", "1K", "--backend", "emulated",
                                "--comm", "staged"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "# Out of bounds values : 0 OK" in result.stdout


def test_a_bad_comm_is_refused_even_by_a_single_process_run(corpus):
    result = run([str(TRIPOD), "train", "--config", "tiny", "--set", f"data.dir={corpus}", *SMALL,
                  "--set", "train.steps=1", "--comm", "nccl"])
    assert result.returncode != 0
    assert "--comm nccl moves CUDA tensors only" in result.stderr


@pytest.mark.parametrize("comm", ["nccl", "staged"])
def test_cuda_without_a_gpu_fails_within_seconds(comm):
    started = time.monotonic()
    result = run([str(TRIPOD), "bench", "comm", "all_reduce", "--backend", "cuda", "--comm", comm, "-b", "8",
                  "-e", "1K"], timeout=30)
    if result.returncode == 0:
        pytest.skip("this machine has a usable GPU")
    assert "backend 'cuda'" in result.stderr, result.stderr  # no usable device (or not built in)
    assert time.monotonic() - started < 10
