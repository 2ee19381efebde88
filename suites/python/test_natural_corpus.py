"""The natural-text scaling corpus and what keeps a sweep from repeating data: documents from three
Debian packages, deduplicated, held out at random by document (not the last pages of a book);
`tripod data prepare --val-input` keeping that split; and a spec's max_epochs refusing a grid that
would read its corpus more than that."""
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, PYTHONPATH=str(REPO_ROOT))


def tripod():
    binary_dir = os.environ.get("TRIPOD_BINARY_DIR")
    if not binary_dir:
        pytest.skip("TRIPOD_BINARY_DIR is not set: run through ctest")
    return str(Path(binary_dir) / "reference" / "tripod")


def documents(path):
    return [d for d in Path(path).read_text().split("\n\n") if d.strip()]


def test_corpus_is_deduplicated_and_held_out_at_random(tmp_path):
    result = subprocess.run([sys.executable, "-m", "scaling.natural_corpus", "--out", str(tmp_path), "--seed", "7"],
                            capture_output=True, text=True, cwd=REPO_ROOT, env=ENV, timeout=300)
    assert result.returncode == 0, result.stderr
    summary = json.loads((tmp_path / "corpus.json").read_text())
    sources = summary["sources"]
    assert sources["kjv"]["documents"] == 1189  # one per chapter
    assert sources["gcide"]["documents"] > 100000 and sources["jargon"]["documents"] > 2000
    assert all(s["licence"] for s in sources.values())
    train, val = documents(tmp_path / "train.txt"), documents(tmp_path / "val.txt")
    key = lambda d: hashlib.sha1(" ".join(d.lower().split()).encode()).hexdigest()
    train_keys = {key(d) for d in train}
    assert len(train_keys) == len(train), "no document twice"
    assert not train_keys & {key(d) for d in val}, "no held-out document in train"
    total = len(train) + len(val)
    assert abs(len(val) / total - 0.02) < 0.002
    # Drawn throughout: held-out chapters from both testaments, entries from across the alphabet.
    assert summary["sources"]["kjv"]["val_documents"] > 5 and summary["sources"]["jargon"]["val_documents"] > 5
    kjv_val = [d for d in val if d.split("\n", 1)[0][:1].isupper() and len(d) > 2000]
    assert kjv_val, "some held-out chapters"
    for markup in ("[1913 Webster]", "\\Ab*do\"men\\"):
        assert markup not in (tmp_path / "train.txt").read_text()[:5_000_000]


def test_prepare_keeps_a_given_held_out_text(tmp_path):
    words = ["the", "cat", "sat", "on", "mat", "a", "dog", "log", "quickly", "brown", "fox", "jumps", "over", "lazy"]
    (tmp_path / "train.txt").write_text("".join(" ".join(words[(i * k) % len(words)] for k in range(1, 9)) + "\n"
                                                for i in range(400)))
    (tmp_path / "val.txt").write_text("a dog sat on a log\n" * 20)
    program = tripod()
    result = subprocess.run([program, "data", "prepare", "--input", tmp_path / "train.txt", "--val-input",
                             tmp_path / "val.txt", "--out", tmp_path / "tok", "--vocab-size", "300"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    meta = json.loads((tmp_path / "tok" / "meta.json").read_text())
    assert meta["val_source"].endswith("val.txt") and meta["val_fraction"] is None
    assert meta["val_tokens"] > 0 and meta["train_tokens"] > 10 * meta["val_tokens"]
    both = subprocess.run([program, "data", "prepare", "--input", tmp_path / "train.txt", "--val-input",
                           tmp_path / "val.txt", "--val-fraction", "0.1", "--out", tmp_path / "x", "--vocab-size", "300"],
                          capture_output=True, text=True, timeout=60)
    assert both.returncode != 0 and "--val-fraction excludes --val-input" in both.stdout + both.stderr
    empty = tmp_path / "empty.txt"
    empty.write_text("  \n")
    bad = subprocess.run([program, "data", "prepare", "--input", tmp_path / "train.txt", "--val-input", empty,
                          "--out", tmp_path / "y", "--vocab-size", "300"], capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "held-out text" in bad.stderr and "is empty" in bad.stderr
    # One token held out ("x") was prepared ("val tokens 1"); training found it too short only after
    # it had written its metrics' start record and the rollback policy's first checkpoint.
    one = tmp_path / "one.txt"
    one.write_text("x")
    short = subprocess.run([program, "data", "prepare", "--input", tmp_path / "train.txt", "--val-input", one,
                            "--out", tmp_path / "z", "--vocab-size", "300"], capture_output=True, text=True, timeout=60)
    assert short.returncode != 0 and f'the held-out text "{one}" gives 1 token (at least 2' in short.stderr, short.stderr
    # A held-out split shorter than one sequence is refused before the run writes anything.
    few = tmp_path / "few.txt"
    few.write_text("a dog sat on a log\n")
    ok_short = subprocess.run([program, "data", "prepare", "--input", tmp_path / "train.txt", "--val-input", few,
                               "--out", tmp_path / "few", "--vocab-size", "300"], capture_output=True, text=True,
                              timeout=60)
    assert ok_short.returncode == 0, ok_short.stderr
    metrics, ck = tmp_path / "m.jsonl", tmp_path / "ck"
    run = subprocess.run([program, "train", "--config", "tiny", "--set", f"data.dir={tmp_path / 'few'}",
                          "--set", "train.seq_len=32", "--set", "model.context=32", "--set", "anomaly.policy=rollback",
                          "--save", ck, "--set", f"train.metrics={metrics}"], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode != 0 and 'split "val" has ' in run.stderr and "too few for one sequence" in run.stderr, \
        run.stdout + run.stderr
    assert not metrics.exists() and not ck.exists(), "nothing written before the refusal"


def test_max_epochs_refuses_a_grid_that_repeats_data(tmp_path):
    spec = {"name": "repeat", "corpus": {"synthetic": {"vocab": 32, "order": 1, "tokens": 100000, "seed": 3}},
            "budgets": [4e9, 1.2e10], "models": {"rule": {"aspect_ratio": 16, "head_dim": 8, "d_ff_ratio": 4},
                                                 "sizes_per_budget": 3, "span": 4, "tokens_per_param": 30},
            "context": 32, "batch_size": 8, "min_steps": 10, "max_epochs": 1.0}
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    result = subprocess.run([tripod(), "scale", "run", str(path), "--dry-run"], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode != 0
    assert "more than max_epochs = 1" in result.stderr and "epochs of the corpus" in result.stderr
    assert "epochs" in result.stdout  # the grid is printed first, so the user sees which runs
    spec["max_epochs"] = 1000.0
    path.write_text(json.dumps(spec))
    ok = subprocess.run([tripod(), "scale", "run", str(path), "--dry-run"], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr


@pytest.mark.parametrize("count", ["absent", "a string", "wrong"])
def test_max_epochs_counts_the_corpus_from_its_shards(tmp_path, count):
    # A prepared corpus whose meta.json lacked the optional "train_tokens" showed "0 train tokens"
    # and 0.00 epochs for every run, and max_epochs passed the grid; as a string it was an internal
    # error; a wrong count was believed.
    corpus = tmp_path / "corpus"
    made = subprocess.run([tripod(), "data", "synthetic", "--out", corpus, "--vocab-size", "32", "--order", "1",
                           "--tokens", "100000", "--seed", "3"], capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    meta = json.loads((corpus / "meta.json").read_text())
    train_tokens = meta.pop("train_tokens")
    if count != "absent":
        meta["train_tokens"] = str(train_tokens) if count == "a string" else 10 ** 12
    (corpus / "meta.json").write_text(json.dumps(meta))
    spec = {"name": "repeat", "corpus": {"dir": str(corpus)}, "budgets": [4e9, 1.2e10],
            "models": {"rule": {"aspect_ratio": 16, "head_dim": 8, "d_ff_ratio": 4}, "sizes_per_budget": 3, "span": 4,
                       "tokens_per_param": 30},
            "context": 32, "batch_size": 8, "min_steps": 10, "max_epochs": 1.0}
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    result = subprocess.run([tripod(), "scale", "run", str(path), "--dry-run"], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "more than max_epochs = 1" in result.stderr and f"epochs of the corpus's {train_tokens}" in result.stderr, \
        result.stderr


def test_the_natural_preset_never_repeats_data():
    """The shipped preset: >= 5 budgets over >= 32x of compute, max_epochs 1."""
    spec = json.loads((REPO_ROOT / "scaling" / "specs" / "natural.json").read_text())
    assert len(spec["budgets"]) >= 5 and max(spec["budgets"]) / min(spec["budgets"]) >= 32
    assert spec["max_epochs"] == 1.0


def test_an_unprepared_natural_corpus_names_its_script(tmp_path):
    # The hint named ci/prepare-data.sh (the KJV's script) for every corpus.
    result = subprocess.run([tripod(), "scale", "run", "natural", "--dry-run"], capture_output=True, text=True,
                            timeout=60, cwd=tmp_path)
    assert result.returncode != 0
    assert "is not prepared (no meta.json); prepare it with: bash ci/prepare-natural-corpus.sh" in result.stderr, \
        result.stderr
