"""Sharded checkpoints (issue: checkpoints that reload into any layout, crash-safe saves, clear errors):
exact resume in every layout family, resharding between layouts, a crash during a save, SIGTERM,
bad input of every kind, refused configuration changes, and a full disk."""
import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import xxhash

from tripod_cli import (MPI_ENV, TRIPOD, fixture_library, hang_up_by_default, make_markov_corpus,
                        mpirun_command, require_tripod)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "reports"))
from tripod_ckpt import read_checkpoint  # noqa: E402

# Two layers and four heads, so that tp4, pp2 and interleaved pp2 x v2... fit; fp64 makes layout
# differences show as reduction-order noise (~1e-16), never as a wrong element.
MODEL = ["--set", "model.n_layer=2", "--set", "model.d_model=32", "--set", "model.n_head=4",
         "--set", "model.d_ff=64", "--set", "model.context=16", "--set", "train.seq_len=16",
         "--set", "train.batch_size=8", "--set", "train.eval_batches=1", "--set", "train.steps=6",
         "--set", "train.dtype=fp64", "--set", "optim.warmup_steps=1"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return make_markov_corpus(tmp_path_factory.mktemp("corpus") / "markov")


def train(corpus, ranks, *args, env=None, timeout=120):
    require_tripod()
    base = ["train", "--config", "tiny", "--set", f"data.dir={corpus}", *MODEL, *args]
    cmd = mpirun_command(ranks, *base) if ranks > 1 else [str(TRIPOD), *map(str, base)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env={**MPI_ENV, **(env or {})})


def ok(result):
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def losses(result):
    """{step: loss} from the progress lines (printed to 4 decimals) - and exact from metrics."""
    out = {}
    for line in result.stdout.splitlines():
        if line.startswith("step "):
            step = int(line.split()[1].split("/")[0])
            out[step] = float(line.split("| loss ")[1].split()[0])
    return out


def metrics_losses(path):
    return {r["step"]: r["loss"] for r in map(json.loads, Path(path).read_text().splitlines()) if "loss" in r}


def tripod(*args, timeout=60):
    require_tripod()
    return subprocess.run([str(TRIPOD), *map(str, args)], capture_output=True, text=True, timeout=timeout)


# Layout families: DP with every ZeRO stage, TP with and without SP, PP with each schedule, 3D.
LAYOUTS = {
    "dp2-z0": (2, ["--zero", "0"]),
    "dp2-z1": (2, ["--zero", "1"]),
    "dp2-z2": (2, ["--zero", "2"]),
    "dp2-z3": (2, ["--zero", "3"]),
    "tp2": (2, ["--tp", "2"]),
    "tp2-sp": (2, ["--tp", "2", "--sequence-parallel"]),
    "pp2-afab": (2, ["--pp", "2", "--schedule", "afab", "--microbatches", "2"]),
    "pp2-1f1b": (2, ["--pp", "2", "--schedule", "1f1b", "--microbatches", "2"]),
    "pp2-interleaved": (2, ["--pp", "2", "--schedule", "interleaved", "--virtual-stages", "2",
                            "--microbatches", "2", "--set", "model.n_layer=4"]),
    "tp2-pp2-dp2-z1": (8, ["--tp", "2", "--pp", "2", "--dp", "2", "--zero", "1"]),
    "tp2-padded": (2, ["--tp", "2", "--make-vocab-size-divisible-by", "48"]),
    # bf16-mixed gathers the GEMM weights as bf16: ZeRO-1/2's full parameters then hold roundings
    # outside a rank's own slices, which the checkpoint must not save (each piece from its owner).
    "dp2-z1-bf16": (2, ["--zero", "1", "--set", "train.dtype=bf16-mixed"]),
    "dp2-z3-bf16": (2, ["--zero", "3", "--set", "train.dtype=bf16-mixed"]),
    # the step's gathers left in flight: a save and a load must wait for them first
    "dp2-z2-opg-bf16": (2, ["--zero", "2", "--overlap-param-gather", "--set", "train.dtype=bf16-mixed"]),
}


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_exact_resume_in_every_layout_family(corpus, tmp_path, name):
    """6 steps straight vs 3, stop, resume, 3 more: losses and final parameters and moments bit-identical."""
    ranks, layout = LAYOUTS[name]
    straight = ok(train(corpus, ranks, *layout, "--save", tmp_path / "straight",
                        "--set", f"train.metrics={tmp_path / 'straight.jsonl'}"))
    ok(train(corpus, ranks, *layout, "--save", tmp_path / "split", "--exit-after", 3,
             "--set", f"train.metrics={tmp_path / 'split.jsonl'}"))
    resumed = ok(train(corpus, ranks, *layout, "--save", tmp_path / "split", "--resume", "auto",
                       "--set", f"train.metrics={tmp_path / 'split.jsonl'}"))
    assert "resuming from" in resumed.stdout and "at step 3 (next sample 24)" in resumed.stdout
    assert metrics_losses(tmp_path / "split.jsonl") == metrics_losses(tmp_path / "straight.jsonl")
    assert len(metrics_losses(tmp_path / "straight.jsonl")) == 6 and 6 in losses(straight)
    _, a = read_checkpoint(tmp_path / "straight")
    _, b = read_checkpoint(tmp_path / "split")
    for kind in a:
        for tensor in a[kind]:
            assert np.array_equal(a[kind][tensor], b[kind][tensor]), f"{name}: {kind} of {tensor} differs"
    assert ok(tripod("ckpt", "verify", tmp_path / "split")).stdout.count("OK") == 1


@pytest.mark.parametrize("zero", ["1", "2"])
def test_bf16_gathers_save_the_owners_exact_parameters(corpus, tmp_path, zero):
    """ZeRO-1/2 under bf16-mixed: a rank's full parameters hold the GEMM weights' bf16 roundings
    outside its own slices. The checkpoint holds the exact values all the same: every tensor and
    moment equals the fp32 gathers' (--gather-fp32) bit for bit - and the overlapped gathers'
    (--overlap-param-gather), whose losses are the same bits too."""
    saved, trained = {}, {}
    for extra in ([], ["--gather-fp32"], ["--overlap-param-gather"]):
        root = tmp_path / ("z" + zero + "".join(extra))
        result = ok(train(corpus, 2, "--zero", zero, "--set", "train.dtype=bf16-mixed", "--save", root,
                          "--set", f"train.metrics={root}.jsonl", *extra))
        saved[tuple(extra)] = read_checkpoint(root)[1]
        trained[tuple(extra)] = metrics_losses(f"{root}.jsonl")
        assert ("parameter gathers overlapped with the next forward" in result.stdout) == ("--overlap-param-gather" in extra)
    for extra in saved:
        assert trained[extra] == trained[()] and len(trained[()]) == 6, extra
        for kind in saved[()]:
            for tensor in saved[()][kind]:
                assert np.array_equal(saved[extra][kind][tensor], saved[()][kind][tensor]), f"{extra}: {kind} of {tensor}"


def test_resharding_between_layouts(corpus, tmp_path):
    """Saved at tp2 pp2 dp2 (ZeRO-1), resumed at dp4 ZeRO-3, tp4 dp2 and on one process: the losses
    of the remaining steps equal the single-process run's within the fp64 conformance tolerance."""
    single = tmp_path / "single.jsonl"
    ok(train(corpus, 1, "--set", f"train.metrics={single}"))
    want = metrics_losses(single)
    saved = tmp_path / "saved"
    ok(train(corpus, 8, "--tp", 2, "--pp", 2, "--dp", 2, "--zero", 1, "--save", saved, "--exit-after", 3))
    manifest, state = read_checkpoint(saved)
    assert manifest["world_size"] == 8 and manifest["data"]["next_sample"] == 24
    for ranks, layout in [(4, ["--dp", "4", "--zero", "3"]), (8, ["--tp", "4", "--dp", "2"]), (1, [])]:
        metrics = tmp_path / f"resumed{ranks}.jsonl"
        result = ok(train(corpus, ranks, *layout, "--resume", saved, "--set", f"train.metrics={metrics}"))
        assert "at step 3 (next sample 24)" in result.stdout
        got = metrics_losses(metrics)
        assert sorted(got) == [3, 4, 5]
        for step, loss in got.items():
            assert abs(loss - want[step]) <= 1e-10 * abs(want[step]), (layout, step, loss, want[step])


def test_a_padded_vocabulary_is_storage_only(corpus, tmp_path):
    """--make-vocab-size-divisible-by 48 pads wte's 64 rows to 96 in memory only: the losses equal
    the unpadded run's within the fp64 conformance tolerance, the checkpoint holds the real [64, C]
    table, and a run resumes from it without padding, or with another (tp2: 2 x 48 rows)."""
    single = tmp_path / "single.jsonl"
    ok(train(corpus, 1, "--set", f"train.metrics={single}"))
    want = metrics_losses(single)
    saved, padded = tmp_path / "saved", tmp_path / "padded.jsonl"
    result = ok(train(corpus, 1, "--make-vocab-size-divisible-by", 48, "--save", saved, "--exit-after", 3,
                      "--set", f"train.metrics={padded}"))
    assert "vocabulary padded to a multiple of 48 per TP rank" in result.stdout
    assert "memory per rank" in result.stdout
    manifest, state = read_checkpoint(saved)
    assert manifest["tensors"]["wte.weight"] == [64, 32]
    assert state["param"]["wte.weight"].size == 64 * 32 and np.isfinite(state["param"]["wte.weight"]).all()
    for ranks, layout in [(1, []), (2, ["--tp", "2", "--make-vocab-size-divisible-by", "48"])]:
        metrics = tmp_path / f"resumed{ranks}.jsonl"
        resumed = ok(train(corpus, ranks, *layout, "--resume", saved, "--set", f"train.metrics={metrics}"))
        assert "at step 3 (next sample 24)" in resumed.stdout
        got = {**metrics_losses(padded), **metrics_losses(metrics)}
        assert sorted(got) == list(range(6))
        for step, loss in got.items():
            assert abs(loss - want[step]) <= 1e-10 * abs(want[step]), (layout, step, loss, want[step])
    bad = train(corpus, 1, "--make-vocab-size-divisible-by", 0)
    assert bad.returncode != 0
    assert "(--make-vocab-size-divisible-by) must be 1-65536 (got 0)" in bad.stderr


def test_crash_during_save_keeps_the_previous_checkpoint(corpus, tmp_path):
    root = tmp_path / "ckpt"
    crashed = train(corpus, 2, "--zero", 1, "--save", root, "--set", "train.save_every=2",
                    env={"TRIPOD_FAULT": "kill-in-save:1:4"})
    assert crashed.returncode != 0
    assert "kills itself in the save after step 4" in crashed.stderr
    assert (root / "latest").read_text().strip() == "step-00000002"
    assert (root / ".partial-step-00000004").exists() and not (root / "step-00000004").exists()
    assert "OK" in ok(tripod("ckpt", "verify", root)).stdout
    # The restart (same command, --resume auto) cleans up, resumes at step 2 and finishes.
    again = ok(train(corpus, 2, "--zero", 1, "--save", root, "--set", "train.save_every=2", "--resume", "auto",
                     env={"TRIPOD_FAULT": "kill-in-save:1:4"}))
    assert "removed 1 leftover" in again.stdout and "at step 2" in again.stdout
    assert not (root / ".partial-step-00000004").exists()
    straight = ok(train(corpus, 2, "--zero", 1, "--save", tmp_path / "straight"))
    _, a = read_checkpoint(root)
    _, b = read_checkpoint(tmp_path / "straight")
    assert all(np.array_equal(a["param"][t], b["param"][t]) for t in a["param"])
    assert losses(straight)[6] == losses(again)[6]


ASYNC = ["--set", "train.async_save=true"]


@pytest.mark.parametrize("layout", [["--tp", "2"], ["--dp", "2", "--zero", "3"], ["--pp", "2", "--microbatches", "2"]],
                         ids=["tp2", "dp2-z3", "pp2"])
def test_async_save_writes_the_same_checkpoints_and_resumes_exactly(corpus, tmp_path, layout):
    """Saves written in the background hold the same bytes as synchronous ones - the background
    copy of the state, overlapping the next step, is complete before that step's update -, publish
    in step order, and resume to the same losses."""
    keep = ["--set", "train.save_every=2", "--set", "train.keep_checkpoints=3"]
    straight_metrics, resumed_metrics = tmp_path / "straight.jsonl", tmp_path / "resumed.jsonl"
    # The copy starts 300 ms late, well after the next step's update would have changed the state.
    background = ok(train(corpus, 2, *layout, "--save", tmp_path / "async", *keep, *ASYNC,
                          "--set", f"train.metrics={straight_metrics}", env={"TRIPOD_FAULT": "slow-snapshot:300"}))
    ok(train(corpus, 2, *layout, "--save", tmp_path / "sync", *keep))
    assert background.stdout.count("in the background") == 2  # steps 2 and 4; step 6 is the final save
    assert [line.split()[2] for line in background.stdout.splitlines() if "checkpoint: step" in line] == ["2", "4", "6"]
    for step in ("step-00000002", "step-00000004", "step-00000006"):
        assert "OK" in ok(tripod("ckpt", "verify", tmp_path / "async" / step)).stdout
        for shard in ("shard-00000.bin", "shard-00001.bin"):
            assert (tmp_path / "async" / step / shard).read_bytes() == (tmp_path / "sync" / step / shard).read_bytes()
    ok(train(corpus, 2, "--dp", 2, "--zero", 3, "--resume", tmp_path / "async" / "step-00000004",
             "--set", f"train.metrics={resumed_metrics}"))
    want = metrics_losses(straight_metrics)
    for step, loss in metrics_losses(resumed_metrics).items():
        assert abs(loss - want[step]) <= 1e-10 * abs(want[step]), (step, loss, want[step])


def test_crash_during_an_async_save_keeps_the_previous_checkpoint(corpus, tmp_path):
    root = tmp_path / "ckpt"
    crashed = train(corpus, 2, "--zero", 1, "--save", root, "--set", "train.save_every=2", *ASYNC,
                    env={"TRIPOD_FAULT": "kill-in-save:1:4"})
    assert crashed.returncode != 0 and "kills itself in the save after step 4" in crashed.stderr
    assert (root / "latest").read_text().strip() == "step-00000002"
    assert not (root / "step-00000004").exists()
    assert "OK" in ok(tripod("ckpt", "verify", root)).stdout


def test_killed_rank_ends_the_job_and_resume_finishes(corpus, tmp_path):
    root = tmp_path / "ckpt"
    start = time.monotonic()
    killed = train(corpus, 2, "--save", root, "--set", "train.save_every=2", env={"TRIPOD_FAULT": "kill:1:4"})
    assert killed.returncode != 0 and time.monotonic() - start < 30
    assert (root / "latest").read_text().strip() == "step-00000002"


# SIGHUP (a terminal or ssh session gone) killed the run without a checkpoint.
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_sigterm_saves_and_says_where(corpus, tmp_path, signum):
    require_tripod()
    root = tmp_path / "ckpt"
    cmd = [str(TRIPOD), "train", "--config", "tiny", "--set", f"data.dir={corpus}", *MODEL,
           "--set", "train.steps=1000000", "--save", str(root)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=hang_up_by_default)
    try:
        for line in proc.stdout:
            if line.startswith("step "):
                break
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()  # a run of a million steps must not outlive a failed wait
    assert proc.returncode != 0
    assert "interrupted by a signal after step" in err and "checkpoint saved to" in err, err
    step = int(err.split("after step ")[1].split("/")[0])
    assert (root / "latest").read_text().strip() == f"step-{step:08d}"
    assert "OK" in ok(tripod("ckpt", "verify", root)).stdout


@pytest.mark.parametrize("ranks, layout", [(1, []), (2, ["--zero", "1"])], ids=["1-rank", "dp2-z1"])
def test_exit_after_minutes_ends_with_a_checkpoint_that_resumes(corpus, tmp_path, ranks, layout):
    # A batch job's time limit (Megatron's --exit-duration-in-mins): the ranks agree on the step.
    root = tmp_path / "ckpt"
    done = ok(train(corpus, ranks, *layout, "--set", "train.steps=1000000", "--save", root,
                    "--exit-after-minutes", 0.01))
    stops = [line for line in done.stdout.splitlines() if line.startswith("stopping after step ")]
    assert len(stops) == 1 and "--exit-after-minutes 0.01 reached" in stops[0], done.stdout
    step = int(stops[0].split()[3].rstrip(":"))
    assert 0 < step < 1000000 and f"done: {step} steps" in done.stdout
    assert (root / "latest").read_text().strip() == f"step-{step:08d}"
    assert "OK" in ok(tripod("ckpt", "verify", root)).stdout
    resumed = ok(train(corpus, ranks, *layout, "--set", "train.steps=1000000", "--save", root, "--resume", "auto",
                       "--exit-after", 1))
    assert f"at step {step}" in resumed.stdout and f"step-{step + 1:08d}" in resumed.stdout, resumed.stdout
    for bad in ("-1", "nan"):
        refused = train(corpus, 1, "--exit-after-minutes", bad)
        assert refused.returncode != 0 and "--exit-after-minutes: " in refused.stderr, refused.stderr


def test_a_file_system_that_cannot_lock_gives_a_warning_and_the_run_goes_on(corpus, tmp_path):
    # The locks' third outcome (ckpt/root_lock.h, core/file_lock.h): said, not fatal.
    library = fixture_library("no_flock", tmp_path)
    root = tmp_path / "ckpt"
    result = ok(train(corpus, 1, "--save", root, "--set", f"train.metrics={tmp_path / 'm.jsonl'}",
                      env={"LD_PRELOAD": str(library)}))
    assert (f"tripod: warning: --save {root}: its file system does not lock files "
            f"({os.strerror(errno.ENOLCK)}), so a second run saving into the same root would not be noticed"
            in result.stderr), result.stderr
    assert (root / "latest").read_text().strip() == "step-00000006"
    assert len((tmp_path / "m.jsonl").read_text().splitlines()) > 6  # the metrics too, unlocked


def test_sighup_ignored_by_nohup_stays_ignored(corpus, tmp_path):
    # nohup asks for the run to go on when its terminal goes: the hang-up handler must not undo that.
    require_tripod()
    cmd = [str(TRIPOD), "train", "--config", "tiny", "--set", f"data.dir={corpus}", *MODEL,
           "--set", "train.steps=1000000", "--set", "train.log_every=1", "--save", str(tmp_path / "ckpt")]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    try:
        for line in proc.stdout:
            if line.startswith("step "):
                break
        proc.send_signal(signal.SIGHUP)
        steps_after = 0
        for line in proc.stdout:  # it trains on
            steps_after += line.startswith("step ")
            if steps_after == 20:
                break
        assert steps_after == 20 and proc.poll() is None
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert "interrupted by a signal after step" in err, err


def test_a_second_run_in_a_root_in_use_is_refused(corpus, tmp_path):
    # A job submitted again while the first still ran (`--resume auto` in both) trained beside it in
    # one root, exit 0: each removed the other's staged saves at start-up, replaced its step
    # directories, pruned its checkpoints and moved `latest` between the two runs.
    require_tripod()
    root = tmp_path / "ckpt"
    cmd = [str(TRIPOD), "train", "--config", "tiny", "--set", f"data.dir={corpus}", *MODEL,
           "--set", "train.steps=1000000", "--set", "train.save_every=2", "--save", str(root), "--resume", "auto"]
    first = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for line in first.stdout:
            if line.startswith("step "):
                break
        for ranks, layout in ((1, []), (2, ["--zero", "1"])):
            second = train(corpus, ranks, *layout, "--set", "train.steps=1000000", "--save", root, "--resume", "auto",
                           "--exit-after", 3)
            assert second.returncode != 0, second.stdout
            expected = f"--save {root}: another run is saving into this checkpoint root (pid {first.pid} on host "
            assert second.stderr.count(expected) == ranks, second.stderr  # every rank fails alike
    finally:
        first.send_signal(signal.SIGTERM)
        out, err = first.communicate(timeout=60)
    assert "checkpoint saved to" in err, err
    step = int(err.split("after step ")[1].split("/")[0])
    assert (root / "latest").read_text().strip() == f"step-{step:08d}"
    assert "OK" in ok(tripod("ckpt", "verify", root)).stdout
    # Its lock went with it: the job resumes.
    resumed = ok(train(corpus, 1, "--set", "train.steps=1000000", "--save", root, "--resume", "auto",
                       "--exit-after", 2))
    assert f"resuming from {root}/step-{step:08d} at step {step}" in resumed.stdout, resumed.stdout


def saved_root(corpus, tmp_path, steps=(2, 4)):
    root = tmp_path / "ckpt"
    ok(train(corpus, 2, "--zero", 1, "--save", root, "--set", "train.save_every=2", "--set",
             f"train.steps={steps[-1]}"))
    return root, root / f"step-{steps[-1]:08d}", root / f"step-{steps[0]:08d}"


def flip(path, offset):
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x40
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage, expected", [
    ("truncate", "truncated"),
    ("flip-header", "header"),
    ("flip-payload", "damaged in tensor"),
    ("missing-shard", "shard-00001.bin"),
    ("future-version", "newer Tripod"),
    ("manifest-edit", "manifest.json is damaged"),
    ("no-manifest", "holds no complete checkpoint"),
])
def test_bad_checkpoint_is_refused_and_the_previous_one_untouched(corpus, tmp_path, damage, expected):
    root, newest, older = saved_root(corpus, tmp_path)
    shard = newest / "shard-00001.bin"
    manifest = newest / "manifest.json"
    if damage == "truncate":
        shard.write_bytes(shard.read_bytes()[:-100])
    elif damage == "flip-header":
        flip(shard, 13)
    elif damage == "flip-payload":
        flip(shard, shard.stat().st_size - 20)
    elif damage == "missing-shard":
        shard.unlink()
    elif damage == "future-version":
        manifest.write_text(manifest.read_text().replace('"version": 2', '"version": 3'))
    elif damage == "manifest-edit":
        manifest.write_text(manifest.read_text().replace('"step": 4', '"step": 3'))
    elif damage == "no-manifest":
        for step_dir in (newest, older):
            (step_dir / "manifest.json").unlink()
    target = newest if damage != "no-manifest" else root
    verify = tripod("ckpt", "verify", target)
    assert verify.returncode != 0 and expected in verify.stdout + verify.stderr, verify.stdout + verify.stderr
    resumed = train(corpus, 2, "--zero", 1, "--resume", target, "--set", "train.steps=4")
    assert resumed.returncode != 0 and expected in resumed.stderr, resumed.stderr
    assert "step " not in resumed.stdout
    if damage != "no-manifest":
        assert "OK" in ok(tripod("ckpt", "verify", older)).stdout


def test_the_numpy_reader_refuses_what_the_cpp_reader_refuses(corpus, tmp_path):
    # reports/tripod_ckpt.py read a flipped byte, a shard header of another rank and another rank's
    # file as values, silently; a truncated file was a bare numpy error naming no file.
    root, newest, _ = saved_root(corpus, tmp_path, steps=(2,))
    _, good = read_checkpoint(root / "latest")  # ROOT/latest names the root's newest, as for the C++ reader
    shard, other = newest / "shard-00001.bin", newest / "shard-00000.bin"
    pristine = shard.read_bytes()
    for damage, expected in (("flip-payload", "damaged"), ("flip-header", "header"), ("truncate", "bytes, the manifest"),
                             ("another-ranks-file", "shard-00001.bin")):
        shard.write_bytes(pristine)
        if damage == "flip-payload":
            flip(shard, shard.stat().st_size - 20)
        elif damage == "flip-header":
            flip(shard, 13)
        elif damage == "truncate":
            shard.write_bytes(pristine[:-100])
        else:
            shard.write_bytes(other.read_bytes())
        with pytest.raises(ValueError, match=expected) as raised:
            read_checkpoint(newest)
        assert str(shard) in str(raised.value), (damage, raised.value)
    shard.write_bytes(pristine)
    _, again = read_checkpoint(newest)
    assert all(np.array_equal(good[kind][name], again[kind][name]) for kind in good for name in good[kind])


def test_missing_and_empty_checkpoints(corpus, tmp_path):
    (tmp_path / "empty").mkdir()
    for path, words in [(tmp_path / "nothing", "does not exist"), (tmp_path / "empty", "holds no complete checkpoint")]:
        result = train(corpus, 1, "--resume", path)
        assert result.returncode != 0 and words in result.stderr
        assert tripod("ckpt", "verify", path).returncode != 0


def test_resume_refuses_another_model_or_a_changed_run(corpus, tmp_path):
    root = tmp_path / "ckpt"
    ok(train(corpus, 1, "--save", root, "--exit-after", 2))
    other = train(corpus, 1, "--resume", root, "--set", "model.d_ff=128")
    assert other.returncode != 0 and "model.d_ff is 128 here but 64 in the checkpoint" in other.stderr
    # Named once: it read "resuming from DIR failed: cannot resume from DIR: ...".
    assert f"resuming from {root / 'step-00000002'} failed: model.d_ff" in other.stderr, other.stderr
    changed = train(corpus, 1, "--resume", root, "--set", "train.seed=7", "--set", "optim.lr=0.01")
    assert changed.returncode != 0
    assert "train.seed: 1234 in the checkpoint, 7 now" in changed.stderr and "optim.lr" in changed.stderr
    assert "--allow-resume-changes" in changed.stderr
    ok(train(corpus, 1, "--resume", root, "--set", "train.seed=7", "--allow-resume-changes"))


def test_resume_refuses_another_precision_policy(corpus, tmp_path):
    # fp32 and bf16-mixed both save fp32 state, so a resume under the other policy passed without a word.
    root = tmp_path / "ckpt"
    ok(train(corpus, 1, "--set", "train.dtype=fp32", "--save", root, "--exit-after", 2))
    policy = train(corpus, 1, "--resume", root, "--set", "train.dtype=bf16-mixed")
    assert policy.returncode != 0 and 'train.dtype: "fp32" in the checkpoint, "bf16-mixed" now' in policy.stderr, \
        policy.stderr
    ok(train(corpus, 1, "--resume", root, "--set", "train.dtype=float32"))  # the same policy, spelled otherwise


def test_resume_knows_the_corpus_by_its_tokens(tmp_path):
    # Another corpus written into the run's data folder resumed without a word (only data.dir's text
    # was compared); the same corpus moved to another folder was refused as a change.
    data, root = tmp_path / "data", tmp_path / "ckpt"
    make_markov_corpus(data)
    ok(train(data, 1, "--save", root, "--exit-after", 2))
    info = ok(tripod("ckpt", "info", root)).stdout
    assert "training tokens XXH64 " in info, info
    moved = tmp_path / "moved"
    data.rename(moved)
    ok(train(moved, 1, "--resume", root, "--save", root, "--exit-after", 3))
    subprocess.run([str(TRIPOD), "data", "synthetic", "--out", str(moved), "--vocab-size", "64", "--order", "1",
                    "--tokens", "20000", "--seed", "99"], check=True, capture_output=True)
    other = train(moved, 1, "--resume", root)
    assert other.returncode != 0, other.stdout
    assert "the training tokens: XXH64 " in other.stderr and "(another corpus)" in other.stderr, other.stderr
    ok(train(moved, 1, "--resume", root, "--allow-resume-changes"))


def test_info_describes_the_checkpoint(corpus, tmp_path):
    root = tmp_path / "ckpt"
    ok(train(corpus, 2, "--tp", 2, "--save", root, "--exit-after", 2))
    info = ok(tripod("ckpt", "info", root)).stdout
    assert "step 2" in info and "tp=2" in info and "(2 ranks)" in info and "next sample 16" in info
    assert "shard-00001.bin" in info


@pytest.mark.parametrize("background", [False, True], ids=["sync", "async"])
def test_full_disk_during_save_fails_clearly_and_keeps_the_previous(corpus, tmp_path, background):
    """A 600 KiB tmpfs: the first checkpoint fits, the second (kept beside it) does not."""
    mount = tmp_path / "small"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=600k", "tmpfs", str(mount)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (not root?)")
    try:
        root = mount / "ckpt"
        result = train(corpus, 1, "--save", root, "--set", "train.save_every=2",  # 473 KB per checkpoint
                       *(ASYNC if background else []))
        assert result.returncode != 0, result.stdout
        assert "No space left on device" in result.stderr and "shard-00000.bin" in result.stderr, result.stderr
        assert (root / "latest").read_text().strip() == "step-00000002"
        assert "OK" in ok(tripod("ckpt", "verify", root)).stdout
        assert not list(root.glob(".partial-*")), "a failed save cleans up after itself"
    finally:
        subprocess.run(["umount", str(mount)])


def test_two_tiers_resume_from_the_newest_and_end_where_a_straight_run_does(corpus, tmp_path):
    # Durable saves every 4 steps to --save, fast ones every 2 to --save-local (in between). Rank 1
    # dies at the start of step 8: the newest checkpoint is the local step 6, not the durable step 4.
    durable, local = tmp_path / "durable", tmp_path / "local"
    tiers = ["--set", "train.steps=10", "--set", "train.save_every=4", "--set", "train.local_save_every=2",
             "--save", durable, "--save-local", local]
    killed = train(corpus, 2, "--dp", 2, "--zero", 2, *tiers, env={"TRIPOD_FAULT": "kill:1:8"})
    assert killed.returncode != 0
    assert (durable / "latest").read_text().strip() == "step-00000004"
    assert (local / "latest").read_text().strip() == "step-00000006"
    assert sorted(p.name for p in local.glob("step-*")) == ["step-00000002", "step-00000006"]  # 4 went durable
    resumed = ok(train(corpus, 2, "--dp", 2, "--zero", 2, *tiers, "--resume", "auto"))
    assert f"resuming from {local / 'step-00000006'} at step 6 (next sample 48)" in resumed.stdout, resumed.stdout
    assert f"checkpoint: step 8 saved to {durable / 'step-00000008'}" in resumed.stdout
    straight = tmp_path / "straight"
    ok(train(corpus, 2, "--dp", 2, "--zero", 2, "--set", "train.steps=10", "--save", straight))
    _, a = read_checkpoint(straight)
    _, b = read_checkpoint(durable)
    for kind in a:
        for tensor in a[kind]:
            assert np.array_equal(a[kind][tensor], b[kind][tensor]), f"{kind} of {tensor} differs"


@pytest.mark.parametrize("args, expected", [
    (["--save-local", "L", "--set", "train.local_save_every=2"], "--save-local is the fast tier beside --save's"),
    (["--save", "D", "--save-local", "L"], "--save-local needs train.local_save_every"),
    (["--save", "D", "--set", "train.local_save_every=2"], "train.local_save_every saves to --save-local ROOT"),
    (["--save", "D", "--save-local", "D/", "--set", "train.local_save_every=2"], "name the same folder"),
])
def test_bad_tier_settings_are_refused(corpus, tmp_path, args, expected):
    args = [str(tmp_path / a) if a in ("D", "L", "D/") else a for a in args]
    result = train(corpus, 1, *args)
    assert result.returncode != 0 and expected in result.stderr, result.stderr
    assert not (tmp_path / "D").exists() and not (tmp_path / "L").exists()  # refused before anything is written


def test_a_damaged_latest_is_named_when_resuming_and_verifying(corpus, tmp_path):
    # An edited ROOT/latest was ignored without a word: the run resumed from the highest complete
    # step, and `ckpt verify ROOT` said OK.
    root = tmp_path / "ckpt"
    ok(train(corpus, 1, "--save", root, "--set", "train.save_every=2", "--set", "train.steps=4"))
    (root / "latest").write_text("step-00000009\n")
    resumed = ok(train(corpus, 1, "--save", root, "--set", "train.save_every=2", "--set", "train.steps=6",
                       "--resume", "auto", "--allow-resume-changes"))
    assert "latest names 'step-00000009', which does not exist; the newest complete checkpoint, step-00000004, " \
           "is used instead" in resumed.stderr, resumed.stderr
    assert "at step 4" in resumed.stdout
    (root / "latest").write_text("nonsense\n")
    verified = tripod("ckpt", "verify", root)
    assert verified.returncode != 0 and "names 'nonsense', which is not a step directory's name" in verified.stdout + verified.stderr


def test_a_state_that_overflowed_in_its_update_is_not_saved_and_the_previous_stays_latest(corpus, tmp_path):
    # fp32 at a learning rate of 1e39: the update overflows every weight to infinity while the
    # step's loss and gradients are finite, and the step's save wrote that state as `latest`
    # (`ckpt verify` said OK; a resume from it "diverged" at its first step).
    root = tmp_path / "ckpt"
    fp32 = ["--set", "train.dtype=fp32", "--save", root]
    ok(train(corpus, 2, "--zero", 1, *fp32, "--set", "train.save_every=2", "--set", "train.steps=2"))
    diverged = train(corpus, 2, "--zero", 1, *fp32, "--resume", "auto", "--allow-resume-changes",
                     "--set", "train.save_every=1", "--set", "train.steps=4", "--set", "optim.lr=1e39",
                     "--set", "optim.min_lr=1e39", "--set", "optim.warmup_steps=0")
    assert diverged.returncode != 0, diverged.stdout + diverged.stderr
    assert "the previous checkpoint is untouched" in diverged.stderr, diverged.stderr
    for rank in (0, 1):  # each rank names a tensor of its own shard
        assert f"rank {rank}: rank {rank}'s tensor '" in diverged.stderr, diverged.stderr
    assert "infinite or NaN values (the first: element " in diverged.stderr
    # "training diverged": what `scale run` counts a run's divergence by (not a failure)
    assert "after step 3's update (training diverged): a state that trains into NaN is not saved" in diverged.stderr
    assert (root / "latest").read_text().strip() == "step-00000002"
    assert sorted(p.name for p in root.glob("step-*")) == ["step-00000002"]
    assert not list(root.glob(".partial*"))
    assert "OK" in ok(tripod("ckpt", "verify", root)).stdout


def manifest_checksum(manifest):
    """XXH64 of the manifest's other fields in nlohmann's compact dump (sorted keys), as ckpt/manifest.cpp."""
    text = json.dumps(manifest, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return xxhash.xxh64(text.encode()).hexdigest()


def poison(step_dir, tensor, element):
    """Writes NaN over one parameter element of a saved checkpoint and records the checksums a save
    would have (block, file, manifest): a state an earlier Tripod saved at a divergence."""
    manifest_path = step_dir / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    recorded = manifest.pop("checksum")
    assert manifest_checksum(manifest) == recorded  # the canonical form reproduced
    for entry in manifest["files"]:
        for block in entry["blocks"]:
            if (block["tensor"], block["kind"]) != (tensor, "param") or not block["start"] <= element < \
                    block["start"] + block["length"]:
                continue
            path = step_dir / entry["name"]
            data = bytearray(path.read_bytes())
            size = {"fp32": 4, "fp64": 8}[block["dtype"]]
            at = block["offset"] + (element - block["start"]) * size
            data[at:at + size] = np.array([np.nan], dtype=f"<f{size}").tobytes()
            path.write_bytes(bytes(data))
            block["xxh64"] = xxhash.xxh64(bytes(data[block["offset"]:block["offset"] + size * block["length"] *
                                                     block["count"]])).hexdigest()
            entry["xxh64"] = xxhash.xxh64(bytes(data)).hexdigest()
            manifest["checksum"] = manifest_checksum(manifest)
            manifest_path.write_text(json.dumps(manifest, indent=1) + "\n")
            return
    raise AssertionError(f"no param block of {tensor} holds element {element}")


def test_a_checkpoint_holding_a_nan_is_refused_naming_the_tensor(corpus, tmp_path):
    # Such a checkpoint passed `ckpt verify`, resumed into "training diverged" at its first step,
    # and exported to Hugging Face.
    root = tmp_path / "ckpt"
    ok(train(corpus, 1, "--save", root, "--set", "train.save_every=2", "--set", "train.steps=4"))
    newest = root / "step-00000004"
    poison(newest, "h.1.mlp.c_fc.weight", 5)
    expected = "tensor 'h.1.mlp.c_fc.weight' (param) holds 1 infinite or NaN value (the first: element 5, nan)"
    verify = tripod("ckpt", "verify", root)
    assert verify.returncode == 1 and expected in verify.stdout, verify.stdout + verify.stderr
    resumed = train(corpus, 1, "--resume", newest, "--allow-resume-changes")
    assert resumed.returncode != 0 and expected in resumed.stderr, resumed.stdout + resumed.stderr
    assert "diverged" not in resumed.stderr and "step " not in resumed.stdout
    # numpy's reader (reports/tripod_ckpt.py) reads the value, no longer calling the tensor "not fully written"
    weight = read_checkpoint(newest)[1]["param"]["h.1.mlp.c_fc.weight"].ravel()
    assert np.isnan(weight[5]) and np.isfinite(np.delete(weight, 5)).all()
    exported = tripod("export", "hf", "--checkpoint", newest, "--out", tmp_path / "hf")
    assert exported.returncode != 0 and expected in exported.stderr, exported.stderr
    assert "OK" in ok(tripod("ckpt", "verify", root / "step-00000002")).stdout
