"""Golden bundles end to end with the real program: `tripod golden` cuts a bundle, `tripod golden
run` (Tripod as its own peer, in several layouts) and the PyTorch peers (reports/peers/) train from
it, and `tripod golden check` holds each against the reference with the bundle's tolerances.

  - one process reproduces the stored fp32 and fp64 losses bit for bit;
  - dp=2 and tp=2 under mpirun, the single-process PyTorch peer (fp32, fp64) and the DDP peer on 2
    CPU processes (gloo) match within the stated tolerances;
  - a bundle with one initial weight moved by 1e-3 is reported DIFFERS, naming step 1 and the tensor.
The checker itself (tolerances, bad results files) is tested in test_golden_check.py."""
import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
import xxhash

from reports import safetensors_np as st
from reports.golden.bundle import BundleError, read_bundle
from tripod_cli import (MPI_ENV, TRIPOD, file_size_limit, folder_lock_held, make_markov_corpus, mpirun_command,
                        require_tripod)

# Two layers, untied head (every tensor kind), 4 sequences of 16 tokens, 2 micro-batches: small
# enough for the torch peers to take a second, large enough that every step clips and decays.
MODEL = ["--set", "model.n_layer=2", "--set", "model.d_model=32", "--set", "model.n_head=4",
         "--set", "model.d_ff=96", "--set", "model.context=16", "--set", "model.tie_embeddings=false",
         "--set", "train.seq_len=16", "--set", "train.batch_size=4", "--set", "train.micro_batches=2",
         "--set", "optim.warmup_steps=2", "--set", "optim.grad_clip=0.5"]
STEPS = 5


def run(cmd, env=None, timeout=300):
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, env=env)


def tripod(*args):
    require_tripod()
    return run([TRIPOD, *args])


def ok(result):
    assert result.returncode == 0, f"{' '.join(result.args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    corpus = make_markov_corpus(tmp_path_factory.mktemp("corpus") / "markov")
    out = tmp_path_factory.mktemp("golden") / "bundle"
    ok(tripod("golden", "--config", "tiny", "--set", f"data.dir={corpus}", *MODEL, "--steps", STEPS, "--out", out))
    return out


def check(bundle, results, json_out=None):
    extra = ["--json", json_out] if json_out else []
    return tripod("golden", "check", bundle, results, *extra)


def reference(bundle, precision):
    return json.loads((bundle / "reference" / f"{precision}.json").read_text())


def test_bundle_holds_what_a_peer_needs(bundle):
    meta = json.loads((bundle / "bundle.json").read_text())
    assert meta["format"] == "tripod-golden" and meta["version"] == 1
    assert meta["batch"] == {"steps": STEPS, "batch_size": 4, "seq_len": 16}
    assert len(meta["optimizer"]["lrs"]) == STEPS and meta["optimizer"]["grad_clip"] == 0.5
    assert np.load(bundle / "tokens.npy").shape == (STEPS, 4, 16)
    assert np.load(bundle / "targets.npy").dtype == np.int32
    weights, _ = st.load(bundle / "model.safetensors")
    assert weights["h.0.attn.c_attn.weight"].shape == (32, 96)  # HF Conv1D layout [in, out]
    assert "lm_head.weight" in weights and all(w.dtype == np.float32 for w in weights.values())
    for precision in ("fp32", "fp64"):
        ref = reference(bundle, precision)
        assert len(ref["losses"]) == len(ref["grad_norms"]) == STEPS
        assert sorted(ref["params"]) == ["1", str(STEPS)]
        assert sorted(ref["slack"]) == ["1", str(STEPS)]


@pytest.mark.parametrize("precision", ["fp32", "fp64"])
def test_one_process_reproduces_the_reference_exactly(bundle, tmp_path, precision):
    results = tmp_path / "tripod.json"
    ok(tripod("golden", "run", bundle, "--precision", precision, "--out", results))
    got, ref = json.loads(results.read_text()), reference(bundle, precision)
    assert got["losses"] == ref["losses"] and got["grad_norms"] == ref["grad_norms"]
    mine, _ = st.load(tmp_path / f"tripod-step{STEPS}.safetensors")
    theirs, _ = st.load(bundle / "reference" / ref["params"][str(STEPS)])
    assert all(np.array_equal(mine[n], theirs[n]) for n in theirs)
    assert "MATCH" in ok(check(bundle, results)).stdout


@pytest.mark.parametrize("layout", ["tp1-pp1-dp2-z1-mb1", "tp2-pp1-dp1-z0-mb2"])
def test_parallel_layouts_match_within_tolerance(bundle, tmp_path, layout):
    results = tmp_path / "tripod.json"
    ok(run(mpirun_command(2, "golden", "run", bundle, "--precision", "fp64", "--layout", layout, "--out", results),
           env=MPI_ENV))
    verdict = tmp_path / "verdict.json"
    ok(check(bundle, results, verdict))
    v = json.loads(verdict.read_text())
    assert v["verdict"] == "match" and v["framework"] == f"tripod {layout} (cpu (OpenBLAS + OpenMP))"
    assert max(s["loss_rel_error"] for s in v["steps"]) < 1e-13  # the same arithmetic, reduced in another order


def perturbed_copy(bundle, out):
    """The bundle with one initial weight - the wte entry of the first token of step 1 - moved by 1e-3,
    and recorded so in bundle.json's files (a bundle that starts elsewhere, not a damaged one)."""
    shutil.copytree(bundle, out)
    weights, metadata = st.load(out / "model.safetensors")
    token = int(np.load(out / "tokens.npy")[0, 0, 0])
    weights["wte.weight"][token, 0] += np.float32(1e-3)
    st.save(out / "model.safetensors", weights, metadata)
    meta = json.loads((out / "bundle.json").read_text())
    data = (out / "model.safetensors").read_bytes()
    meta["files"]["model.safetensors"] = {"bytes": len(data), "xxh64": xxhash.xxh64(data).hexdigest()}
    (out / "bundle.json").write_text(json.dumps(meta))
    return out


def flip_a_byte(path, offset):
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def test_a_damaged_bundle_is_refused_naming_the_file(bundle, tmp_path):
    # A bundle damaged on its way to the peer's machine: a damaged reference made a correct peer
    # DIFFER (exit 1), and an edited batch trained Tripod's own peer without a word.
    results = tmp_path / "tripod.json"
    ok(tripod("golden", "run", bundle, "--precision", "fp64", "--out", results))
    meta = json.loads((bundle / "bundle.json").read_text())
    assert sorted(meta["files"]) == sorted(p.relative_to(bundle).as_posix() for p in bundle.rglob("*")
                                           if p.is_file() and p.name != "bundle.json")
    damaged = tmp_path / "damaged"
    shutil.copytree(bundle, damaged)
    reference = damaged / "reference" / "fp64-step1.safetensors"
    flip_a_byte(reference, reference.stat().st_size - 3)  # a value's low bits: the file still reads
    result = check(damaged, results)
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"golden check: bad bundle: {reference}: XXH64 " in result.stderr, result.stderr
    assert "the file was changed or damaged since the bundle was written" in result.stderr
    # A batch edited within the vocabulary: refused by golden run and by the peers' reader.
    edited = tmp_path / "edited"
    shutil.copytree(bundle, edited)
    tokens = np.load(edited / "tokens.npy")
    tokens[0, 0, 0] = (tokens[0, 0, 0] + 1) % int(meta["model"]["vocab_size"])
    np.save(edited / "tokens.npy", tokens)
    result = tripod("golden", "run", edited, "--out", tmp_path / "r.json")
    assert result.returncode == 1 and f"{edited / 'tokens.npy'}: XXH64 " in result.stderr, result.stderr
    with pytest.raises(BundleError, match="tokens.npy: XXH64 .* the file was changed"):
        read_bundle(edited)
    # A file missing, or grown: named by both readers.
    (edited / "reference" / "slack-fp32-step1.safetensors").unlink()
    with pytest.raises(BundleError, match="slack-fp32-step1.safetensors: missing \\(bundle.json lists it\\)"):
        read_bundle(edited)
    grown = tmp_path / "grown"
    shutil.copytree(bundle, grown)
    with open(grown / "targets.npy", "ab") as f:
        f.write(b"\0")
    result = tripod("golden", "run", grown, "--out", tmp_path / "r.json")
    assert result.returncode == 1 and "targets.npy: " in result.stderr and " bytes, bundle.json records " in result.stderr
    # A name leading out of the bundle is refused by both readers, before any file is hashed (it
    # read and hashed whatever file the name led to).
    for name in ("../tripod.json", "/etc/hostname", "reference/../../tripod.json", "bundle.json"):
        strange = tmp_path / "strange"
        shutil.rmtree(strange, ignore_errors=True)
        shutil.copytree(bundle, strange)
        listed = json.loads((bundle / "bundle.json").read_text())
        listed["files"][name] = {"bytes": 1, "xxh64": "0" * 16}
        (strange / "bundle.json").write_text(json.dumps(listed))
        result = tripod("golden", "run", strange, "--out", tmp_path / "r.json")
        assert result.returncode == 1 and f'files lists "{name}", which is not a file inside the bundle' \
            in result.stderr, result.stderr
        with pytest.raises(BundleError, match="which is not a file inside the bundle"):
            read_bundle(strange)
    # A bundle written before bundle.json listed its files still reads.
    older = tmp_path / "older"
    shutil.copytree(bundle, older)
    del meta["files"]
    (older / "bundle.json").write_text(json.dumps(meta))
    ok(tripod("golden", "run", older, "--precision", "fp64", "--out", tmp_path / "older.json"))
    assert read_bundle(older).steps == STEPS


def test_a_perturbed_bundle_is_reported_naming_step_and_tensor(bundle, tmp_path):
    perturbed = perturbed_copy(bundle, tmp_path / "perturbed")
    results = tmp_path / "tripod.json"
    ok(tripod("golden", "run", perturbed, "--precision", "fp64", "--out", results))
    verdict = tmp_path / "verdict.json"
    result = check(bundle, results, verdict)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "DIFFERS" in result.stdout and "wte.weight" in result.stdout
    v = json.loads(verdict.read_text())
    assert v["verdict"] == "differs"
    assert not v["steps"][0]["ok"], "the first step's loss already differs"
    bad = [t for t in v["tensors"] if not t["ok"]]
    assert {"step": 1, "name": "wte.weight"} in [{"step": t["step"], "name": t["name"]} for t in bad]


def test_golden_refuses_bad_input(bundle, tmp_path):
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    result = tripod("golden", "--config", "tiny", "--steps", 2, "--out", busy)
    assert result.returncode == 1 and "not an empty folder" in result.stderr
    assert (busy / "notes.txt").read_text() == "mine"
    result = tripod("golden", "run", tmp_path / "nowhere", "--out", tmp_path / "r.json")
    assert result.returncode == 1 and "bundle.json: cannot open" in result.stderr
    result = tripod("golden", "check", bundle, tmp_path / "r.json", "--python", tmp_path / "no-python")
    assert result.returncode == 1 and "no-python is not an executable file (--python" in result.stderr
    broken = tmp_path / "broken"
    shutil.copytree(bundle, broken)
    (broken / "tokens.npy").write_bytes((broken / "tokens.npy").read_bytes()[:-10])
    result = tripod("golden", "run", broken, "--out", tmp_path / "r.json")
    assert result.returncode == 1 and "tokens.npy" in result.stderr and "truncated" in result.stderr
    # A bundle whose peer-facing blocks disagree with source.config (golden run used the config's).
    for block, key, value in (("optimizer", "beta1", 5), ("batch", "batch_size", 0), ("model", "layer_norm_epsilon", -1),
                              ("optimizer", "decay", []), ("model", "activation_function", "relu")):
        edited = tmp_path / f"edited-{key}"
        shutil.copytree(bundle, edited)
        meta = json.loads((edited / "bundle.json").read_text())
        meta[block][key] = value
        (edited / "bundle.json").write_text(json.dumps(meta))
        result = tripod("golden", "run", edited, "--out", tmp_path / "r.json")
        assert result.returncode == 1 and f"{block}.{key} is {json.dumps(value)} but source.config says" in result.stderr, \
            result.stderr
    # Results that cannot be read exit 2, as the README says (the command turned every failure into 1).
    result = check(bundle, tmp_path / "absent.json")
    assert result.returncode == 2 and "absent.json: missing" in result.stderr, result.stdout + result.stderr
    # A single-process run checks its communicator options too (it ran with each of these).
    for args, message in ((["--comm", "bogus"], "--comm: unknown communicator 'bogus'"),
                          (["--comm-timeout", "nan"], "--comm-timeout: nan s is not a number"),
                          (["--mpi-chunk-mb", "-1"], "--mpi-chunk-mb: -1 is out of range")):
        result = tripod("golden", "run", bundle, "--out", tmp_path / "r.json", *args)
        assert result.returncode == 1 and message in result.stderr, (args, result.stderr)
    assert not (tmp_path / "r.json").exists()
    # --out a folder: refused before training (it failed after, leaving peer-step1.safetensors,
    # peer-step3.safetensors and peer.tmp beside the folder).
    (tmp_path / "peer").mkdir()
    result = tripod("golden", "run", bundle, "--out", tmp_path / "peer")
    assert result.returncode == 1 and "--out" in result.stderr and "is a directory" in result.stderr, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("peer")) == ["peer"]


def test_a_cut_into_a_folder_another_cut_is_writing_is_refused(tmp_path):
    # Two `golden` into one empty --out both passed its emptiness check, trained, then
    # wrote through the same staging files. The cut locks the folder itself (bundle.json
    # lists every file in it) from before its check to its last file.
    out = tmp_path / "bundle"
    out.mkdir()
    with folder_lock_held(out):  # what a cut at work holds
        result = tripod("golden", "--config", "tiny", "--steps", 2, "--out", out)
        assert result.returncode == 1 and (f"golden --out {out}: another `tripod golden` is writing a bundle into "
                                           "this folder") in result.stderr, result.stderr
        assert list(out.iterdir()) == []
    # A cut that fails before writing leaves no folder it made, and the folder it was given.
    for given in (out, tmp_path / "new"):
        result = tripod("golden", "--config", "tiny", "--set", f"data.dir={tmp_path / 'nowhere'}", "--steps", 2,
                        "--out", given)
        assert result.returncode == 1 and "nowhere" in result.stderr, result.stderr
    assert out.is_dir() and list(out.iterdir()) == [] and not (tmp_path / "new").exists()


def test_a_cut_that_fails_while_writing_leaves_the_folder_as_it_found_it(bundle, tmp_path):
    # A full disk midway left part of a bundle (no bundle.json), which made the next cut refuse the
    # folder as not empty. Here a file-size limit lets the fp32 weights through and stops the fp64
    # reference parameters (twice their size).
    sizes = {name: entry["bytes"] for name, entry in json.loads((bundle / "bundle.json").read_text())["files"].items()}
    limit = sizes["model.safetensors"] * 3 // 2
    assert max(sizes.values()) > limit > max(sizes[n] for n in ("model.safetensors", "tokens.npy", "targets.npy"))

    corpus = make_markov_corpus(tmp_path / "markov")
    given, new = tmp_path / "given", tmp_path / "new"
    given.mkdir()
    for out in (given, new):
        result = subprocess.run([str(TRIPOD), "golden", "--config", "tiny", "--set", f"data.dir={corpus}", *MODEL,
                                 "--steps", str(STEPS), "--out", str(out)], capture_output=True, text=True, timeout=300,
                                preexec_fn=file_size_limit(limit))
        assert result.returncode == 1 and "File too large" in result.stderr, result.stdout + result.stderr
    assert given.is_dir() and list(given.iterdir()) == [] and not new.exists()
    ok(tripod("golden", "--config", "tiny", "--set", f"data.dir={corpus}", *MODEL, "--steps", STEPS, "--out", given))
    assert read_bundle(given)


def peer(module, bundle, out, precision, *extra):
    """A PyTorch peer (reports/peers/) on Debian's interpreter, which has torch."""
    return ok(run(["/usr/bin/python3", "-m", module, bundle, "--precision", precision, "--out", out, *extra],
                  timeout=600))


@pytest.mark.parametrize("precision", ["fp32", "fp64"])
def test_the_single_process_torch_peer_matches(bundle, tmp_path, precision):
    results = tmp_path / "torch.json"
    peer("reports.peers.single", bundle, results, precision)
    verdict = tmp_path / "verdict.json"
    ok(check(bundle, results, verdict))
    v = json.loads(verdict.read_text())
    assert v["verdict"] == "match" and v["precision"] == precision and len(v["steps"]) == STEPS
    assert {t["step"] for t in v["tensors"]} == {1, STEPS}


@pytest.mark.parametrize("precision", ["fp32", "fp64"])
def test_the_ddp_torch_peer_on_two_processes_matches_tripod_dp2(bundle, tmp_path, precision):
    results = tmp_path / "ddp.json"
    peer("reports.peers.ddp", bundle, results, precision, "--nproc", "2")
    ok(check(bundle, results))
    # ... and Tripod's own dp=2 run, held to the same bundle, agrees with it step by step.
    tripod_dp2 = tmp_path / "tripod-dp2.json"
    ok(run(mpirun_command(2, "golden", "run", bundle, "--precision", precision, "--layout", "tp1-pp1-dp2-z0-mb1",
                          "--out", tripod_dp2), env=MPI_ENV))
    ok(check(bundle, tripod_dp2))
    rtol = {"fp32": 1e-4, "fp64": 1e-10}[precision]
    ddp, mine = json.loads(results.read_text()), json.loads(tripod_dp2.read_text())
    assert np.allclose(ddp["losses"], mine["losses"], rtol=rtol, atol=0)


def test_the_torch_peer_on_a_perturbed_bundle_is_reported(bundle, tmp_path):
    perturbed = perturbed_copy(bundle, tmp_path / "perturbed")
    results = tmp_path / "torch.json"
    peer("reports.peers.single", perturbed, results, "fp32")
    result = check(bundle, results)
    assert result.returncode == 1, result.stdout + result.stderr
    final = result.stdout.strip().splitlines()[-1]
    assert final.startswith("golden check: DIFFERS: first at step 1") and "wte.weight" in result.stdout, final
