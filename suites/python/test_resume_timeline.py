"""A run resumed from an older checkpoint of its own root continues that checkpoint's timeline, not
the newer checkpoints beside it: `latest` names the checkpoint it continues (so a restart with
--resume auto comes back to it), a rollback goes back to it and never forward, and a newer
checkpoint in the other tier is refused by name. The checkpoint may be given as a shell completes
it (`ROOT/step-4/`), as `ROOT/step-4/.` or through a link."""
import os
import re
import subprocess

import pytest

from tripod_cli import MPI_ENV, TRIPOD, make_markov_corpus, require_tripod

MODEL = ["--set", "model.n_layer=2", "--set", "model.d_model=32", "--set", "model.n_head=4",
         "--set", "model.d_ff=64", "--set", "model.context=16", "--set", "train.seq_len=16",
         "--set", "train.batch_size=8", "--set", "train.eval_batches=1", "--set", "train.dtype=fp64",
         "--set", "optim.warmup_steps=1", "--set", "train.log_every=1", "--set", "train.keep_checkpoints=3"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return make_markov_corpus(tmp_path_factory.mktemp("corpus") / "markov")


def train(corpus, *args):
    require_tripod()
    cmd = [str(TRIPOD), "train", "--config", "tiny", "--set", f"data.dir={corpus}", *MODEL, *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=MPI_ENV)


def ok(result):
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def saved_root(corpus, root, steps=6):
    ok(train(corpus, "--set", f"train.steps={steps}", "--set", "train.save_every=2", "--save", root))
    assert sorted(p.name for p in root.glob("step-*")) == [f"step-{s:08d}" for s in range(2, steps + 1, 2)]
    return root


def latest(root):
    return (root / "latest").read_text().strip()


def test_a_rollback_goes_back_to_the_checkpoint_the_run_continued_never_forward(corpus, tmp_path):
    # Resumed from step 2 of a root whose `latest` named step 6, a learning rate of 1e30 makes a
    # gradient norm NaN by step 6: the rollback loaded the other timeline's step 6 ("step 6: the
    # gradient norm is -nan: rolled back to step 6 (ck/step-00000006) ... skipping samples 48 to
    # 47"), not the checkpoint this run had continued.
    root = saved_root(corpus, tmp_path / "ck")
    result = train(corpus, "--set", "train.steps=8", "--set", "train.save_every=100", "--save", root,
                   "--resume", root / "step-00000002", "--allow-resume-changes", "--set", "anomaly.policy=rollback",
                   "--set", "anomaly.max=1", "--set", "optim.lr=1e30", "--set", "optim.min_lr=1e30",
                   "--set", "optim.warmup_steps=0", "--set", "optim.grad_clip=0")
    assert result.returncode != 0 and "training diverged" in result.stderr, result.stdout + result.stderr
    assert (f"{root} holds newer checkpoints (up to step-00000006) than the step-00000002 this run continues: "
            "`latest` now names it" in result.stdout), result.stdout
    rollbacks = re.findall(r"rolled back to step (\d+) \((\S+)\)", result.stdout)
    assert rollbacks and all(step == "2" and to.endswith("step-00000002") for step, to in rollbacks), result.stdout
    assert latest(root) == "step-00000002"


def test_a_restart_before_the_first_save_comes_back_to_the_checkpoint_it_continued(corpus, tmp_path):
    # Killed before its first save, the run left `latest` on step 6, and `--resume auto` (what
    # `tripod launch` restarts with) went on from the timeline the user had gone back from.
    root = saved_root(corpus, tmp_path / "ck")
    require_tripod()
    cmd = [str(TRIPOD), "train", "--config", "tiny", "--set", f"data.dir={corpus}", *MODEL,
           "--set", "train.steps=1000000", "--save", str(root), "--resume", str(root / "step-00000002"),
           "--allow-resume-changes"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=MPI_ENV)
    try:
        for line in proc.stdout:
            if line.startswith("step "):
                break
    finally:
        proc.kill()
        proc.communicate(timeout=60)
    assert latest(root) == "step-00000002"
    again = ok(train(corpus, "--set", "train.steps=6", "--save", root, "--resume", "auto", "--exit-after", 1))
    assert "at step 2" in again.stdout, again.stdout


def test_a_save_prunes_among_its_own_step_and_the_older_ones(corpus, tmp_path):
    # keep_checkpoints=3 counted the newer steps 4 and 6 too: the save of step 3 deleted step 2,
    # the checkpoint the run had continued, and kept the two it had gone back from.
    root = saved_root(corpus, tmp_path / "ck")
    ok(train(corpus, "--set", "train.steps=6", "--save", root, "--resume", root / "step-00000002", "--exit-after", 1))
    assert latest(root) == "step-00000003"
    assert sorted(p.name for p in root.glob("step-*")) == ["step-00000002", "step-00000003", "step-00000004",
                                                           "step-00000006"]
    # Its saves of those steps replace them, and the pruning goes on among steps up to each.
    ok(train(corpus, "--set", "train.steps=6", "--set", "train.save_every=1", "--save", root, "--resume", "auto"))
    assert sorted(p.name for p in root.glob("step-*")) == ["step-00000004", "step-00000005", "step-00000006"]


@pytest.mark.parametrize("form", ["slash", "dot", "link"])
def test_a_checkpoint_of_the_root_given_any_way_resumes_as_its_own(corpus, tmp_path, form):
    # "ROOT/step-00000004/" (a shell's completion) was refused: "ROOT already holds checkpoints ...
    # and this run continues ROOT/step-00000004/, which is not one of them".
    root = saved_root(corpus, tmp_path / "ck")
    given = {"slash": f"{root / 'step-00000004'}/", "dot": f"{root / 'step-00000004'}/.",
             "link": tmp_path / "four"}[form]
    if form == "link":
        os.symlink(root / "step-00000004", given)
    result = ok(train(corpus, "--set", "train.steps=6", "--save", root, "--resume", given, "--exit-after", 1))
    assert "at step 4" in result.stdout, result.stdout
    assert latest(root) == "step-00000005"


def test_a_newer_checkpoint_in_the_other_tier_is_refused_by_name(corpus, tmp_path):
    durable, local = tmp_path / "ck", tmp_path / "fast"
    ok(train(corpus, "--set", "train.steps=6", "--set", "train.save_every=2", "--save", durable, "--save-local", local,
             "--set", "train.local_save_every=1"))
    assert latest(local) == "step-00000005"
    result = train(corpus, "--set", "train.steps=6", "--set", "train.save_every=2", "--save", durable,
                   "--save-local", local, "--set", "train.local_save_every=1", "--resume", durable / "step-00000002")
    assert result.returncode != 0, result.stdout
    assert (f"--save-local {local} holds step-00000005, newer than the step-00000002 this run continues from --save "
            f"{durable}: a restart with --resume auto would take that other timeline; remove its checkpoints after "
            f"step 2 from {local}, or give --save-local another folder" in result.stderr), result.stderr
    assert latest(durable) == "step-00000006" and latest(local) == "step-00000005"  # nothing touched
