"""What `tripod train` prints and records beside the arithmetic: which steps the log shows, the
summary's losses, when the held-out loss is measured, the cumulative token count across resumes,
the learning rate a short warm-up leaves at the last step, and settings that would do nothing."""
import json
import subprocess

import pytest

from tripod_cli import MPI_ENV, TRIPOD, make_markov_corpus, mpirun_command, require_tripod

SMALL = ["--set", "model.n_layer=1", "--set", "model.d_model=32", "--set", "model.n_head=2",
         "--set", "model.d_ff=64", "--set", "model.context=16", "--set", "train.seq_len=8",
         "--set", "train.batch_size=2", "--set", "train.eval_batches=1", "--set", "optim.warmup_steps=2"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return make_markov_corpus(tmp_path_factory.mktemp("corpus") / "markov")


def train(corpus, tmp_path, *extra, env=None, check=True):
    require_tripod()
    metrics = tmp_path / "m.jsonl"
    result = subprocess.run([str(TRIPOD), "train", "--config", "tiny", "--set", f"data.dir={corpus}",
                             "--set", f"train.metrics={metrics}", *SMALL, *map(str, extra)],
                            capture_output=True, text=True, timeout=120, env={**MPI_ENV, **(env or {})})
    if check:
        assert result.returncode == 0, result.stdout + result.stderr
    records = [json.loads(line) for line in metrics.read_text().splitlines()] if metrics.exists() else []
    return result, [r for r in records if "event" not in r]


def logged_steps(stdout):
    return [int(line.split()[1].split("/")[0]) for line in stdout.splitlines() if line.startswith("step ")]


def test_the_log_shows_every_evaluation(corpus, tmp_path):
    # log_every counted from 0 and eval_every from 1 never met: steps 1, 6, 11 were printed and the
    # val losses of steps 5 and 10 reached only the metrics file.
    result, steps = train(corpus, tmp_path, "--set", "train.steps=12", "--set", "train.log_every=5",
                          "--set", "train.eval_every=5")
    assert logged_steps(result.stdout) == [1, 5, 10, 12]
    assert [r["step"] + 1 for r in steps if "val_loss" in r] == [5, 10, 12]
    assert all("val loss" in line for line in result.stdout.splitlines()
               if line.startswith(("step     5/", "step    10/", "step    12/")))


def test_a_skipped_first_step_is_not_the_runs_first_loss(corpus, tmp_path):
    result, steps = train(corpus, tmp_path, "--set", "train.steps=3", "--set", "anomaly.policy=skip",
                          env={"TRIPOD_FAULT": "nan-loss:1"})
    assert steps[0]["update"] == "skipped"
    assert f"done: 3 steps, loss {steps[1]['loss']:.4f} -> {steps[2]['loss']:.4f}" in result.stdout  # was 0.0000


def test_a_run_whose_every_update_was_skipped_says_so(corpus, tmp_path):
    result, _ = train(corpus, tmp_path, "--set", "train.steps=1", "--set", "anomaly.policy=skip",
                      env={"TRIPOD_FAULT": "nan-loss:1"})
    assert "done: 1 steps, every update skipped" in result.stdout


def test_a_rolled_back_step_is_not_evaluated(corpus, tmp_path):
    # The rollback leaves the checkpoint's state at a step eval_every divides: it was evaluated again
    # and its val loss shown on step 5, which is no evaluation step.
    result, steps = train(corpus, tmp_path, "--set", "train.steps=8", "--set", "train.eval_every=4",
                          "--set", "train.save_every=3", "--set", "anomaly.policy=rollback", "--save", tmp_path / "ck",
                          env={"TRIPOD_FAULT": "nan-loss:5"})
    rolled = [r for r in steps if r.get("update") == "rolled back"]
    assert len(rolled) == 1 and "val_loss" not in rolled[0]
    assert [r["step"] + 1 for r in steps if "val_loss" in r] == [4, 4, 8]  # step 4 again after going back to 3


def test_tokens_count_each_steps_batch_across_a_resume_that_changes_it(corpus, tmp_path):
    ck = tmp_path / "ck"
    train(corpus, tmp_path, "--set", "train.steps=6", "--exit-after", 3, "--save", ck)
    result, steps = train(corpus, tmp_path, "--set", "train.steps=6", "--set", "train.batch_size=8", "--save", ck,
                          "--resume", "auto", "--allow-resume-changes")
    # 3 steps of 2 x 8 tokens, then 3 of 8 x 8: the record multiplied the step by this batch (256 at step 4).
    assert [r["tokens"] for r in steps] == [16, 32, 48, 112, 176, 240]
    info = subprocess.run([str(TRIPOD), "ckpt", "info", ck], capture_output=True, text=True, timeout=60)
    assert "240 tokens trained" in info.stdout, info.stdout


def test_tokens_go_back_with_a_rollback(corpus, tmp_path):
    _, steps = train(corpus, tmp_path, "--set", "train.steps=5", "--set", "train.save_every=2",
                     "--set", "anomaly.policy=rollback", "--save", tmp_path / "ck", env={"TRIPOD_FAULT": "nan-loss:4"})
    # steps 1-4 (the 4th rolled back to 2), then 3, 4 and 5 again: 16 tokens a step
    assert [(r["step"] + 1, r["tokens"]) for r in steps] == [(1, 16), (2, 32), (3, 48), (4, 64), (3, 48), (4, 64),
                                                             (5, 80)]


def test_a_warm_up_ending_before_the_last_step_still_decays_to_the_minimum(corpus, tmp_path):
    _, steps = train(corpus, tmp_path, "--set", "train.steps=6", "--set", "optim.warmup_steps=5",
                     "--set", "optim.lr=3e-3", "--set", "optim.min_lr=3e-4")
    assert steps[4]["lr"] == pytest.approx(3e-3) and steps[5]["lr"] == pytest.approx(3e-4)  # was 3e-3


def test_a_run_shorter_than_its_warm_up_says_so(corpus, tmp_path):
    result, steps = train(corpus, tmp_path, "--set", "train.steps=3", "--set", "optim.warmup_steps=10",
                          "--set", "optim.lr=3e-3")
    assert "note: optim.warmup_steps 10 > train.steps 3: the run ends in its warm-up (LR 0.0009 at the last step" \
           in result.stdout
    assert steps[-1]["lr"] == pytest.approx(9e-4)
    # as long as the run: it reaches optim.lr at the last step (the note said it never did)
    result, steps = train(corpus, tmp_path, "--set", "train.steps=3", "--set", "optim.warmup_steps=3",
                          "--set", "optim.lr=3e-3")
    assert "note: optim.warmup_steps 3 = train.steps: the warm-up reaches optim.lr at the last step" in result.stdout
    assert steps[-1]["lr"] == pytest.approx(3e-3)


@pytest.mark.parametrize("args,message", [
    (["--set", "train.save_every=2"], "train.save_every saves to --save ROOT: give it"),
    (["--set", "train.async_save=true"], "train.async_save writes --save's checkpoints in the background"),
    (["--slow-rank", "0:5"], "--slow-rank 0: a single-process run has no rank to slow down"),
])
def test_settings_that_would_do_nothing_are_refused(corpus, tmp_path, args, message):
    result, _ = train(corpus, tmp_path, "--set", "train.steps=2", *args, check=False)
    assert result.returncode == 1 and message in result.stderr, result.stderr
    assert not (tmp_path / "m.jsonl").exists()


def test_a_slow_rank_past_the_world_is_refused(corpus, tmp_path):
    result = subprocess.run(mpirun_command(2, "train", "--config", "tiny", "--set", f"data.dir={corpus}", *SMALL,
                                           "--set", "train.metrics=", "--set", "train.steps=2", "--dp", 2,
                                           "--slow-rank", "7:10"),
                            capture_output=True, text=True, timeout=120, env=MPI_ENV)
    assert result.returncode != 0
    assert "--slow-rank 7: the job's ranks are 0 to 1" in result.stderr, result.stderr
