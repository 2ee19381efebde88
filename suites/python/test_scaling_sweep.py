#!/usr/bin/python3
"""End-to-end tests of the sweep driver, `tripod scale run` and `tripod scale fit`.

A small spec (2 budgets x 3 tiny models on a synthetic Markov corpus, a second or two per run) is
written by the test and checked through: the dry-run grid arithmetic, the runs.jsonl records, a
rerun that trains nothing, a run whose result was lost (it resumes from its checkpoint), a sweep
killed mid-run (its runs resume and end exactly where uninterrupted ones do), a diverged run that
the fitter excludes by name, and errors for bad specs.

Run: TRIPOD_BINARY_DIR=build/release /usr/bin/python3 -m pytest -q suites/python/test_scaling_sweep.py
(about a minute on 2 cores; CTest sets TRIPOD_BINARY_DIR).
"""

import json
import math
import os
import pathlib
import re
import shutil
import signal
import subprocess
import time

import pytest

BATCH, CONTEXT = 8, 32
TOKENS_PER_STEP = BATCH * CONTEXT
REQUIRED_KEYS = {"name", "status", "N", "D", "C", "budget", "loss", "eval_loss", "final_loss", "smoothed_loss",
                 "n_layer", "d_model", "wall_seconds", "config_hash", "steps", "tokens_per_param"}


@pytest.fixture(scope="module")
def tripod():
    """The tripod binary; skips when not run by CTest, fails when CTest's build lacks it."""
    binary_dir = os.environ.get("TRIPOD_BINARY_DIR")
    if not binary_dir:
        pytest.skip("TRIPOD_BINARY_DIR is not set: run through ctest, or export it to a build directory")
    program = pathlib.Path(binary_dir) / "reference" / "tripod"
    assert program.is_file(), f"TRIPOD_BINARY_DIR={binary_dir} has no reference/tripod: build the `tripod` target"
    return str(program)


def small_spec(**changes):
    spec = {
        "name": "test",
        "corpus": {"synthetic": {"vocab": 32, "order": 1, "sharpness": 2.0, "tokens": 600000, "seed": 3}},
        "conventions": {"param_count": "total", "flops": "6N"},
        "budgets": [4e9, 1.2e10],
        "models": {"rule": {"aspect_ratio": 16, "head_dim": 8, "d_ff_ratio": 4}, "sizes_per_budget": 3,
                   "span": 4, "tokens_per_param": 30},
        "context": CONTEXT, "batch_size": BATCH,
        "lr": {"base": 0.02, "reference_d_model": 32, "width_exponent": 0.5, "min_lr_ratio": 0.1},
        "warmup": {"fraction": 0.05, "max_steps": 20},
        "min_steps": 10, "eval_batches": 8, "checkpoint_every": 40,
    }
    spec.update(changes)
    return spec


def write_spec(path, spec):
    return write_text(path, json.dumps(spec, indent=2))


def write_text(path, text):
    path.write_text(text)
    return str(path)


def run(cmd, check=True, timeout=300, **kwargs):
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kwargs)
    if check:
        assert result.returncode == 0, f"{' '.join(cmd)} failed:\n{result.stdout}\n{result.stderr}"
    return result


def dry_run_grid(tripod, spec_path):
    """{name: row} from the dry-run table: budget, N, D, C, steps, tokens/param."""
    out = run([tripod, "scale", "run", spec_path, "--dry-run", "--out", "/nonexistent/unused"]).stdout
    rows = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 14 and parts[1].startswith("C") and parts[0][0].isdigit():
            rows[parts[1]] = {"budget": float(parts[0]), "N": int(parts[6]), "D": int(parts[7]),
                              "C": float(parts[8]), "steps": int(parts[9]), "tokens_per_param": float(parts[10])}
    return rows


def read_records(out):
    return [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def sweep(tripod, tmp_path_factory):
    """The small sweep, run once with one run forced to diverge (lr = 1e3)."""
    work = tmp_path_factory.mktemp("sweep")
    names = sorted(dry_run_grid(tripod, write_spec(work / "probe.json", small_spec())))
    diverging = names[0]
    spec = small_spec(overrides=[{"runs": diverging, "set": {"optim.lr": 1000.0}}])
    spec_path = write_spec(work / "spec.json", spec)
    out = work / "out"
    started = time.time()
    result = run([tripod, "scale", "run", spec_path, "--out", str(out), "--jobs", "2", "--progress-every", "0.5"])
    return {"tripod": tripod, "work": work, "spec": spec, "spec_path": spec_path, "out": out,
            "diverging": diverging, "stdout": result.stdout, "seconds": time.time() - started}


def test_dry_run_grid_arithmetic(tripod, tmp_path):
    grid = dry_run_grid(tripod, write_spec(tmp_path / "spec.json", small_spec()))
    assert len(grid) == 6
    for name, row in grid.items():
        wanted_d = row["budget"] / (6 * row["N"])           # the 6N convention: C = 6 N D
        assert abs(row["D"] - wanted_d) <= TOKENS_PER_STEP / 2, name   # rounded to whole steps
        assert row["D"] == row["steps"] * TOKENS_PER_STEP, name
        assert math.isclose(row["C"], 6 * row["N"] * row["D"], rel_tol=2e-3), name  # table shows 3 digits
        assert math.isclose(row["tokens_per_param"], row["D"] / row["N"], abs_tol=0.06), name
    for budget in (4e9, 1.2e10):   # three distinct sizes per budget, spanning the IsoFLOP centre
        sizes = sorted(r["N"] for r in grid.values() if r["budget"] == budget)
        assert len(set(sizes)) == 3
        centre = math.sqrt(budget / (6 * 30))
        assert sizes[0] < centre < sizes[-1]


def test_records(sweep):
    records = read_records(sweep["out"])
    assert len(records) == 6
    by_name = {r["name"]: r for r in records}
    for r in records:
        assert REQUIRED_KEYS <= r.keys(), r["name"]
        assert r["D"] == r["steps"] * TOKENS_PER_STEP
        assert math.isclose(r["C"], 6 * r["N"] * r["D"], rel_tol=1e-12)
        config = json.loads((sweep["out"] / "runs" / r["name"] / "config.json").read_text())
        assert config["train"]["steps"] == r["steps"] and config["model"]["d_model"] == r["d_model"]
        if r["name"] == sweep["diverging"]:
            continue
        assert r["status"] == "ok", r
        assert r["loss"] == r["eval_loss"] and r["loss_source"] == "eval"
        curve = r["curve"]  # Approach 1's training curve: log-spaced, trailing-mean smoothed
        assert 2 <= len(curve["tokens"]) <= 64 and len(curve["loss"]) == len(curve["tokens"])
        assert curve["tokens"] == sorted(curve["tokens"]) and curve["tokens"][-1] == r["D"]
        assert 0 < r["loss"] < math.log(32) + 0.2      # below (or near) a uniform guess over 32 tokens
    diverged = by_name[sweep["diverging"]]
    assert diverged["status"] == "diverged" and diverged["loss"] is None
    assert "training diverged" in diverged["error"]
    assert "diverged" in sweep["stdout"]


def test_progress_lines_name_each_run_and_the_sweep(sweep):
    """Progress every half second: per running run its step of steps, loss, tokens/s and ETA; for the
    sweep the runs done and its ETA; all of it in OUT/sweep.log as well."""
    stdout = sweep["stdout"]
    run_lines = [line for line in stdout.splitlines() if "] run    " in line]
    sweep_lines = [line for line in stdout.splitlines() if "] sweep  " in line]
    assert run_lines and sweep_lines, stdout
    names = {r["name"] for r in read_records(sweep["out"])}
    stepping = [line for line in run_lines if re.search(r" step +\d+/\d+ ", line)]
    assert stepping, run_lines
    for line in stepping:
        assert any(f" {name} " in line for name in names), line
        assert "loss" in line and "tok/s" in line and "ETA" in line, line
    assert all("runs done" in line and "ETA" in line for line in sweep_lines)
    log = (sweep["out"] / "sweep.log").read_text()
    assert stepping[0] in log and "] done   " in log


def test_rerun_trains_nothing(sweep):
    out = sweep["out"]
    logs = {p: p.stat().st_size for p in out.glob("runs/*/train.log")}
    before = (out / "runs.jsonl").read_text()
    result = run([sweep["tripod"], "scale", "run", sweep["spec_path"], "--out", str(out)])
    assert "nothing to train" in result.stdout
    assert " start " not in result.stdout
    assert {p: p.stat().st_size for p in logs} == logs
    assert (out / "runs.jsonl").read_text() == before


def test_lost_result_resumes_from_checkpoint(sweep):
    out = sweep["out"]
    name = sorted(r["name"] for r in read_records(out) if r["status"] == "ok")[-1]
    original = json.loads((out / "runs" / name / "result.json").read_text())
    (out / "runs" / name / "result.json").unlink()
    result = run([sweep["tripod"], "scale", "run", sweep["spec_path"], "--out", str(out)])
    assert "resuming at step" in result.stdout
    log = (out / "runs" / name / "train.log").read_text()
    assert f"resuming {name} from its checkpoint at step {original['steps']}" in log
    assert "resuming from" in log                      # the trainer's own line
    redone = [r for r in read_records(out) if r["name"] == name]
    assert len(redone) == 1                            # runs.jsonl holds each run once
    assert redone[0]["loss"] == original["loss"]       # same final weights, same held-out tokens


def test_killed_sweep_resumes_exactly(sweep):
    """SIGTERM to the driver mid-run: its runs stop, a rerun resumes them from their checkpoints."""
    out = sweep["work"] / "killed"
    spec_path = write_spec(sweep["work"] / "killed.json", small_spec(budgets=[1.2e10]))
    cmd = [sweep["tripod"], "scale", "run", spec_path, "--out", str(out), "--jobs", "2"]
    driver = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 60
        while time.time() < deadline and not list(out.glob("runs/*/ckpt/latest")):
            time.sleep(0.01)
        # A second driver on the folder meanwhile (the command run again) is refused before it takes
        # a run: it trained the same pending runs beside the first, both failing on each other's roots.
        second = run(cmd, check=False)
        assert second.returncode != 0 and f"another `tripod scale run` is running in {out};" in second.stderr, \
            second.stdout + second.stderr
        driver.send_signal(signal.SIGTERM)
        stdout, stderr = driver.communicate(timeout=60)
    finally:
        driver.kill()  # a failed check must not leave the driver training on
    assert driver.returncode != 0 and "interrupted" in stderr, stdout + stderr

    result = run(cmd)
    resumed = [p.parent.name for p in out.glob("runs/*/train.log") if "from its checkpoint at step" in p.read_text()]
    assert resumed, result.stdout
    uninterrupted = {r["name"]: r for r in read_records(sweep["out"])}
    for r in read_records(out):
        assert r["status"] == "ok"
        if r["name"] != sweep["diverging"]:   # that one ran with lr = 1e3 in the first sweep
            # Same run, same thread count: resuming reproduces the uninterrupted loss bit for bit.
            assert r["loss"] == uninterrupted[r["name"]]["loss"], r["name"]


def test_fit_excludes_the_diverged_run(sweep):
    out = sweep["out"]
    result = run([sweep["tripod"], "scale", "fit", str(out), "--bootstrap", "0", "--small-grid"])
    assert f"excluding run '{sweep['diverging']}'" in result.stderr
    fit = json.loads((out / "fit.json").read_text())
    assert [x["name"] for x in fit["excluded"]] == [sweep["diverging"]]
    assert fit["n_runs"] == 5
    assert "corpus entropy rate H" in (out / "fit.md").read_text()


def test_a_run_whose_update_overflows_at_a_save_is_diverged_not_failed(tripod, tmp_path):
    # A state holding infinities is not saved (ckpt/finite_values.h); the save's refusal must still
    # read as the run's divergence, or the sweep would end in error and retry the run on every rerun.
    spec = small_spec(budgets=[4e9], checkpoint_every=1,
                      overrides=[{"runs": "*", "set": {"optim.lr": 1e39, "train.dtype": "fp32"}}])
    spec["models"]["sizes_per_budget"] = 1
    out = tmp_path / "out"
    result = run([tripod, "scale", "run", write_spec(tmp_path / "spec.json", spec), "--out", str(out),
                  "--jobs", "1", "--progress-every", "0"])
    assert "0 ok, 1 diverged" in result.stdout, result.stdout
    [record] = read_records(out)
    assert record["status"] == "diverged" and "a state that trains into NaN is not saved" in record["error"], record


def test_a_corpus_rewritten_under_a_finished_sweep_is_refused(tripod, tmp_path):
    # The runs' configurations name the corpus's folder, not its tokens: a corpus rewritten in place
    # had the runs still to train trained on it beside the finished ones, and the fit mixed the two.
    data, out = tmp_path / "data", tmp_path / "out"

    def corpus(seed):
        run([tripod, "data", "synthetic", "--out", str(data), "--vocab-size", "32", "--order", "1",
             "--tokens", "600000", "--seed", str(seed)])

    corpus(3)
    spec = small_spec(corpus={"dir": str(data)}, budgets=[4e9])
    spec["models"]["sizes_per_budget"] = 2
    spec_path = write_spec(tmp_path / "spec.json", spec)
    run([tripod, "scale", "run", spec_path, "--out", str(out), "--jobs", "2", "--progress-every", "0"])
    recorded = json.loads((out / "sweep.json").read_text())["corpus"].get("train_tokens_xxh64")
    # One run to redo (its result and checkpoints gone), the other finished, and another corpus.
    redo = sorted((out / "runs").iterdir())[0]
    (redo / "result.json").unlink()
    shutil.rmtree(redo / "ckpt")
    corpus(4)
    result = run([tripod, "scale", "run", spec_path, "--out", str(out)], check=False)
    assert result.returncode != 0, result.stdout
    assert not (redo / "result.json").exists()
    assert f"were trained on a corpus whose training tokens' XXH64 is {recorded}" in result.stderr, result.stderr
    assert "another corpus; delete" in result.stderr
    assert re.fullmatch(r"[0-9a-f]{16}", recorded)
    assert json.loads((out / "sweep.json").read_text())["corpus"]["train_tokens_xxh64"] == recorded
    corpus(3)  # the same corpus again: the run is redone on it
    result = run([tripod, "scale", "run", spec_path, "--out", str(out)])
    assert "1 already finished, 1 to train" in result.stdout, result.stdout
    assert (redo / "result.json").exists()


def test_bad_specs_are_errors(tripod, tmp_path):
    too_small = small_spec(budgets=[1e6, 4e9])
    result = run([tripod, "scale", "run", write_spec(tmp_path / "small.json", too_small), "--dry-run"], check=False)
    assert result.returncode != 0
    assert "budget 1e6 gives model C1e6-" in result.stderr and "less than one batch" in result.stderr

    too_large = small_spec(budgets=[4e9, 1e40])  # its step count was -9223372036854775808
    result = run([tripod, "scale", "run", write_spec(tmp_path / "large.json", too_large), "--dry-run"], check=False)
    assert result.returncode != 0 and "budget 1e40 gives model C1e40-" in result.stderr, result.stderr
    assert "more than 2^40" in result.stderr and "-9223372036854775808" not in result.stderr

    many = small_spec()
    many["models"]["sizes_per_budget"] = 1000  # planned for minutes before
    result = run([tripod, "scale", "run", write_spec(tmp_path / "many.json", many), "--dry-run"], check=False)
    assert result.returncode != 0 and "'models.sizes_per_budget' must be <= 64, got 1000" in result.stderr

    typo = small_spec()
    typo["budget"] = typo.pop("budgets")
    result = run([tripod, "scale", "run", write_spec(tmp_path / "typo.json", typo), "--dry-run"], check=False)
    assert result.returncode != 0 and "unknown key 'budget'" in result.stderr and "typo.json" in result.stderr

    # A key given twice in a hand-edited spec: JSON keeps the last, so the sweep ran the grid of the
    # second "budgets" without a word; and a syntax error is placed by line and column.
    text = json.dumps(small_spec(), indent=1)
    twice = text.replace('"budgets":', '"budgets": [1e10],\n "budgets":', 1)
    result = run([tripod, "scale", "run", write_text(tmp_path / "twice.json", twice), "--dry-run"], check=False)
    assert result.returncode != 0 and "key 'budgets' appears twice" in result.stderr, result.stderr
    comma = text.replace('"budgets": [', '"budgets": [,', 1)
    result = run([tripod, "scale", "run", write_text(tmp_path / "comma.json", comma), "--dry-run"], check=False)
    assert result.returncode != 0 and "comma.json: not valid JSON" in result.stderr and "at line " in result.stderr

    # Cut to an int without a word (4294967312 became 16), or a shape search without end.
    huge_vocab = small_spec(corpus={"synthetic": {"vocab": 4294967312, "order": 1, "tokens": 600000}})
    result = run([tripod, "scale", "run", write_spec(tmp_path / "vocab.json", huge_vocab), "--dry-run"], check=False)
    assert result.returncode != 0 and "'corpus.synthetic.vocab' must be <= 2147483647" in result.stderr, result.stderr
    deep = small_spec()
    deep["models"]["rule"]["max_layers"] = 10 ** 10
    result = run([tripod, "scale", "run", write_spec(tmp_path / "deep.json", deep), "--dry-run"], check=False,
                 timeout=30)
    assert result.returncode != 0 and "shapes to try for each size, more than 100000" in result.stderr, result.stderr

    bad_override = small_spec(overrides=[{"runs": "C9e99-*", "set": {"optim.lr": 1.0}}])
    result = run([tripod, "scale", "run", write_spec(tmp_path / "ov.json", bad_override), "--dry-run"], check=False)
    assert result.returncode != 0 and "matches no run" in result.stderr

    # An --out that is a file: "filesystem error: cannot create directories: Not a directory [FILE]".
    a_file = pathlib.Path(write_text(tmp_path / "a-file", "mine"))
    result = run([tripod, "scale", "run", write_spec(tmp_path / "ok.json", small_spec()), "--out", a_file], check=False)
    assert result.returncode == 1 and f"tripod: error: {a_file} is a file, not a folder" in result.stderr, result.stderr
    assert a_file.read_text() == "mine"


def test_scale_advise_from_the_command_line(tripod, tmp_path):
    out = tmp_path / "advice.json"
    result = subprocess.run([tripod, "scale", "advise", "chinchilla", "--threshold", "0.01", "--json", str(out)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "a doubling gains less than 0.01 from C = 1.87e+26 FLOPs" in result.stdout
    assert json.loads(out.read_text())["gamma"] == pytest.approx(0.34 * 0.28 / 0.62)
    # Every digit of the threshold reaches advise.py (six decimals made 4e-7 "0.0", 1.4e-6 "1e-06").
    small = subprocess.run([tripod, "scale", "advise", "chinchilla", "--threshold", "1.4e-6"],
                           capture_output=True, text=True, timeout=60)
    assert small.returncode == 0 and "a doubling gains less than 1.4e-06" in small.stdout, small.stdout + small.stderr
    for args, message in ((["chinchilla", "--threshold", "0"], "--threshold must be positive"),
                          (["no-such-fit", "--threshold", "0.01"], "neither a fit.json"),
                          (["chinchilla", "--threshold", "0.01", "--from", "kaplan"], "--from")):
        bad = subprocess.run([tripod, "scale", "advise", *args], capture_output=True, text=True, timeout=60)
        assert bad.returncode != 0 and message in bad.stdout + bad.stderr, args


def one_shape(n_head=2, d_ff=64):
    return {"n_layer": 1, "d_model": 16, "n_head": n_head, "d_ff": d_ff}


def test_runs_that_would_share_a_name_are_refused(tripod, tmp_path):
    # A name is a run's folder, checkpoint root and record. A repeated seed had the second "run"
    # resume the first's checkpoint (the fit counted one training twice); shapes that differ only in
    # n_head had the second refused by the first's checkpoint and every rerun after refused.
    cases = {"seeds": small_spec(seeds=[1, 1]),
             "budgets": small_spec(budgets=[4e9, 4.001e9]),
             "shapes": small_spec(models={"shapes": [one_shape(n_head=2), one_shape(n_head=4)]})}
    for name, spec in cases.items():
        result = run([tripod, "scale", "run", write_spec(tmp_path / f"{name}.json", spec), "--dry-run"], check=False)
        assert result.returncode == 1 and "two runs would both be named C4e9-L1-d" in result.stderr, \
            (name, result.stdout, result.stderr)


def test_an_override_may_not_change_the_seed(tripod, tmp_path):
    # Seeds 1 and 2 trained alike under train.seed = 5, recorded as 1 and 2.
    spec = small_spec(seeds=[1, 2], overrides=[{"runs": "*", "set": {"train.seed": 5}}])
    result = run([tripod, "scale", "run", write_spec(tmp_path / "seed.json", spec), "--dry-run"], check=False)
    assert result.returncode == 1 and "may not set 'train.seed'" in result.stderr, result.stderr


def test_a_finished_runs_record_is_recounted_when_the_conventions_change(tripod, tmp_path):
    # The training is the same under either parameter count (FLOPs counted by the model, explicit
    # shape), so the run stays finished, but its record kept N of `total` under `non_embedding`.
    spec = small_spec(budgets=[4e9], conventions={"param_count": "total", "flops": "6N+attention"},
                      models={"shapes": [one_shape()]})
    out = tmp_path / "out"
    run([tripod, "scale", "run", write_spec(tmp_path / "total.json", spec), "--out", str(out), "--progress-every", "0"])
    [before] = read_records(out)
    assert before["N"] == before["N_total"] and before["param_count"] == "total"
    spec["conventions"]["param_count"] = "non_embedding"
    result = run([tripod, "scale", "run", write_spec(tmp_path / "ne.json", spec), "--out", str(out),
                  "--progress-every", "0"])
    assert "1 already finished, 0 to train" in result.stdout and "recounted" in result.stdout, result.stdout
    [after] = read_records(out)
    assert after["N"] == before["N_non_embedding"] < before["N"] and after["param_count"] == "non_embedding"
    assert after["tokens_per_param"] == after["D"] / after["N"] and after["loss"] == before["loss"]


def test_a_sweep_trains_on_the_backend_it_is_given(tripod, tmp_path):
    # `scale run` had no --backend, so the GPU preset's runs trained on the CPU.
    spec = small_spec(budgets=[4e9], models={"shapes": [one_shape()]})
    out = tmp_path / "out"
    result = run([tripod, "scale", "run", write_spec(tmp_path / "spec.json", spec), "--out", str(out),
                  "--backend", "emulated", "--progress-every", "0"])
    assert "1 at a time" in result.stdout, result.stdout  # a device's sweep runs one at a time by default
    [log] = out.glob("runs/*/train.log")
    assert "backend emulated" in log.read_text(), log.read_text()


def test_the_gpu_presets_missing_corpus_is_not_sent_to_a_script_that_does_not_write_it(tripod, tmp_path):
    # The hint named ci/prepare-natural-corpus.sh, which writes data/natural-text, not the
    # data/natural-text-large natural-gpu reads.
    result = run([tripod, "scale", "run", "natural-gpu", "--dry-run", "--out", str(tmp_path / "out")], check=False,
                 cwd=tmp_path)
    assert result.returncode == 1 and "natural-text-large/tokens is not prepared" in result.stderr, result.stderr
    assert "prepare it with tripod data prepare" in result.stderr and "bash ci/" not in result.stderr, result.stderr


def test_a_sweep_does_not_mix_eval_losses_over_two_orders_of_held_out_windows(tripod, tmp_path):
    # Records finished before the held-out windows took one fixed order measured their eval loss on
    # windows chosen by train.seed; resumed, the sweep trained the rest on the fixed order and the
    # fit mixed the two.
    spec = small_spec(budgets=[4e9], models={"shapes": [one_shape(), {**one_shape(), "n_layer": 2}]})
    spec_path, out = write_spec(tmp_path / "spec.json", spec), tmp_path / "out"
    run([tripod, "scale", "run", spec_path, "--out", str(out), "--progress-every", "0"])
    first, second = sorted(out.glob("runs/*/result.json"))
    old = json.loads(first.read_text())
    del old["held_out_order"]  # as a Tripod before 2026-12-07 wrote it
    first.write_text(json.dumps(old))
    result = run([tripod, "scale", "run", spec_path, "--out", str(out), "--progress-every", "0"])  # nothing to train
    assert "2 already finished, 0 to train" in result.stdout, result.stdout
    second.unlink()  # one run left to train beside the old record
    result = run([tripod, "scale", "run", spec_path, "--out", str(out), "--progress-every", "0"], check=False)
    assert result.returncode == 1 and "would mix the two" in result.stderr, result.stdout + result.stderr


def test_a_refused_spec_change_leaves_the_sweep_as_it_was(tripod, tmp_path):
    # sweep.json was rewritten with the refused spec's grid (what `scale fit` reads), and a finished
    # run's record recounted under its conventions, before another run's changed config was refused.
    # (FLOPs counted by the model: the parameter count's convention changes no run's training)
    spec = small_spec(budgets=[4e9], conventions={"param_count": "total", "flops": "6N+attention"},
                      models={"shapes": [one_shape(), {**one_shape(), "n_layer": 2}]})
    out = tmp_path / "out"
    run([tripod, "scale", "run", write_spec(tmp_path / "spec.json", spec), "--out", str(out), "--progress-every", "0"])
    before = {p: p.read_bytes() for p in [out / "sweep.json", *out.glob("runs/*/result.json")]}
    second = sorted(p.parent.name for p in out.glob("runs/*/result.json"))[1]
    spec["conventions"]["param_count"] = "non_embedding"
    spec["overrides"] = [{"runs": second, "set": {"optim.lr": 0.03}}]
    result = run([tripod, "scale", "run", write_spec(tmp_path / "changed.json", spec), "--out", str(out),
                  "--progress-every", "0"], check=False)
    assert result.returncode == 1 and second in result.stderr, result.stdout + result.stderr
    assert "recounted" not in result.stdout
    assert {p: p.read_bytes() for p in before} == before


def test_an_unknown_backend_is_refused_before_the_grid(tripod, tmp_path):
    # Each run was a child `tripod train --backend nosuch`: every one failed in turn.
    spec = small_spec(budgets=[4e9], models={"shapes": [one_shape()]})
    result = run([tripod, "scale", "run", write_spec(tmp_path / "spec.json", spec), "--out", str(tmp_path / "out"),
                  "--backend", "nosuch"], check=False)
    assert result.returncode == 1 and "--backend: 'nosuch' is not a backend of this build (it has: " in result.stderr, \
        result.stderr
    assert not (tmp_path / "out").exists()
    # A dry run trains nothing: a login node without the GPU backend may plan a GPU sweep.
    planned = run([tripod, "scale", "run", write_spec(tmp_path / "spec.json", spec), "--out", str(tmp_path / "out"),
                   "--backend", "nosuch", "--dry-run"], check=False)
    assert planned.returncode == 0, planned.stderr
