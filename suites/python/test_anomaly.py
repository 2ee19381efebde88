"""The anomaly policy (`anomaly` config section, train/step_guard.h): a non-finite or spiking loss
stops the run naming the step the log counts, skips the update leaving the state exactly as it
was, or rolls back to the run's last checkpoint and continues the data after the bad batch - in one
process and under mpirun, with synchronous and asynchronous saves. TRIPOD_FAULT=nan-loss:S and
spike-loss:S make the guard see step S's loss as NaN or as 10 times what it is; the divergence
tests use a real one (a learning rate of 1e30)."""
import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tripod_cli import MPI_ENV, TRIPOD, make_markov_corpus, mpirun_command, require_tripod

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "reports"))
from tripod_ckpt import read_checkpoint  # noqa: E402

BATCH = 8
MODEL = ["--set", "model.n_layer=2", "--set", "model.d_model=32", "--set", "model.n_head=4",
         "--set", "model.d_ff=64", "--set", "model.context=16", "--set", "train.seq_len=16",
         "--set", f"train.batch_size={BATCH}", "--set", "train.eval_batches=1", "--set", "train.dtype=fp64",
         "--set", "optim.warmup_steps=1", "--set", "train.log_every=1"]
DIVERGE = ["--set", "optim.lr=1e30", "--set", "optim.min_lr=1e30", "--set", "optim.warmup_steps=0",
           "--set", "optim.grad_clip=0"]
SPIKES = ["--set", "anomaly.spike_factor=3", "--set", "anomaly.spike_window=2"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return make_markov_corpus(tmp_path_factory.mktemp("corpus") / "markov")


def train(corpus, *args, ranks=1, fault=None, timeout=120):
    require_tripod()
    base = ["train", "--config", "tiny", "--set", f"data.dir={corpus}", *MODEL, *args]
    cmd = mpirun_command(ranks, *base) if ranks > 1 else [str(TRIPOD), *map(str, base)]
    env = {**MPI_ENV, **({"TRIPOD_FAULT": fault} if fault else {})}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def ok(result):
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def logged_steps(stdout):
    return [int(m) for m in re.findall(r"^step +(\d+)/", stdout, re.M)]


def records(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def test_divergence_names_the_step_the_log_counts(corpus):
    # The log counts from 1; the error once said "step 4" for the log's "step 5/20".
    result = train(corpus, "--set", "train.steps=20", *DIVERGE)
    assert result.returncode != 0 and "training diverged" in result.stderr, result.stdout + result.stderr
    failed = int(re.search(r"step (\d+): ", result.stderr).group(1))
    assert failed == max(logged_steps(result.stdout)) + 1, result.stdout + result.stderr


@pytest.mark.parametrize("policy", ["stop", "skip"])
def test_an_update_that_overflows_at_the_last_step_fails_the_run(corpus, tmp_path, policy):
    # fp32 at a learning rate of 1e39: the step's loss and gradient norm are finite, so the guard
    # lets its update through, which overflows every weight. After the last step nothing judged
    # them: the run printed "val loss -nan", then "done", and exited 0.
    metrics = tmp_path / "m.jsonl"
    result = train(corpus, "--set", "train.steps=1", "--set", "train.dtype=fp32", "--set", "optim.lr=1e39",
                   "--set", "optim.min_lr=1e39", "--set", "optim.warmup_steps=0", "--set", f"anomaly.policy={policy}",
                   "--set", f"train.metrics={metrics}")
    assert result.returncode != 0, result.stdout + result.stderr
    assert "step 1: the validation loss is " in result.stderr, result.stderr
    assert "after this step's update (training diverged)" in result.stderr
    assert "done:" not in result.stdout
    assert records(metrics)[-1]["step"] == 0 and records(metrics)[-1]["val_loss"] is None  # recorded first


def test_skip_leaves_the_state_exactly_as_it_was(corpus, tmp_path):
    skipped = ok(train(corpus, "--set", "train.steps=3", "--set", "anomaly.policy=skip", "--save", tmp_path / "a",
                       "--set", f"train.metrics={tmp_path / 'a.jsonl'}", fault="nan-loss:3"))
    assert "step 3: the loss is nan: update skipped (anomaly 1 of at most 10)" in skipped.stdout
    step3 = [r for r in records(tmp_path / "a.jsonl") if r.get("step") == 2 and "loss" in r]
    assert step3[0]["update"] == "skipped" and step3[0]["anomaly"] == "the loss is nan"
    assert step3[0]["loss"] is None  # the NaN the guard saw (JSON null); it recorded the true loss beside it
    # Same schedule (train.steps=3), saved after step 2: the skipped step changed nothing.
    ok(train(corpus, "--set", "train.steps=3", "--set", "train.save_every=2", "--set", "train.keep_checkpoints=3",
             "--save", tmp_path / "b"))
    manifest_a, state_a = read_checkpoint(tmp_path / "a")
    _, state_b = read_checkpoint(tmp_path / "b" / "step-00000002")
    assert manifest_a["step"] == 3 and manifest_a["data"]["next_sample"] == 3 * BATCH  # the step and data moved on
    for kind in state_b:
        for name in state_b[kind]:
            np.testing.assert_array_equal(state_a[kind][name], state_b[kind][name], err_msg=f"{kind} {name}")


def rollback_run(corpus, tmp_path, *extra, ranks=1, fault="spike-loss:5"):
    return ok(train(corpus, "--set", "train.steps=8", "--set", "train.save_every=2", "--set", "anomaly.policy=rollback",
                    "--set", "anomaly.skip_batches=1", *SPIKES, "--save", tmp_path / "ck",
                    "--set", f"train.metrics={tmp_path / 'm.jsonl'}", *extra, ranks=ranks, fault=fault))


def test_rollback_reloads_the_newest_checkpoint_and_skips_the_bad_batches(corpus, tmp_path):
    ok(train(corpus, "--set", "train.steps=8", "--set", f"train.metrics={tmp_path / 'plain.jsonl'}"))
    result = rollback_run(corpus, tmp_path)
    # Step 5 (samples 32-39) spiked: back to step 4, the data continues after it and one more batch.
    assert re.search(r"step 5: the loss \S+ is a spike: above 3 x the median \S+ of the last 2 accepted steps: "
                     r"rolled back to step 4 \(\S+step-00000004\); the data continues at sample 48, skipping "
                     r"samples 32 to 47 \(anomaly 1 of at most 10\)", result.stdout), result.stdout
    assert logged_steps(result.stdout) == [1, 2, 3, 4, 5, 5, 6, 7, 8]
    ran = [r for r in records(tmp_path / "m.jsonl") if "loss" in r]
    before = {r["step"]: r["loss"] for r in records(tmp_path / "plain.jsonl") if "loss" in r}
    assert [r["loss"] for r in ran[:4]] == [before[s] for s in range(4)]  # identical up to the spike
    assert ran[4]["loss"] == 10 * before[4]  # the spike the guard judged (spike-loss multiplies by 10)
    assert ran[4]["update"] == "rolled back"
    assert {"event": "rollback", "step": 4, "to_step": 4, "next_sample": 48} in records(tmp_path / "m.jsonl")
    manifest, _ = read_checkpoint(tmp_path / "ck")
    assert manifest["step"] == 8 and manifest["data"]["next_sample"] == 48 + 4 * BATCH
    assert "checkpoint: step 0 saved" in result.stdout  # a checkpoint to go back to from the start


def test_spike_detection_goes_on_across_a_resume(corpus, tmp_path):
    # The guard's window of accepted losses is saved with the checkpoint: it came back empty, and the
    # first spike_window steps after every resume went unjudged. A resumed run now judges as the
    # uninterrupted one: step 11 rises 0.3-1 % over the median of steps 9 and 10, a spike at 1.003.
    guard = ["--set", "train.steps=12", "--set", "anomaly.policy=skip", "--set", "anomaly.spike_factor=1.003",
             "--set", "anomaly.spike_window=2"]
    ok(train(corpus, *guard, "--set", f"train.metrics={tmp_path / 'whole.jsonl'}"))
    whole = [r for r in records(tmp_path / "whole.jsonl") if "loss" in r]
    assert [r["step"] + 1 for r in whole if r.get("update") == "skipped"] == [11]
    resumed = ["--save", tmp_path / "ck", "--set", f"train.metrics={tmp_path / 'parts.jsonl'}"]
    ok(train(corpus, *guard, *resumed, "--exit-after", 10))
    manifest, _ = read_checkpoint(tmp_path / "ck")
    assert manifest["anomaly"]["recent_losses"] == [r["loss"] for r in whole[8:10]]
    result = ok(train(corpus, *guard, *resumed, "--resume", "auto"))
    assert "step 11: the loss" in result.stdout and "update skipped" in result.stdout, result.stdout
    parts = [r for r in records(tmp_path / "parts.jsonl") if "loss" in r]
    assert [(r["loss"], r.get("update")) for r in parts] == [(r["loss"], r.get("update")) for r in whole]


def test_a_restart_after_a_rollback_does_not_replay_the_bad_batch(corpus, tmp_path):
    # Step 11 spikes (a real spike: 0.3-1 % over the median of steps 9 and 10 at factor 1.003): back to
    # step 10, the data continues after the bad batch. A crash before the next save restarted from
    # step 10's checkpoint at its own position, replayed the bad batch and met the spike again.
    guard = ["--set", "train.steps=12", "--set", "train.save_every=5", "--set", "anomaly.policy=rollback",
             "--set", "anomaly.spike_factor=1.003", "--set", "anomaly.spike_window=2", "--save", tmp_path / "ck",
             "--set", f"train.metrics={tmp_path / 'm.jsonl'}"]
    crashed = train(corpus, *guard, fault="kill:0:12")
    assert crashed.returncode != 0
    assert "step 11: the loss" in crashed.stdout and "rolled back to step 10" in crashed.stdout, crashed.stdout
    manifest, _ = read_checkpoint(tmp_path / "ck" / "step-00000010")
    assert manifest["data"]["next_sample"] == 11 * BATCH  # after samples 80-87, the bad batch
    verified = subprocess.run([str(TRIPOD), "ckpt", "verify", str(tmp_path / "ck")], capture_output=True, text=True)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    resumed = ok(train(corpus, *guard, "--resume", "auto"))
    assert f"at step 10 (next sample {11 * BATCH})" in resumed.stdout, resumed.stdout
    assert "rolled back" not in resumed.stdout, resumed.stdout


@pytest.mark.parametrize("background", [False, True], ids=["sync-save", "async-save"])
def test_rollback_under_mpirun_agrees_on_every_rank(corpus, tmp_path, background):
    result = rollback_run(corpus, tmp_path, "--dp", 2, "--zero", 3, "--set", f"train.async_save={str(background).lower()}",
                          ranks=2, fault="nan-loss:3")
    assert "step 3: the loss is nan: rolled back to step 2" in result.stdout, result.stdout
    manifest, _ = read_checkpoint(tmp_path / "ck")
    assert manifest["step"] == 8 and manifest["data"]["next_sample"] == 4 * BATCH + 6 * BATCH
    verified = subprocess.run([str(TRIPOD), "ckpt", "verify", str(tmp_path / "ck")], capture_output=True, text=True)
    assert verified.returncode == 0, verified.stdout + verified.stderr


@pytest.mark.parametrize("ranks, fault", [(1, "inf-update:0:4"), (2, "inf-update:1:4")], ids=["1-rank", "2-ranks"])
def test_rollback_rolls_back_an_update_that_left_a_weight_infinite_before_its_save(corpus, tmp_path, ranks, fault):
    # Step 4's update leaves a weight infinite, its loss and gradients finite, and step 4 saves:
    # the save refused the state and the run stopped whatever anomaly.policy said. Under rollback
    # the state is checked before the save, and the step rolls back as a bad loss does.
    extra = ["--dp", 2, "--zero", 3, "--set", "train.async_save=true"] if ranks == 2 else []
    result = ok(train(corpus, "--set", "train.steps=6", "--set", "train.save_every=2", "--set", "anomaly.policy=rollback",
                      "--save", tmp_path / "ck", "--set", f"train.metrics={tmp_path / 'm.jsonl'}", *extra, ranks=ranks,
                      fault=fault))
    rank = ranks - 1
    assert re.search(r"step 4: its update left 1 infinite or NaN value in the parameters and AdamW moments "
                     + (r"\(\S+ \(param\)\)" if rank == 0 else r"\(held by rank 1; rank 0's are all finite\)")
                     + r": rolled back to step 2 \(\S+step-00000002\); the data continues at sample 32, skipping "
                     r"samples 16 to 31 \(anomaly 1 of at most 10\)", result.stdout), result.stdout
    assert logged_steps(result.stdout) == [1, 2, 3, 4, 3, 4, 5, 6]
    bad = [r for r in records(tmp_path / "m.jsonl") if r.get("update")]
    assert len(bad) == 1 and bad[0]["step"] == 3 and bad[0]["update"] == "rolled back", bad
    assert np.isfinite(bad[0]["loss"]) and np.isfinite(bad[0]["grad_norm"])  # the guard saw nothing
    assert {"event": "rollback", "step": 3, "to_step": 2, "next_sample": 32} in records(tmp_path / "m.jsonl")
    manifest, tensors = read_checkpoint(tmp_path / "ck")
    assert manifest["step"] == 6 and manifest["data"]["next_sample"] == 32 + 4 * BATCH
    assert all(np.isfinite(values).all() for kind in tensors.values() for values in kind.values())
    assert ok(subprocess.run([str(TRIPOD), "ckpt", "verify", str(tmp_path / "ck")], capture_output=True, text=True))


def test_rollback_of_a_real_overflow_at_each_save_stops_past_anomaly_max(corpus, tmp_path):
    # fp32 at a learning rate of 1e39 overflows every weight at every step, with a finite loss and
    # gradient norm. With a save after each step, the first save refused the state and the run
    # stopped there, under rollback as under stop ("checkpoint save ... failed").
    result = train(corpus, "--set", "train.steps=4", "--set", "train.save_every=1", "--set", "anomaly.policy=rollback",
                   "--set", "anomaly.max=2", "--set", "train.dtype=fp32", "--set", "optim.lr=1e39",
                   "--set", "optim.min_lr=1e39", "--set", "optim.warmup_steps=0", "--save", tmp_path / "ck",
                   "--set", f"train.metrics={tmp_path / 'm.jsonl'}")
    assert result.returncode != 0, result.stdout
    assert "checkpoint save" not in result.stderr, result.stderr
    assert result.stdout.count("step 1: its update left ") == 2, result.stdout
    assert re.search(r"error: step 1: its update left \d+ infinite or NaN values in the parameters and AdamW moments "
                     r"\(wte\.weight \(param\), .*\); that is anomaly 3 of this run, more than "
                     r"anomaly\.max \(2\) \(training diverged\)", result.stderr), result.stderr
    assert [r["to_step"] for r in records(tmp_path / "m.jsonl") if r.get("event") == "rollback"] == [0, 0]
    assert (tmp_path / "ck" / "latest").read_text().strip() == "step-00000000"


@pytest.mark.parametrize("ranks, fault", [(1, "inf-update:0:1"), (2, "inf-update:1:1")], ids=["1-rank", "2-ranks"])
def test_rollback_checks_the_update_before_the_save_at_exit_after_minutes(corpus, tmp_path, ranks, fault):
    # The time is up after step 1, whose update left a weight infinite: the run's last save was not
    # checked first, so it refused the state and the run failed (exit 1, "checkpoint save ...
    # failed") although anomaly.policy=rollback had a checkpoint to go back to.
    extra = ["--dp", 2, "--zero", 3] if ranks == 2 else []
    result = ok(train(corpus, "--set", "train.steps=1000", "--set", "anomaly.policy=rollback", "--save", tmp_path / "ck",
                      "--set", f"train.metrics={tmp_path / 'm.jsonl'}", "--exit-after-minutes", 1e-6, *extra,
                      ranks=ranks, fault=fault))
    assert "step 1: its update left 1 infinite or NaN value" in result.stdout, result.stdout
    assert "rolled back to step 0" in result.stdout and "stopping after step 0: --exit-after-minutes" in result.stdout
    assert "done: 0 steps kept of 1 run (rolled back to the step the run started from)" in result.stdout
    assert {"event": "rollback", "step": 0, "to_step": 0, "next_sample": BATCH} in records(tmp_path / "m.jsonl")
    assert (tmp_path / "ck" / "latest").read_text().strip() == "step-00000000"
    _, tensors = read_checkpoint(tmp_path / "ck")
    assert all(np.isfinite(values).all() for kind in tensors.values() for values in kind.values())


def test_rollback_checks_the_update_before_the_save_on_a_signal(corpus, tmp_path):
    # fp32 at a learning rate of 1e39: every update from a finite state overflows every weight with
    # a finite loss and gradient norm, and the next step's NaN loss rolls back. A signal is seen
    # after an applied step (one that rolled back defers it to the next), so its save met an
    # overflowed state, refused it and the run ended on "checkpoint save ... failed".
    require_tripod()
    cmd = [str(TRIPOD), "train", "--config", "tiny", "--set", f"data.dir={corpus}", *MODEL, "--set", "train.steps=1000000",
           "--set", "train.dtype=fp32", "--set", "optim.lr=1e39", "--set", "optim.min_lr=1e39",
           "--set", "optim.warmup_steps=0", "--set", "anomaly.policy=rollback", "--set", "anomaly.max=1000000",
           "--save", str(tmp_path / "ck")]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=MPI_ENV)
    try:
        for line in proc.stdout:
            if line.startswith("step "):
                break
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()  # a run of a million steps must not outlive a failed wait
    assert proc.returncode != 0
    assert "checkpoint save (" not in err, err
    assert "interrupted by a signal after step 0/1000000: checkpoint saved to " in err, err
    assert "rolled back to step 0" in out.splitlines()[-1], out[-2000:]  # then the save: step 0's, already there
    assert (tmp_path / "ck" / "latest").read_text().strip() == "step-00000000"
    _, tensors = read_checkpoint(tmp_path / "ck")
    assert all(np.isfinite(values).all() for kind in tensors.values() for values in kind.values())


def test_too_many_anomalies_stop_the_run(corpus):
    result = train(corpus, "--set", "train.steps=20", "--set", "anomaly.policy=skip", "--set", "anomaly.max=2", *DIVERGE)
    assert result.returncode != 0, result.stdout
    assert result.stdout.count("update skipped") == 2, result.stdout
    assert "that is anomaly 3 of this run, more than anomaly.max (2) (training diverged" in result.stderr, result.stderr


@pytest.mark.parametrize("setting, expected", [
    ("anomaly.policy=retry", "anomaly.policy: stop, skip or rollback, not 'retry'"),
    ("anomaly.spike_factor=0.5", "anomaly.spike_factor must be 0 (off) or above 1"),
    # as a checkpoint reads the window back: a larger one wrote checkpoints that resume refused
    ("anomaly.spike_window=1048577", "anomaly.spike_window must be in [1, 2^20] (got 1048577)"),
    ("anomaly.policy=rollback", "anomaly.policy=rollback rolls back to the run's last checkpoint under --save"),
])
def test_bad_anomaly_settings_are_refused(corpus, setting, expected):
    result = train(corpus, "--set", "train.steps=2", "--set", setting)
    assert result.returncode != 0 and expected in result.stderr, result.stderr


@pytest.mark.parametrize("fault", ["nan-loss:x", "nan-loss:1e3", "nan-loss: 2", "kill:0:3x", "kill: 0:3", "inf-update:1"])
def test_malformed_loss_fault_is_refused(corpus, fault):
    # "1e3" fired at step 1 and "3x" at step 3: the numbers were read up to the first non-digit.
    result = train(corpus, "--set", "train.steps=2", fault=fault)
    assert result.returncode != 0 and "nan-loss:STEP" in result.stderr, result.stderr


@pytest.mark.parametrize("fault, args, expected", [
    ("nan-loss:3", [], "the run ends at step 2 (train.steps), before step 3"),
    ("kill:2:1", ["--dp", "2"], "the run has 2 ranks, no rank 2"),
    ("inf-update:2:1", ["--dp", "2"], "the run has 2 ranks, no rank 2"),
    ("kill-in-save:0:1", [], "the run saves no checkpoint after step 1"),
    ("kill-in-save:0:1", ["--save", "{tmp}/ckpt"], "the run saves no checkpoint after step 1"),  # only after step 2
    ("slow-snapshot:10", ["--save", "{tmp}/ckpt", "--set", "train.save_every=1"], "slow-snapshot delays background"),
], ids=["past-the-end", "no-such-rank", "no-such-rank-to-overflow", "no-save", "not-a-save-step", "no-background-save"])
def test_a_fault_the_run_cannot_reach_is_refused(corpus, tmp_path, fault, args, expected):
    # These ran to the end with exit 0 and injected nothing: a restart test built on one passed
    # without testing anything.
    args = [str(a).format(tmp=tmp_path) for a in args]
    result = train(corpus, "--set", "train.steps=2", *args, ranks=2 if "--dp" in args else 1, fault=fault)
    assert result.returncode != 0 and "would never fire: " + expected in result.stderr, result.stderr
    # nothing saved: at most the runs' lock file (ckpt/root_lock.h)
    assert not (tmp_path / "ckpt").exists() or [p.name for p in (tmp_path / "ckpt").iterdir()] in ([], [".lock"])
