"""End-to-end tests of the `tripod` command line: data preparation, training, exact resume,
export, and clear errors with a non-zero exit (never a crash or a silent run) on bad input."""
import errno
import fcntl
import json
import os
import random
import re
import shutil
import string
import subprocess
from pathlib import Path

import pytest

from tripod_cli import TRIPOD, file_size_limit, fixture_library, folder_lock_held, require_tripod

# A 1-layer model small enough that every training run below takes well under a second.
SMALL = ["--set", "model.n_layer=1", "--set", "model.d_model=32", "--set", "model.n_head=2",
         "--set", "model.d_ff=64", "--set", "model.context=16", "--set", "train.seq_len=16",
         "--set", "train.batch_size=4", "--set", "train.eval_batches=1", "--set", "train.log_every=1",
         "--set", "optim.warmup_steps=2"]


def tripod(*args, check=True):
    require_tripod()
    result = subprocess.run([str(TRIPOD), *map(str, args)], capture_output=True, text=True, timeout=300)
    if check and result.returncode != 0:
        raise AssertionError(f"tripod {' '.join(map(str, args))} failed ({result.returncode}):\n"
                             f"{result.stdout}\n{result.stderr}")
    return result


def expect_error(*args, contains):
    """The command must fail with exit code 1 (a reported error, not a crash) naming the problem."""
    result = tripod(*args, check=False)
    assert result.returncode == 1, f"expected exit 1, got {result.returncode}:\n{result.stdout}{result.stderr}"
    assert "tripod: error:" in result.stderr, result.stderr
    assert contains in result.stderr, f"'{contains}' not in: {result.stderr}"
    return result


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    out = tmp_path_factory.mktemp("corpus") / "markov"
    tripod("data", "synthetic", "--out", out, "--vocab-size", 64, "--order", 1, "--tokens", 40000)
    return out


def train(corpus, tmp, name, *extra):
    metrics = tmp / f"{name}.jsonl"
    tripod("train", "--config", "tiny", "--set", f"data.dir={corpus}", "--set", f"train.metrics={metrics}",
           *SMALL, *extra)
    return [json.loads(line) for line in metrics.read_text().splitlines()]


def step_losses(records):
    return {r["step"]: r["loss"] for r in records if "loss" in r}


def test_train_writes_metrics_and_loss_falls(corpus, tmp_path):
    records = train(corpus, tmp_path, "run", "--set", "train.steps=60", "--set", "optim.lr=0.03",
                    "--set", "train.batch_size=16")
    assert records[0]["event"] == "start"
    losses = step_losses(records)
    assert len(losses) == 60
    assert losses[59] < losses[0] - 0.5  # from ~log(64) = 4.16 towards the chain's entropy rate
    assert "val_loss" in records[-1]
    for key in ("lr", "grad_norm", "tokens_per_second", "mfu"):
        assert key in records[-1]


def test_printed_mfu_is_flops_per_step_over_time_over_peak(corpus, tmp_path):
    records = train(corpus, tmp_path, "mfu", "--set", "train.steps=3", "--set", "train.peak_tflops=0.5")
    start = records[0]
    assert start["peak_flops"] == 0.5e12
    for r in records[1:]:
        tokens_per_step = 4 * 16  # SMALL: batch 4 x seq_len 16
        expected = start["model_flops_per_token"] * tokens_per_step / r["step_seconds"] / start["peak_flops"]
        assert abs(r["mfu"] - expected) <= 1e-9 * expected
        assert abs(r["tokens_per_second"] - tokens_per_step / r["step_seconds"]) <= 1e-9 * r["tokens_per_second"]


def test_same_seed_bit_identical(corpus, tmp_path):
    a = step_losses(train(corpus, tmp_path, "a", "--set", "train.steps=5"))
    b = step_losses(train(corpus, tmp_path, "b", "--set", "train.steps=5"))
    assert a == b


def test_resume_continues_exactly(corpus, tmp_path):
    straight = step_losses(train(corpus, tmp_path, "straight", "--set", "train.steps=8"))
    ckpt = tmp_path / "ckpt"
    first = step_losses(train(corpus, tmp_path, "first", "--set", "train.steps=8", "--save", ckpt,
                              "--exit-after", 3))
    assert sorted(first) == [0, 1, 2]
    assert (ckpt / "latest").read_text().strip() == "step-00000003"
    assert json.loads((ckpt / "step-00000003" / "manifest.json").read_text())["step"] == 3
    # ROOT/latest, the pointer file, names the root's latest (it was "a file, not a checkpoint directory").
    second = step_losses(train(corpus, tmp_path, "second", "--set", "train.steps=8", "--resume", ckpt / "latest",
                               "--save", ckpt))
    assert sorted(second) == [3, 4, 5, 6, 7]
    for step, loss in {**first, **second}.items():
        assert loss == straight[step], f"step {step}: {loss} != {straight[step]} (resume must be exact)"
    # A restarted job that had finished has nothing to do: exit 0, and no "loss 0.0000 -> 0.0000".
    again = tripod("train", "--config", "tiny", "--set", f"data.dir={corpus}", *SMALL, "--set", "train.steps=8",
                   "--save", ckpt, "--resume", "auto")
    assert "done: no steps to run (the run is already at train.steps)" in again.stdout, again.stdout


def test_a_second_run_writing_the_same_metrics_file_is_refused(corpus, tmp_path):
    # Two experiments of one preset started in one folder share its default train.metrics
    # (runs/tiny/metrics.jsonl): the second emptied the first's file and both wrote their records
    # into it, interleaved, each exiting 0.
    require_tripod()
    metrics = tmp_path / "metrics.jsonl"
    args = [str(TRIPOD), "train", "--config", "tiny", "--set", f"data.dir={corpus}", "--set",
            f"train.metrics={metrics}", *SMALL, "--set", "train.log_every=1"]
    # Batches of 256: its 400 steps take seconds, where at 4 rows they could end before the second
    # run started (0.1 s on an idle machine), and the second then rightly ran.
    first = subprocess.Popen([*args, "--set", "train.steps=1000000", "--exit-after", "400",
                              "--set", "train.batch_size=256"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for line in first.stdout:
            if line.startswith("step "):
                break
        expect_error(*args[1:], "--set", "train.steps=3", "--set", "train.seed=9",
                     contains=f"train.metrics {metrics}: another run is writing this metrics file, and their "
                              "records would interleave in it; give this run its own (--set train.metrics=FILE)")
    finally:
        out, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [r["event"] for r in records if "event" in r] == ["start"]
    assert [r["step"] for r in records if "loss" in r] == list(range(400)), "one run's steps, in order"
    # Once it has ended, the file is free again (a fresh run empties it, as before).
    tripod(*args[1:], "--set", "train.steps=3")
    assert len([line for line in metrics.read_text().splitlines() if '"loss"' in line]) == 3


def test_a_fresh_run_does_not_overwrite_another_runs_checkpoints(corpus, tmp_path):
    # A forgotten --resume replaced the first run's step 4 with the second's, exit 0, no word.
    ckpt = tmp_path / "ckpt"
    train(corpus, tmp_path, "first", "--set", "train.steps=4", "--save", ckpt)
    before = (ckpt / "step-00000004" / "manifest.json").read_bytes()
    expect_error("train", "--config", "tiny", "--set", f"data.dir={corpus}", *SMALL, "--set", "train.steps=6",
                 "--set", "train.seed=99", "--save", ckpt,
                 contains=f"{ckpt} already holds checkpoints (the newest: step-00000004); this run starts at step 0")
    assert (ckpt / "step-00000004" / "manifest.json").read_bytes() == before
    assert sorted(p.name for p in ckpt.iterdir()) == [".lock", "latest", "step-00000004"]
    # Nor a run continued from another root's checkpoint (`--resume a --save b`, a command line
    # copied): b's latest moved to a's continuation, and its saves would prune b's checkpoints.
    other = tmp_path / "other"
    train(corpus, tmp_path, "other", "--set", "train.steps=2", "--set", "train.seed=7", "--save", other)
    expect_error("train", "--config", "tiny", "--set", f"data.dir={corpus}", *SMALL, "--set", "train.steps=6",
                 "--resume", other, "--save", ckpt, "--allow-resume-changes",
                 contains=f"{ckpt} already holds checkpoints (the newest: step-00000004), and this run continues "
                          f"{other}/step-00000002, which is not one of them")
    assert (ckpt / "latest").read_text().strip() == "step-00000004"
    assert sorted(p.name for p in ckpt.iterdir()) == [".lock", "latest", "step-00000004"]
    # Into a new folder it continues, and from there on resumes from its own checkpoints.
    train(corpus, tmp_path, "continued", "--set", "train.steps=4", "--resume", other, "--save", tmp_path / "new-root",
          "--allow-resume-changes")
    train(corpus, tmp_path, "again", "--set", "train.steps=6", "--resume", tmp_path / "new-root" / "step-00000004",
          "--save", tmp_path / "new-root", "--allow-resume-changes")
    assert (tmp_path / "new-root" / "latest").read_text().strip() == "step-00000006"
    # Two spellings of one folder, before it exists, were taken for two tiers.
    expect_error("train", "--config", "tiny", "--set", f"data.dir={corpus}", *SMALL, "--set", "train.steps=2",
                 "--set", "train.local_save_every=1", "--save", tmp_path / "new", "--save-local", f"{tmp_path}/./new/",
                 contains="--save-local and --save name the same folder")


def test_save_never_replaces_what_is_not_a_checkpoint(corpus, tmp_path):
    # Before the fix, --save onto a folder of other files deleted them all and exited 0.
    precious = tmp_path / "results"
    precious.mkdir()
    (precious / "thesis.txt").write_text("years of work")
    plain = tmp_path / "notes.txt"
    plain.write_text("keep me")
    for target, message in [(precious, "the folder exists and is not a Tripod checkpoint root"),
                            (plain, "a file of that name exists and is not a Tripod checkpoint root"),
                            (plain / "ckpt", "cannot create it")]:
        result = subprocess.run([str(TRIPOD), "train", "--config", "tiny", "--set", f"data.dir={corpus}", *SMALL,
                                 "--set", "train.steps=2", "--save", str(target)], capture_output=True, text=True,
                                timeout=120)
        assert result.returncode != 0
        assert message in result.stderr, result.stderr
        assert "step " not in result.stdout, "refused at start-up, before any training"
    assert (precious / "thesis.txt").read_text() == "years of work"
    assert plain.read_text() == "keep me"
    # An existing checkpoint root is continued into (a run from step 0 is refused there: see
    # test_a_fresh_run_does_not_overwrite_another_runs_checkpoints), and an empty folder saved into.
    ckpt = tmp_path / "ckpt"
    train(corpus, tmp_path, "one", "--set", "train.steps=2", "--save", ckpt)
    train(corpus, tmp_path, "two", "--set", "train.steps=3", "--save", ckpt, "--resume", "auto", "--allow-resume-changes")
    assert (ckpt / "latest").read_text().strip() == "step-00000003"
    assert sorted(p.name for p in ckpt.iterdir()) == [".lock", "latest", "step-00000002", "step-00000003"]
    empty = tmp_path / "empty"
    empty.mkdir()
    train(corpus, tmp_path, "three", "--set", "train.steps=2", "--save", empty)
    assert (empty / "step-00000002" / "manifest.json").exists()


def test_export_hf_of_an_untied_head_has_gpt2lmheadmodels_names(corpus, tmp_path):
    # With bare body names beside "lm_head.weight", transformers took the file for a base model's:
    # 4.40 refused it ("The state dictionary ... is corrupted"), later versions left the head random.
    ckpt, out = tmp_path / "ckpt", tmp_path / "hf"
    train(corpus, tmp_path, "run", "--set", "train.steps=1", "--set", "model.tie_embeddings=false", "--save", ckpt)
    tripod("export", "hf", "--checkpoint", ckpt, "--out", out)
    assert json.loads((out / "config.json").read_text())["tie_word_embeddings"] is False
    header_len = int.from_bytes((out / "model.safetensors").read_bytes()[:8], "little")
    names = set(json.loads((out / "model.safetensors").read_bytes()[8:8 + header_len])) - {"__metadata__"}
    assert "lm_head.weight" in names and "transformer.wte.weight" in names, sorted(names)
    assert all(name.startswith("transformer.") for name in names - {"lm_head.weight"}), sorted(names)


def test_export_hf_layout(corpus, tmp_path):
    ckpt, out = tmp_path / "ckpt", tmp_path / "hf"
    train(corpus, tmp_path, "run", "--set", "train.steps=2", "--save", ckpt)
    # A refused dtype leaves no folder behind (it left an empty one).
    expect_error("export", "hf", "--checkpoint", ckpt, "--out", out, "--dtype", "bf16",
                 contains="HF export supports fp32 and fp64, not bf16")
    assert not out.exists()
    tripod("export", "hf", "--checkpoint", ckpt, "--out", out)
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "gpt2" and config["n_layer"] == 1 and config["vocab_size"] == 64
    header_len = int.from_bytes((out / "model.safetensors").read_bytes()[:8], "little")
    header = json.loads((out / "model.safetensors").read_bytes()[8:8 + header_len])
    # GPT2LMHeadModel's names, as its save_pretrained writes them.
    assert header["transformer.h.0.mlp.c_fc.weight"]["shape"] == [32, 64]  # Conv1D [in, out]
    assert header["transformer.wte.weight"]["shape"] == [64, 32]
    assert {"transformer.wpe.weight", "transformer.ln_f.weight", "transformer.h.0.attn.c_attn.bias"} <= set(header)
    assert not any(name.startswith("lm_head") for name in header)  # tied: the head is wte

    # The step read is named; a `latest` that cannot be followed is said, not silently passed over.
    (ckpt / "latest").write_text("step-00000077\n")
    result = tripod("export", "hf", "--checkpoint", ckpt, "--out", tmp_path / "hf2")
    assert f"from {ckpt / 'step-00000002'}" in result.stdout, result.stdout
    assert f"tripod: warning: {ckpt / 'latest'} names 'step-00000077', which does not exist" in result.stderr, \
        result.stderr


def test_export_into_a_folder_another_export_is_writing_is_refused(corpus, tmp_path):
    # Two exports into one --out (every task of `srun` running the job script's export step) wrote
    # through the same model.safetensors.tmp: one failed to rename it, the other exited 0 with the
    # first one's weights in the folder. The writer locks the folder itself: a lock file would ship
    # with the model.
    ckpt, out = tmp_path / "ckpt", tmp_path / "hf"
    train(corpus, tmp_path, "run", "--set", "train.steps=2", "--save", ckpt)
    tripod("export", "hf", "--checkpoint", ckpt, "--out", out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with folder_lock_held(out):  # what an export at work holds
        expect_error("export", "hf", "--checkpoint", ckpt, "--out", out,
                     contains=f"export hf --out {out}: another `tripod export hf` is writing this folder")
        assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    # A killed export leaves its staging file behind; the next export refused the folder as holding
    # other files ("model.safetensors.tmp"). Now it finishes the folder, staging file gone.
    (out / "model.safetensors.tmp").write_bytes(b"cut short")
    (out / "config.json.tmp").write_bytes(b"{")
    (out / "tokenizer.model.tmp").write_bytes(b"")
    tripod("export", "hf", "--checkpoint", ckpt, "--out", out)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    # This version stages an export's files in a folder inside --out; a killed one leaves it.
    (out / ".export-staging").mkdir()
    (out / ".export-staging" / "model.safetensors.tmp").write_bytes(b"cut short")
    tripod("export", "hf", "--checkpoint", ckpt, "--out", out)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    # Anything else is still refused, a folder under an export's or a staging name included.
    for name in ("model.safetensors.tmp", "config.json"):
        (out / name).unlink(missing_ok=True)
        (out / name).mkdir()
        expect_error("export", "hf", "--checkpoint", ckpt, "--out", out, contains=f"holds other files ({name})")
        (out / name).rmdir()


def test_an_export_that_fails_midway_leaves_the_previous_export_whole(tmp_path):
    # Each file replaced its predecessor as soon as it was written: a failure after the model (here
    # a file-size limit that the tokenizer's copy exceeds, as a full disk would) left the new model
    # beside the previous export's tokenizer, or half a tokenizer. All three are written first now.
    # A tokenizer larger than the model: 2000 pieces of random words, and a model 2 wide.
    rng = random.Random(0)
    words = ["".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(6, 14))) for _ in range(3000)]
    text = tmp_path / "text.txt"
    text.write_text("\n".join(" ".join(rng.choice(words) for _ in range(12)) for _ in range(5000)))
    data, out = tmp_path / "data", tmp_path / "hf"
    tripod("data", "prepare", "--input", text, "--out", data, "--vocab-size", 2000)
    narrow = ["--set", "model.n_layer=1", "--set", "model.d_model=2", "--set", "model.n_head=1", "--set",
              "model.d_ff=8", "--set", "train.batch_size=2", "--set", "train.seq_len=16", "--set", "train.steps=2"]
    for seed in (1, 2):
        tripod("train", "--config", "tiny", "--set", f"data.dir={data}", *narrow, "--set", f"train.seed={seed}",
               "--save", tmp_path / f"ckpt{seed}")
    tripod("export", "hf", "--checkpoint", tmp_path / "ckpt1", "--out", out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    model, tokenizer = len(before["model.safetensors"]), len(before["tokenizer.model"])
    assert model < tokenizer, (model, tokenizer)  # the limit below lets the model through, not the tokenizer

    result = subprocess.run([str(TRIPOD), "export", "hf", "--checkpoint", str(tmp_path / "ckpt2"), "--out", str(out)],
                            capture_output=True, text=True, timeout=60, preexec_fn=file_size_limit((model + tokenizer) // 2))
    assert result.returncode == 1 and "File too large" in result.stderr, result.stdout + result.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # the staging folder gone too
    tripod("export", "hf", "--checkpoint", tmp_path / "ckpt2", "--out", out)
    after = {p.name: p.read_bytes() for p in out.iterdir()}
    assert sorted(after) == sorted(before) and after["model.safetensors"] != before["model.safetensors"]


def test_an_export_killed_while_moving_its_files_in_leaves_no_folder_a_loader_takes(corpus, tmp_path):
    # The staged files are renamed in one by one, config.json last: a kill between two renames left
    # the new model beside the previous export's config.json (here of another width), a folder a
    # loader took whole. The previous config.json is removed before the first rename, so such a
    # folder has none until an export completes it. The kill comes from rename(2) itself
    # (fixtures/killed_at_rename.c, LD_PRELOADed): at the last rename, config.json's into --out.
    shim = fixture_library("killed_at_rename", tmp_path)
    out = tmp_path / "hf"
    for name, width in (("narrow", 32), ("wide", 48)):
        train(corpus, tmp_path, name, "--set", "train.steps=1", "--set", f"model.d_model={width}",
              "--save", tmp_path / name)
    tripod("export", "hf", "--checkpoint", tmp_path / "narrow", "--out", out)
    assert json.loads((out / "config.json").read_text())["n_embd"] == 32

    killed = subprocess.run([str(TRIPOD), "export", "hf", "--checkpoint", str(tmp_path / "wide"), "--out", str(out)],
                            capture_output=True, text=True, timeout=60,
                            env={**os.environ, "LD_PRELOAD": str(shim), "TRIPOD_TEST_KILL_AT_RENAME": str(out / "config.json")})
    assert killed.returncode == -9, killed.stdout + killed.stderr
    assert not (out / "config.json").exists(), "a config.json beside a model it does not describe"
    tripod("export", "hf", "--checkpoint", tmp_path / "wide", "--out", out)  # completes the folder
    tripod("export", "hf", "--checkpoint", tmp_path / "wide", "--out", tmp_path / "clean")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == \
           {p.name: p.read_bytes() for p in (tmp_path / "clean").iterdir()}


def test_a_folder_whose_file_system_cannot_lock_is_written_with_a_warning(corpus, tmp_path):
    # A folder's writer lock (core/folder_writer_lock.h) on a file system without locks (an NFS
    # mount without its lock service; here flock(2) failing with ENOLCK through fixtures/
    # no_flock.c) held nothing and said nothing; checkpoint roots warned. Now every writer of a
    # folder warns, naming it, and does its work.
    unlocked = {**os.environ, "LD_PRELOAD": str(fixture_library("no_flock", tmp_path))}
    train(corpus, tmp_path, "run", "--set", "train.steps=1", "--save", tmp_path / "ckpt")

    def warned(folder, *command):
        result = subprocess.run([str(TRIPOD), *map(str, command)], capture_output=True, text=True, timeout=120,
                                env=unlocked)
        assert result.returncode == 0, result.stdout + result.stderr
        assert (f"tripod: warning: {folder}: its file system does not lock files ({os.strerror(errno.ENOLCK)}), "
                "so a second writer into this folder at the same time would not be refused") in result.stderr, \
            result.stderr

    warned(tmp_path / "hf", "export", "hf", "--checkpoint", tmp_path / "ckpt", "--out", tmp_path / "hf")
    assert (tmp_path / "hf" / "config.json").is_file()
    warned(tmp_path / "data", "data", "synthetic", "--out", tmp_path / "data", "--vocab-size", 16, "--order", 1, "--tokens", 5000)
    assert (tmp_path / "data" / "meta.json").is_file()


def test_data_prepare_and_inspect(tmp_path):
    text = tmp_path / "text.txt"
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "theta", "kappa"]
    text.write_text("\n".join(" ".join(words[(i * j) % 8] for j in range(12)) for i in range(3000)))
    tripod("data", "prepare", "--input", text, "--out", tmp_path / "prep", "--vocab-size", 300)
    meta = json.loads((tmp_path / "prep" / "meta.json").read_text())
    assert meta["vocab_size"] == 300
    assert "checksum" in tripod("data", "inspect", tmp_path / "prep").stdout.lower()
    # A re-preparation that fails (a vocabulary too small for the text's characters) leaves the
    # dataset as it was: it used to delete meta.json before training the tokenizer.
    before = {p.name: p.read_bytes() for p in (tmp_path / "prep").iterdir()}
    text.write_text(text.read_text() + "".join(chr(0x4e00 + i) for i in range(100)))
    expect_error("data", "prepare", "--input", text, "--out", tmp_path / "prep", "--vocab-size", 300,
                 contains="holds more distinct characters than --vocab-size 300")
    assert {p.name: p.read_bytes() for p in (tmp_path / "prep").iterdir()} == before
    assert "checksum" in tripod("data", "inspect", tmp_path / "prep").stdout.lower()
    # A failed first preparation leaves no empty folder behind (it did).
    expect_error("data", "prepare", "--input", text, "--out", tmp_path / "fresh", "--vocab-size", 300,
                 contains="holds more distinct characters than --vocab-size 300")
    assert not (tmp_path / "fresh").exists()


def test_data_prepare_refuses_text_that_is_not_utf8(tmp_path):
    # Latin-1 bytes became U+FFFD in the tokenizer and the shards, with exit 0: the text was changed.
    text = tmp_path / "latin1.txt"
    text.write_bytes(("alpha beta gamma delta\n" * 200).encode() + "caf\u00e9 au lait\n".encode("latin-1"))
    expect_error("data", "prepare", "--input", text, "--out", tmp_path / "prep", "--vocab-size", 300,
                 contains=f"input text \"{text}\" is not UTF-8 at line 201, column 4 (byte offset 4603, 0xE9)")
    assert not (tmp_path / "prep").exists()


def test_a_vocabulary_too_small_for_the_texts_characters_says_how_large_it_must_be(tmp_path):
    # SentencePiece's advice was "decrease character_coverage with --character_coverage option",
    # an option data prepare does not have (it keeps every character, for exact round trips).
    text = tmp_path / "cjk.txt"
    characters = [chr(0x4E00 + i) for i in range(600)]
    text.write_text("\n".join("".join(characters[(7 * line + 13 * i) % 600] for i in range(40))
                              for line in range(600)) + "\n")
    result = expect_error("data", "prepare", "--input", text, "--out", tmp_path / "d", "--vocab-size", 400,
                          contains="give --vocab-size 857 or more")
    assert "character_coverage" not in result.stderr, result.stderr


def test_data_prepare_refuses_sentencepieces_mark_for_a_space(tmp_path):
    # U+2581 is how SentencePiece writes a space inside its pieces: "t\u2581he" was tokenized as
    # "t he" and decoded so, exit 0, the text changed (51,151 bytes back from 53,453).
    text = tmp_path / "marker.txt"
    text.write_text("alpha beta gamma delta\n" * 200 + "t\u2581he end\n")
    expect_error("data", "prepare", "--input", text, "--out", tmp_path / "prep", "--vocab-size", 300,
                 contains=f"input text \"{text}\" holds U+2581 (\u2581, SentencePiece's mark for a space) at "
                          "line 201, column 2 (byte offset 4601, 0xE2)")
    assert not (tmp_path / "prep").exists()


DATA_COMMANDS = pytest.mark.parametrize("command", [
    ["data", "prepare", "--input", "{tmp}/text.txt", "--vocab-size", "300"],
    ["data", "synthetic", "--vocab-size", "16", "--order", "1", "--tokens", "1000"],
], ids=["prepare", "synthetic"])


@DATA_COMMANDS
def test_data_is_not_written_into_a_folder_of_other_files(tmp_path, command):
    # `--out .` in a project folder wrote shards, meta.json and tokenizer.* beside (and over) its files.
    (tmp_path / "text.txt").write_text("\n".join(f"line {i} of some words to tokenise" for i in range(500)))
    command = [part.format(tmp=tmp_path) for part in command]
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "tokenizer.model").write_text("my own")
    (folder / "notes.txt").write_text("keep me")
    expect_error(*command, "--out", folder, contains=f"--out {folder} holds files that are not a dataset's (notes.txt")
    assert (folder / "tokenizer.model").read_text() == "my own" and len(list(folder.iterdir())) == 2
    expect_error(*command, "--out", tmp_path / "text.txt", contains="is a file, not a folder")
    # A dataset's own folder is rewritten, as before.
    tripod(*command, "--out", tmp_path / "ds")
    tripod(*command, "--out", tmp_path / "ds")
    assert "checksum" in tripod("data", "inspect", tmp_path / "ds").stdout.lower()


@DATA_COMMANDS
def test_a_second_writer_of_a_dataset_folder_is_refused_and_changes_nothing(tmp_path, command):
    # Two `data prepare` into one --out (the step every task of an srun job script runs, or the
    # command started again) deleted each other's files: one said "prepared ... -> DIR", exit 0,
    # and DIR was gone, removed by the other's cleanup.
    (tmp_path / "text.txt").write_text("\n".join(f"line {i} of some words to tokenise" for i in range(500)))
    command = [part.format(tmp=tmp_path) for part in command]
    folder = tmp_path / "ds"
    tripod(*command, "--out", folder)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    with open(folder / ".lock", "a") as writer:  # what a writer at work holds
        fcntl.flock(writer, fcntl.LOCK_EX | fcntl.LOCK_NB)
        expect_error(*command, "--out", folder, contains=f"{' '.join(command[:2])} --out {folder}: another `tripod "
                     "data prepare` or `data synthetic` is writing the dataset in this folder, and two at once "
                     "delete and replace each other's files; wait for it to end, or give another --out")
        assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    tripod(*command, "--out", folder)  # free again once that writer has ended
    assert "checksum" in tripod("data", "inspect", folder).stdout.lower()


def test_a_rewritten_dataset_folder_keeps_nothing_of_the_previous_dataset(tmp_path):
    # A smaller corpus written over a larger one left its extra shards, and a synthetic corpus written
    # over a prepared one its tokenizer.model (which `export hf` then shipped with the model).
    text = tmp_path / "text.txt"
    text.write_text("\n".join(f"line {i} of some words to tokenise" for i in range(2000)))
    folder = tmp_path / "ds"
    tripod("data", "prepare", "--input", text, "--out", folder, "--vocab-size", 300, "--shard-tokens", 2000)
    assert (folder / "tokenizer.model").exists() and (folder / "train_000003.bin").exists()
    tripod("data", "synthetic", "--out", folder, "--vocab-size", 64, "--order", 1, "--tokens", 3000,
           "--shard-tokens", 2000)
    meta = json.loads((folder / "meta.json").read_text())
    listed = {name for shards in meta["splits"].values() for name in shards}
    assert sorted(p.name for p in folder.iterdir()) == sorted(listed | {"meta.json", ".lock"})
    tripod("data", "prepare", "--input", text, "--out", folder, "--vocab-size", 300)
    assert sorted(p.name for p in folder.iterdir()) == [
        ".lock", "meta.json", "tokenizer.model", "tokenizer.vocab", "train_000000.bin", "val_000000.bin"]


def test_export_ships_only_the_tokenizer_of_the_runs_corpus(tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("\n".join(f"line {i} of some words to tokenise" for i in range(2000)))
    data, ckpt, out = tmp_path / "data", tmp_path / "ckpt", tmp_path / "hf"
    tripod("data", "prepare", "--input", text, "--out", data, "--vocab-size", 300)
    tripod("train", "--config", "tiny", "--set", f"data.dir={data}", *SMALL, "--set", "train.steps=2", "--save", ckpt)
    result = tripod("export", "hf", "--checkpoint", ckpt, "--out", out)
    assert "config.json and tokenizer.model from" in result.stdout, result.stdout
    assert (out / "tokenizer.model").read_bytes() == (data / "tokenizer.model").read_bytes()
    # Another corpus written into the run's data folder: its tokenizer is not this model's, and the
    # previous export's is removed. (Its vocabulary is the same size: only the tokens tell.)
    text.write_text("\n".join(f"another text, row {i}, other words" for i in range(2000)))
    tripod("data", "prepare", "--input", text, "--out", data, "--vocab-size", 300)
    result = tripod("export", "hf", "--checkpoint", ckpt, "--out", out)
    assert f"tripod: warning: no tokenizer.model written: {data} holds another corpus now" in result.stderr, \
        result.stderr
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors"]
    # A synthetic corpus has no tokenizer; a tokenizer.model lying in its folder (copied there) was
    # shipped as the model's.
    synthetic, ckpt2 = tmp_path / "synthetic", tmp_path / "ckpt2"
    tripod("data", "synthetic", "--out", synthetic, "--vocab-size", 300, "--order", 1, "--tokens", 20000)
    shutil.copy(data / "tokenizer.model", synthetic / "tokenizer.model")
    tripod("train", "--config", "tiny", "--set", f"data.dir={synthetic}", *SMALL, "--set", "train.steps=2",
           "--save", ckpt2)
    result = tripod("export", "hf", "--checkpoint", ckpt2, "--out", out)
    assert f"no tokenizer.model: the run's data ({synthetic}) has no tokenizer" in result.stdout, result.stdout
    assert not (out / "tokenizer.model").exists()


def test_inspect_holds_meta_json_against_the_shards_and_tokenizer(corpus, tmp_path):
    # Each edit passed `data inspect` ("checksums OK") and failed only when training (or never).
    assert "checksum" in tripod("data", "inspect", corpus).stdout.lower()
    text = tmp_path / "text.txt"
    text.write_text("\n".join(f"line {i} of some words to tokenise" for i in range(2000)))
    tripod("data", "prepare", "--input", text, "--out", tmp_path / "a", "--vocab-size", 300)
    tripod("data", "prepare", "--input", text, "--out", tmp_path / "b", "--vocab-size", 320)
    for name, edit, message in (
            ("vocab", lambda m: {**m, "vocab_size": 100}, "has vocab_size 300 but"),
            ("count", lambda m: {**m, "train_tokens": 99999999}, "train_tokens is 99999999 but the split's shards hold"),
            ("tokenizer", None, "has 320 pieces but")):
        edited = tmp_path / name
        shutil.copytree(tmp_path / "a", edited)
        if edit:
            meta = json.loads((edited / "meta.json").read_text())
            (edited / "meta.json").write_text(json.dumps(edit(meta)))
        else:
            shutil.copy(tmp_path / "b" / "tokenizer.model", edited / "tokenizer.model")
        expect_error("data", "inspect", edited, contains=message)


def test_a_folder_or_file_where_the_other_is_expected_is_named(corpus, tmp_path):
    # "data directory afile does not exist"; a shard replaced by a folder was "4096 bytes ... (truncated)".
    a_file = tmp_path / "afile"
    a_file.write_text("x")
    expect_error("data", "inspect", a_file, contains=f'data directory "{a_file}" is a file, not a prepared directory')
    data = tmp_path / "data"
    shutil.copytree(corpus, data)
    shard = sorted(data.glob("train_*.bin"))[0]
    shard.unlink()
    shard.mkdir()
    expect_error("data", "inspect", data, contains=f'token shard "{shard}" is not a regular file')
    # meta.json as a folder was "internal error: basic_filebuf::underflow error reading the file: Is
    # a directory" (exit 2, no path), and as a named pipe the run hung.
    meta = tmp_path / "meta_folder"
    shutil.copytree(corpus, meta)
    (meta / "meta.json").unlink()
    (meta / "meta.json").mkdir()
    expect_error("data", "inspect", meta, contains=f'"{meta / "meta.json"}" is not a regular file')
    shutil.rmtree(meta / "meta.json")
    os.mkfifo(meta / "meta.json")
    expect_error("train", "--config", "tiny", "--set", f"data.dir={meta}",
                 contains=f'"{meta / "meta.json"}" is not a regular file')
    ckpt = tmp_path / "ckpt"
    train(corpus, tmp_path, "saved", "--set", "train.steps=2", "--save", ckpt)
    ckpt_shard = sorted(ckpt.glob("step-*/shard-*.bin"))[0]
    ckpt_shard.unlink()
    ckpt_shard.mkdir()
    result = tripod("ckpt", "verify", ckpt, check=False)
    assert result.returncode != 0 and f"checkpoint shard {ckpt_shard} is not a regular file" in result.stdout + result.stderr


# ---- bad input: a clear error naming the problem, exit code 1 ----

def test_unknown_config_key(corpus):
    expect_error("train", "--config", "tiny", "--set", "train.stepz=3", contains="train.stepz")


def test_heads_not_dividing_d_model(corpus):
    expect_error("train", "--config", "tiny", "--set", f"data.dir={corpus}", "--set", "model.n_head=3",
                 contains="does not divide")


@pytest.mark.parametrize("setting, message", [
    # integers past int64 were wrapped: "must be >= 1" for 2^63, "only -1 layers" for 2^64 - 1
    ("train.steps=9223372036854775808", "config key 'train.steps' is 9223372036854775808, past the largest integer"),
    ("model.n_layer=18446744073709551615", "config key 'model.n_layer' is 18446744073709551615, past the largest"),
    # 2^32 + 2 micro-batches of a 2^32 + 2 batch passed as 2, then ran out of memory (internal error)
    ("train.micro_batches=4294967298", "train.micro_batches must be in [1, 2^20] (got 4294967298)"),
    # with the presets' vocab_size 0 (from the data) the model was not checked until the layout was:
    # "tensor parallel size 1 exceeds model.n_head = 0" on one process
    ("model.n_head=0", "model.n_head must be >= 1 (got 0)"),
    ("model.n_layer=0", "model.n_layer must be >= 1 (got 0)"),
])
def test_config_values_are_checked_as_given(setting, message):
    expect_error("train", "--config", "tiny", "--set", "train.batch_size=4294967298", "--set", setting,
                 contains=message)


def test_context_shorter_than_sequence(corpus):
    expect_error("train", "--config", "tiny", "--set", "model.context=8", contains="model.context")


@pytest.mark.parametrize("option, message", [
    (["--bucket-mb", "nan"], "--bucket-mb) must be a number of MiB in (0, 1048576] (got nan)"),
    (["--bucket-mb", "-1"], "--bucket-mb) must be a number of MiB in (0, 1048576] (got -1)"),
    (["--comm-timeout", "nan"], "--comm-timeout: nan s is not a number"),
    (["--comm-timeout", "-1"], "--comm-timeout: -1 s is out of range"),
    (["--mpi-chunk-mb", "inf"], "--mpi-chunk-mb: inf is out of range"),
    (["--mpi-chunk-mb", "1e-7"], "--mpi-chunk-mb: 1e-07 MiB is less than a byte"),  # it meant whole messages
    (["--mpi-progress-us", "-5"], "--mpi-progress-us: -5 is negative"),
    (["--zero3-prefetch", "-1"], "--zero3-prefetch) must be 0-64 buckets (got -1)"),
    (["--receives-ahead", "-5"], "--receives-ahead) must be 0-1024 (got -5)"),
    (["--exit-after", "-1"], "--exit-after: -1 is negative"),
    (["--pipeline-split", "2,2"], "pipeline split lists 2 layer counts but the pipeline has 1 chunks"),
    (["--pipeline-trace", "trace.json"], "--pipeline-trace trace.json: this layout has no pipeline to trace (pp = 1"),
    # Found after the whole run, on rank 0 alone (a pipelined job trained to its end, then failed).
    (["--pipeline-trace", "/nonexistent/dir/t.json"], "--pipeline-trace /nonexistent/dir/t.json: the folder"),
    # 0 doubled as "not given": --dp 0 trained with the derived size, --microbatches 0 with the config's.
    (["--dp", "0"], "--dp: 0 is not a finite number > 0"),
    (["--microbatches", "0"], "--microbatches: 0 is not a finite number > 0"),
    (["--virtual-stages", "0"], "virtual stages (--virtual-stages) must be >= 1 (got 0)"),
    (["--set", "train.micro_batches=-2"], "train.micro_batches must be in [1, 2^20] (got -2)"),
])
def test_options_one_process_does_not_use_are_still_checked(corpus, option, message):
    # One process trains without a communicator, buckets or a pipeline; before, these ran silently.
    expect_error("train", "--config", "tiny", "--set", f"data.dir={corpus}", *SMALL, "--set", "train.steps=1",
                 *option, contains=message)


def test_unwritable_metrics_paths_are_errors_naming_them(corpus, tmp_path):
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    base = ["train", "--config", "tiny", "--set", f"data.dir={corpus}", *SMALL, "--set", "train.steps=1"]
    expect_error(*base, "--set", f"train.metrics={tmp_path}", contains=f"cannot write metrics file {tmp_path} "
                 "(train.metrics): Is a directory")
    # A filesystem exception was an "internal error" with exit 2, then "filesystem error: cannot
    # create directories: Not a directory [FILE]", naming neither the metrics file nor the key.
    expect_error(*base, "--set", f"train.metrics={a_file}/m.jsonl",
                 contains=f"cannot write metrics file {a_file}/m.jsonl (train.metrics): its folder {a_file} cannot be "
                          "made: Not a directory")
    assert a_file.read_text() == "x"


@pytest.mark.parametrize("command", [
    ["bench", "comm", "-n", "1", "-w", "0", "-b", "1K", "-e", "1K", "-J"],
    ["bench", "kernel-rate", "--tokens", "8", "--channels", "8", "--vocab", "8", "--repeat", "1", "--json"],
    ["schedule", "--pp", "2", "--microbatches", "2", "--json"],
    ["conform", "--steps", "1", "--layouts", "tp1-pp1-dp1-z0-mb1", "--junit"],
    ["check-backend", "--json"],
    ["import", "nccl-tests", __file__, "--out"],  # failed after reading the input, as "nothing written"
])
def test_a_results_file_that_cannot_be_written_fails_before_the_work(command, tmp_path):
    # `bench comm -J` into a missing folder (or onto a folder) exited 0 having written nothing.
    expect_error(*command, tmp_path / "missing" / "r.json", contains=f"the folder {tmp_path / 'missing'} does not exist")
    expect_error(*command, tmp_path, contains=f"{tmp_path}: is a directory, not a file name")


@pytest.mark.parametrize("sizes, message", [
    (["-b", "1K", "-e", "99999999999G"], "size '99999999999G' is more than 2^62 bytes"),  # was -e -9223372036854775808
    (["-b", "inf", "-e", "1K"], "size 'inf' is more than 2^62 bytes"),
    (["-b", "nan", "-e", "1K"], "bad size 'nan'"),
    (["-b", "4K", "-e", "1K"], "-b 4096 is larger than -e 1024"),
])
def test_bench_comm_sizes_are_checked(sizes, message):
    expect_error("bench", "comm", "-n", "1", "-w", "0", *sizes, contains=message)


@pytest.mark.parametrize("command, message", [
    (["golden", "--steps", "0"], "--steps: 0 is not a finite number > 0"),  # was CLI11's "not in range 0.000000 to 1.79769e+308"
    (["bench", "gemm-rate", "--sizes", "32", "--peak-tflops", "nan"], "--peak-tflops: nan is not a finite number >= 0"),
    (["bench", "kernel-rate", "--min-time-ms", "nan"], "--min-time-ms: nan is not a finite number >= 0"),
    # A region is cut at its call cap: --min-time-ms 1e12 ran short regions under a header saying 1e12 ms.
    (["bench", "kernel-rate", "--min-time-ms", "1e12"], "kernel-rate: --min-time-ms must be 0 to 60000"),
    (["bench", "gemm-rate", "--min-time-ms", "70000"], "gemm-rate: --min-time-ms must be 0 to 60000"),
    (["launch", "--restart-delay", "inf", "--", "false"], "--restart-delay: inf is not a finite number >= 0"),
    (["scale", "fit", "nowhere", "--bootstrap", "-5"], "--bootstrap: -5 is not a finite number >= 0"),
    # bench gemm built a [1024, -1] tensor, and took --batch -1 for "the preset's".
    (["bench", "gemm", "-c", "tiny", "--set", "model.d_model=-1"], "model.d_model must be >= 1 (got -1)"),
    (["bench", "gemm", "-c", "tiny", "--batch", "-1"], "--batch, --seq-len and --stream-mib must be >= 0"),
    (["bench", "gemm", "-c", "tiny", "--seq-len", "100000"], "--seq-len 100000 is longer than the position table"),
    # Messages that listed a choice the command then refused (tf32 for conform, bf16 for check-backend).
    (["conform", "--dtype", "fp16"], "conform --dtype: fp64, fp32 or bf16-mixed, not 'fp16'"),
    (["conform", "--layouts", "tp1-pp1-dp1-z0-mb1", "tp1-pp1-dp1-z0-mb1"], "--layouts lists tp1-pp1-dp1-z0-mb1 twice"),
    (["check-backend", "--dtype", ""], "--dtype: an empty value"),
    (["check-backend", "--dtype", "fp32", "fp32"], "--dtype lists fp32 twice"),  # ran every case twice
    # Segmentation faults (a median of no steps), and a peak that fell back to the nominal one.
    (["bench", "train", "-c", "tiny", "--steps", "0"], "--steps: 0 is not a finite number > 0"),
    (["bench", "train", "-c", "tiny", "--gemm-size", "0"], "--gemm-size: 0 is not a finite number > 0"),
    (["bench", "layouts", "-c", "tiny", "--steps", "-1"], "--steps: -1 is not a finite number > 0"),
    (["bench", "layouts", "-c", "tiny", "--rounds", "0"], "--rounds: 0 is not a finite number > 0"),
    (["bench", "layouts", "-c", "tiny", "--peak-tflops", "nan"], "--peak-tflops: nan is not a finite number >= 0"),
    (["bench", "overlap", "-c", "tiny", "--repeats", "0"], "--repeats: 0 is not a finite number > 0"),
    # bench overlap timed nothing with exit 0; bench layouts ran a vocabulary of 0 (random tokens in
    # [0, 0)); the others failed naming the config key they set, not the option typed.
    (["bench", "overlap", "-c", "tiny", "--batch", "0"], "--batch: 0 is not a finite number > 0"),
    (["bench", "overlap", "-c", "tiny", "--seq-len", "0"], "--seq-len: 0 is not a finite number > 0"),
    (["bench", "overlap", "-c", "tiny", "--vocab", "1"], "bench overlap: --batch and --seq-len must be >= 1 and --vocab >= 2"),
    (["bench", "layouts", "-c", "tiny", "--vocab", "0"], "--vocab: 0 is not a finite number > 0"),
    (["bench", "layouts", "-c", "tiny", "--vocab", "1"], "bench layouts: --batch and --seq-len must be >= 1 and --vocab >= 2"),
    (["bench", "layouts", "-c", "tiny", "--batch", "0"], "--batch: 0 is not a finite number > 0"),
    (["bench", "train", "-c", "tiny", "--batch", "-3"], "--batch: -3 is not a finite number > 0"),
    (["bench", "train", "-c", "tiny", "--seq-len", "0"], "--seq-len: 0 is not a finite number > 0"),
    (["bench", "ckpt", "-c", "tiny", "--batch", "0"], "--batch: 0 is not a finite number > 0"),
    (["bench", "ckpt", "-c", "tiny", "--repeats", "0"], "--repeats: 0 is not a finite number > 0"),
    # The bench suite found these only after its GEMM and kernel sweeps (and --ranks -1 ran as the default).
    (["bench", "--quick", "--out", "unused", "--mpirun", "/nonexistent/mpirun"],
     "--mpirun /nonexistent/mpirun is not an executable file"),
    (["bench", "--quick", "--out", "unused", "--backend", "bogus"], "--backend: unknown backend 'bogus'"),
    (["bench", "--quick", "--out", "unused", "--ranks", "-1"], "--ranks must be 2-1024 (got -1)"),
    (["launch", "--checkpoints", "/etc/passwd", "--", "true"], "--checkpoints /etc/passwd is a file, not a"),
    (["bench", "pipeline", "--microbatches", "2"], "run it on 2 or more ranks"),  # printed "within 20%: NO"
    (["launch", "--events", "/nonexistent/e.jsonl", "--", "true"], "cannot write /nonexistent/e.jsonl: No such file"),
    (["data", "synthetic", "--out", "unused", "--vocab-size", "16", "--order", "1", "--tokens", "1000",
      "--sharpness", "1e308"], "sharpness (--sharpness) must be in [0, 1e6] (got 1e+308)"),  # was "P = -nan"
    (["data", "synthetic", "--out", "unused", "--vocab-size", "16", "--order", "1", "--tokens", "1000",
      "--seed", "-1"], "--seed: -1 is not a finite number >= 0"),  # wrapped to 2^64 - 1
    # Wrote a corpus without training tokens, with exit 0.
    (["data", "synthetic", "--out", "unused", "--vocab-size", "16", "--order", "1", "--tokens", "1000",
      "--val-fraction", "0.9999"], "val_fraction 0.9999 of 1000 tokens leaves 0 for training"),
    # Made a corpus without validation tokens, silently ("val tokens 0").
    (["data", "synthetic", "--out", "unused", "--vocab-size", "16", "--order", "1", "--tokens", "1000",
      "--val-fraction", "1e-300"], "val_fraction 1e-300 of 1000 tokens gives 0 validation tokens (at least 2"),
])
def test_numeric_options_out_of_range_are_named(command, message):
    # Each of these ran (a NaN peak fell back to the device table; an infinite delay restarted at once).
    expect_error(*command, contains=message)


def test_a_results_file_whose_bytes_are_lost_is_an_error():
    # /dev/full opens but refuses every byte: the write itself is checked, not only the open.
    expect_error("bench", "comm", "-n", "1", "-w", "0", "-b", "1K", "-e", "1K", "-J", "/dev/full",
                 contains="writing the results file (-J) /dev/full failed: No space left on device")


def test_a_results_file_that_fails_midway_leaves_the_previous_one_whole(tmp_path):
    # A results file was truncated, then written in place: a full disk (here: a file-size limit, so
    # that the write fails with EFBIG), a kill or a second writer mid-write left half a JSON where
    # the previous results were. It is written beside and renamed over the old one now.
    previous = tmp_path / "s.json"
    previous.write_text('{"previous": true}\n')
    require_tripod()
    result = subprocess.run([str(TRIPOD), "schedule", "--pp", "4", "--microbatches", "8", "--json", str(previous)],
                            capture_output=True, text=True, timeout=60, preexec_fn=file_size_limit(2048))
    assert result.returncode == 1 and f"the simulated timeline (--json) {previous} failed: File too large" in \
        result.stderr, result.stderr
    assert previous.read_text() == '{"previous": true}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["s.json"]  # no staging file left
    tripod("schedule", "--pp", "4", "--microbatches", "8", "--json", previous)  # without the limit: replaced whole
    assert json.loads(previous.read_text())["stages"] == 4 and [p.name for p in tmp_path.iterdir()] == ["s.json"]


def test_metrics_whose_bytes_are_lost_end_the_run(corpus):
    # Only the open was checked: metrics onto a full disk were lost with exit 0.
    expect_error("train", "--config", "tiny", "--set", f"data.dir={corpus}", *SMALL, "--set", "train.metrics=/dev/full",
                 contains="cannot write metrics file /dev/full (train.metrics) after step 0: No space left on device")


@pytest.mark.parametrize("args", [
    ["train", "--config", "tiny", "--save", ""],  # trained without a checkpoint
    ["train", "--config", "tiny", "--resume", ""],  # started from step 0
    ["train", "--config", ""],  # trained the built-in defaults
    ["schedule", "--pp", "2", "--microbatches", "2", "--json", ""],  # wrote nothing
])
def test_an_empty_option_value_is_refused_not_taken_for_absent(args):
    # An unset shell variable ("--save $DIR") must not quietly mean "not given".
    expect_error(*args, contains=f"{args[args.index('') - 1]}: an empty value")


def test_a_huge_omp_num_threads_is_refused_not_a_crash(corpus):
    # OMP_NUM_THREADS=100000 crashed in the OpenMP runtime (a segfault, no message).
    result = subprocess.run([str(TRIPOD), "train", "--config", "tiny", "--set", f"data.dir={corpus}", *SMALL],
                            capture_output=True, text=True, timeout=120, env={**os.environ, "OMP_NUM_THREADS": "100000"})
    assert result.returncode == 1, result.stderr
    assert "OMP_NUM_THREADS=100000 asks for 100000 threads, and this process may use" in result.stderr, result.stderr


def test_missing_data_directory(tmp_path):
    expect_error("train", "--config", "tiny", "--set", f"data.dir={tmp_path / 'nowhere'}", contains="nowhere")


def test_vocab_mismatch(corpus):
    expect_error("train", "--config", "tiny", "--set", f"data.dir={corpus}", "--set", "model.vocab_size=10",
                 contains="vocabulary mismatch")


def shard_copy(corpus, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(corpus, copy)
    return copy, copy / "train_000000.bin"


def test_truncated_shard(corpus, tmp_path):
    copy, shard = shard_copy(corpus, tmp_path)
    shard.write_bytes(shard.read_bytes()[:-100])
    expect_error("train", "--config", "tiny", "--set", f"data.dir={copy}", contains="truncated")


def test_shard_checksum_failure(corpus, tmp_path):
    copy, shard = shard_copy(corpus, tmp_path)
    data = bytearray(shard.read_bytes())
    data[200] ^= 0x01
    shard.write_bytes(bytes(data))
    result = expect_error("train", "--config", "tiny", "--set", f"data.dir={copy}", contains="checksum")
    assert "train_000000.bin" in result.stderr


def test_corrupt_checkpoint_is_refused(corpus, tmp_path):
    ckpt = tmp_path / "ckpt"
    train(corpus, tmp_path, "run", "--set", "train.steps=2", "--save", ckpt)
    shard = ckpt / "step-00000002" / "shard-00000.bin"
    data = bytearray(shard.read_bytes())
    data[-5] ^= 0xFF
    shard.write_bytes(bytes(data))
    result = expect_error("train", "--config", "tiny", "--set", f"data.dir={corpus}", *SMALL,
                          "--set", "train.steps=2", "--resume", ckpt, contains="shard-00000.bin")
    assert "damaged in tensor" in result.stderr


def test_nan_loss_stops_with_step(corpus, tmp_path):
    result = expect_error("train", "--config", "tiny", "--set", f"data.dir={corpus}", *SMALL,
                          "--set", "train.steps=20", "--set", "optim.lr=1e30", "--set", "optim.min_lr=1e30",
                          "--set", "optim.warmup_steps=0", "--set", "optim.grad_clip=0", contains="diverged")
    assert "step" in result.stderr


def test_zero_eval_batches_turn_evaluation_off(corpus, tmp_path):
    # It once reported "val loss 0.0000": the mean over no batches.
    result = tripod("train", "--config", "tiny", "--set", f"data.dir={corpus}", *SMALL, "--set", "train.steps=2",
                    "--set", "train.eval_batches=0", "--set", f"train.metrics={tmp_path / 'm.jsonl'}")
    assert "| val loss" not in result.stdout and ", val loss" not in result.stdout, result.stdout
    assert "(train.eval_batches = 0: no eval loss)" in result.stdout, result.stdout
    records = [json.loads(line) for line in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "loss" in r] == [0, 1] and not any("val_loss" in r for r in records)


def test_the_held_out_windows_do_not_depend_on_the_training_seed(corpus, tmp_path):
    # A sweep compares its seeds by eval loss: keyed by train.seed, each seed was measured on a
    # different subset of the held-out split. Two runs continue one checkpoint with different
    # seeds and an update too small to move a weight (lr 1e-30): the same weights, so the same
    # windows must give the same val loss, to the bit.
    tripod("train", "--config", "tiny", "--set", f"data.dir={corpus}", *SMALL, "--set", "train.steps=2",
           "--set", "train.seed=1", "--save", tmp_path / "ck")
    val_losses = []
    for seed in (1, 2):
        metrics = tmp_path / f"seed{seed}.jsonl"
        tripod("train", "--config", "tiny", "--set", f"data.dir={corpus}", *SMALL, "--set", "train.steps=3",
               "--set", f"train.seed={seed}", "--set", "optim.lr=1e-30", "--set", "optim.min_lr=0",
               "--set", f"train.metrics={metrics}", "--resume", tmp_path / "ck" / "step-00000002",
               "--allow-resume-changes")
        records = [json.loads(line) for line in metrics.read_text().splitlines()]
        val_losses.append(next(r["val_loss"] for r in records if "val_loss" in r))
    assert val_losses[0] == val_losses[1], val_losses


@pytest.mark.parametrize("args, word, command, names", [
    (["ckpt", "convert", "a", "b"], "convert", "tripod ckpt", "one of verify, info, upgrade"),
    (["data", "prepar"], "prepar", "tripod data", "one of prepare, synthetic, inspect"),
    (["trian"], "trian", "tripod", "one of train, data, export, ckpt, bench"),
    # Commands that also run without a subcommand: CLI11 said "The following argument was not expected".
    (["bench", "comms"], "comms", "tripod bench", "one of train, gemm, kernels, overlap, comm"),
    (["golden", "chek", "a", "b"], "chek", "tripod golden", "one of run, check"),
])
def test_a_mistyped_command_is_named(args, word, command, names):
    # CLI11 said only "A subcommand is required", as if none had been typed.
    require_tripod()
    result = subprocess.run([str(TRIPOD), *args], capture_output=True, text=True, timeout=30)
    assert result.returncode != 0
    assert f"tripod: error: '{word}' is not a command of `{command}`: {names}" in result.stderr, result.stderr


def test_version_names_the_commit_and_the_libraries():
    # There was no --version: a benchmark or a conform result could not say which build made it.
    require_tripod()
    result = subprocess.run([str(TRIPOD), "--version"], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("tripod 0.") and "-march=" in lines[0], result.stdout
    assert "OpenBLAS" in result.stdout and "Open MPI" in result.stdout, result.stdout
    source = os.environ.get("TRIPOD_SOURCE_DIR")
    git = shutil.which("git")
    if source and git and (Path(source) / ".git").exists():
        head = subprocess.run([git, "-C", source, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True)
        # the commit the binary was built from: HEAD, or the binary is older than HEAD (rebuild it)
        assert f"(commit {head.stdout.strip()}" in lines[0], (lines[0], head.stdout)


def version_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "TRIPOD_SET_GOMP_SPINCOUNT")}
    return {**env, **extra}


def test_openmp_threads_spin_briefly_unless_the_user_chose():
    # libgomp's default spinning made a step 3-5x slower on a machine whose cores something else
    # used (busy loops beside it): tripod executes itself again with GOMP_SPINCOUNT=10000, the same
    # process, before the runtime starts; a setting the user made stays.
    require_tripod()
    def version(env, *prefix):
        result = subprocess.run([*prefix, str(TRIPOD), "--version"], capture_output=True, text=True, timeout=30, env=env)
        assert result.returncode == 0, result.stderr
        return result.stdout.splitlines()[-1]
    assert version(version_env()).endswith("idle threads: spins 10000 polls, then sleeps (GOMP_SPINCOUNT, set by "
                                           "tripod; OMP_WAIT_POLICY or GOMP_SPINCOUNT choose)")
    assert version(version_env(OMP_WAIT_POLICY="active")).endswith("idle threads: active (OMP_WAIT_POLICY)")
    assert version(version_env(GOMP_SPINCOUNT="1000")).endswith("spins 1000 polls, then sleeps (GOMP_SPINCOUNT)")
    # through the dynamic loader (the GPU bundle's way of starting it) it runs as it is, unexecuted
    loader = next((p for p in ("/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1") if Path(p).exists()), None)
    if loader:
        assert version(version_env(), loader).endswith("started through a loader")
    # the arguments, errors and exit status pass through the re-execution
    result = subprocess.run([str(TRIPOD), "train", "--config", "nosuch"], capture_output=True, text=True, timeout=30,
                            env=version_env())
    assert result.returncode == 1 and "nosuch" in result.stderr, result.stderr


# OpenBLAS cores whose GEMM kernels use no AVX2 (OpenBLAS 0.3's names).
PRE_AVX2_CORES = {"katmai", "coppermine", "northwood", "prescott", "banias", "atom", "core2", "penryn", "dunnington",
                  "nehalem", "sandybridge", "athlon", "opteron", "opteron_sse3", "barcelona", "nano", "bobcat",
                  "bulldozer", "piledriver", "steamroller", "unknown"}


def test_openblas_runs_gemm_kernels_that_the_cpu_has():
    # Debian 12's OpenBLAS 0.3.21 took this project's VM's Emerald Rapids Xeon (family 6, model 207,
    # with AVX-512) for a "Prescott" and ran its SSE3 kernels: the CPU backend trained at half speed
    # without a word. tripod asks for the CPU's kernels where OpenBLAS fell back like that
    # (backend/cpu/blas_kernels.h); a choice the user made stays, and so does OpenBLAS's own pick
    # where tripod does not execute again (started through the dynamic loader).
    require_tripod()
    env = {k: v for k, v in version_env().items() if k not in ("OPENBLAS_CORETYPE", "TRIPOD_SET_OPENBLAS_CORETYPE")}
    def blas_line(env, *prefix):
        result = subprocess.run([*prefix, str(TRIPOD), "--version"], capture_output=True, text=True, timeout=30, env=env)
        assert result.returncode == 0, result.stderr
        return next(line for line in result.stdout.splitlines() if "OpenBLAS" in line)
    def core(line):
        return re.search(r" (\S+) MAX_THREADS=", line).group(1)
    flags = set(next((l.split(":", 1)[1].split() for l in Path("/proc/cpuinfo").read_text().splitlines()
                      if l.startswith("flags")), []))
    line = blas_line(env)
    if {"avx2", "fma"} <= flags:
        assert core(line).lower() not in PRE_AVX2_CORES, line
    if "kernels chosen by tripod" in line:
        assert re.search(r"this OpenBLAS took the CPU for a (\S+);", line).group(1).lower() in PRE_AVX2_CORES, line
    user = blas_line({**env, "OPENBLAS_CORETYPE": "Haswell"})
    assert core(user) == "Haswell" and "chosen by tripod" not in user, user
    loader = next((p for p in ("/lib64/ld-linux-x86-64.so.2",) if Path(p).exists()), None)
    if loader:
        assert "chosen by tripod" not in blas_line(env, loader)


def test_threads_beyond_the_cpus_do_not_raise_the_nominal_peak(corpus, tmp_path):
    # OMP_NUM_THREADS=1000 on 2 cores counted 1000 cores' FLOPs: the MFU printed 0.00%.
    cpus = len(os.sched_getaffinity(0))
    metrics = tmp_path / "m.jsonl"
    subprocess.run([str(TRIPOD), "train", "--config", "tiny", "--set", f"data.dir={corpus}", *SMALL,
                    "--set", "train.steps=1", "--set", f"train.metrics={metrics}"], check=True, capture_output=True,
                   timeout=120, env={**os.environ, "OMP_NUM_THREADS": str(8 * cpus)})
    start = json.loads(metrics.read_text().splitlines()[0])
    assert start["peak_source"].startswith(f"nominal CPU peak: {cpus} CPUs (fewer than the threads) x "), start


def test_a_synthetic_corpus_larger_than_the_free_disk_is_refused_before_writing(tmp_path):
    # 99999999999999 tokens (about 200 TB) wrote shards until stopped, leaving no dataset.
    expect_error("data", "synthetic", "--out", tmp_path / "big", "--vocab-size", 64, "--order", 1,
                 "--tokens", 99999999999999, contains="99999999999999 tokens need 200000 GB of shards, and ")
    assert not (tmp_path / "big").exists() or not any((tmp_path / "big").iterdir())


def test_bench_comm_buffers_beyond_the_free_memory_are_refused_before_allocating():
    # -b 20G -e 20G on 2 ranks was ended by the OOM killer with no message.
    expect_error("bench", "comm", "all_reduce", "-b", "16384G", "-e", "16384G", "-n", "1", "-w", "0",
                 contains="bench comm -e 17592186044416: each rank's buffers take 32768 GiB (send, receive, scratch)")


def test_data_prepare_refuses_training_text_as_held_out_text_and_names_vocab_limits(tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("In the beginning God created the heaven and the earth.\nAnd the earth was without form.\n")
    (tmp_path / "copy.txt").write_text(text.read_text())
    (tmp_path / "one.txt").write_text("a")
    # the training text as its own held-out text: every val loss measured on training data (exit 0)
    expect_error("data", "prepare", "--input", text, "--val-input", text, "--out", tmp_path / "a", "--vocab-size", 300,
                 contains="is the training text")
    expect_error("data", "prepare", "--input", text, "--val-input", tmp_path / "copy.txt", "--out", tmp_path / "b",
                 "--vocab-size", 300, contains="holds the same text as")
    # SentencePiece's "Internal: ./src/trainer_interface.cc(660) ... Vocabulary size too high"
    expect_error("data", "prepare", "--input", text, "--out", tmp_path / "c", "--vocab-size", 100000,
                 contains="its text supports at most --vocab-size")
    # "val_fraction 0.05 of 116 tokens leaves 1": no fraction is taken with --val-input
    expect_error("data", "prepare", "--input", tmp_path / "one.txt", "--val-input", text, "--out", tmp_path / "d",
                 "--vocab-size", 258, contains="the training text")
    assert not any((tmp_path / name).exists() for name in "abcd")


@pytest.mark.parametrize("splits, message", [
    ({"train": ["train_000000.bin"], "val": ["train_000000.bin"]},
     'is listed in split "train" and in split "val"'),
    ({"train": ["train_000000.bin", "train_000000.bin"]}, 'is listed twice in split "train"'),
])
def test_a_shard_in_two_splits_is_refused(corpus, tmp_path, splits, message):
    # A held-out split naming a training shard gave "val loss" on training data; inspect said OK.
    data = tmp_path / "data"
    shutil.copytree(corpus, data)
    meta = json.loads((data / "meta.json").read_text())
    meta["splits"] = splits
    meta.pop("train_tokens", None)
    meta.pop("val_tokens", None)
    (data / "meta.json").write_text(json.dumps(meta))
    expect_error("data", "inspect", data, contains=message)
    expect_error("train", "--config", "tiny", "--set", f"data.dir={data}", *SMALL, "--set", "train.steps=1",
                 "--set", "train.metrics=", contains=message)


def test_inspect_refuses_a_directory_without_training_tokens_and_prints_only_what_meta_holds(corpus, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(corpus, data)
    meta = json.loads((data / "meta.json").read_text())
    meta.pop("tokenizer", None)  # a synthetic corpus has none
    (data / "meta.json").write_text(json.dumps(meta))
    assert '"tokenizer": null' not in tripod("data", "inspect", data).stdout
    meta["splits"]["train"] = []
    meta.pop("train_tokens", None)
    (data / "meta.json").write_text(json.dumps(meta))
    expect_error("data", "inspect", data, contains="no training split")


def test_an_evaluation_past_the_held_out_windows_says_so(tmp_path):
    # 40 held-out tokens are 2 windows of 16: batches of 4 count each twice, and the val loss moved
    # with train.batch_size (2.7401 at 2, 4 or 6; 2.7597 at 3) for the same weights.
    data = tmp_path / "small"
    tripod("data", "synthetic", "--out", data, "--vocab-size", 16, "--order", 1, "--tokens", 1000,
           "--val-fraction", 0.04)
    result = tripod("train", "--config", "tiny", "--set", f"data.dir={data}", *SMALL, "--set", "train.steps=1",
                    "--set", "train.metrics=")
    assert ("note: the held-out split has 2 windows of 16 tokens, fewer than train.eval_batches x train.batch_size "
            "= 4: the evaluation counts some of them twice") in result.stdout, result.stdout


def test_a_tokenizer_from_another_preparation_is_refused(tmp_path):
    # Both vocabularies have 300 pieces: inspect passed the other's tokenizer (its preview decoded into
    # other text), and export hf would have shipped it. meta.json records the tokenizer's XXH64 now.
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "theta", "kappa"]
    for name, shift in [("a", 1), ("b", 3)]:
        text = tmp_path / f"{name}.txt"
        text.write_text("\n".join(" ".join(words[(i * j + shift) % 8] for j in range(12)) for i in range(3000)))
        tripod("data", "prepare", "--input", text, "--out", tmp_path / name, "--vocab-size", 300)
    meta = json.loads((tmp_path / "a" / "meta.json").read_text())
    assert len(meta["tokenizer_xxh64"]) == 16
    assert (tmp_path / "a" / "tokenizer.model").read_bytes() != (tmp_path / "b" / "tokenizer.model").read_bytes()
    shutil.copy(tmp_path / "b" / "tokenizer.model", tmp_path / "a" / "tokenizer.model")
    expect_error("data", "inspect", tmp_path / "a", contains="a tokenizer from another preparation")
