"""The golden check (reports/golden/check.py) and the PyTorch peers (reports/peers/) on a bundle
fabricated by torch (golden_fabricate.py), without the C++ program:
  - the single-process peer and the DDP peer on 2 CPU processes (gloo) MATCH in fp64 and fp32,
    tied and untied;
  - a bundle with one initial weight moved by 1e-3 is reported DIFFERS at step 1 naming the tensor,
    and a loss tampered with by 1e-3 (relative, 10x the fp32 rtol) at step 3 is named;
  - unusable results (wrong length, a missing file, NaN) and a broken bundle exit 2 naming the file.
The real program's bundles and `tripod golden run` are tested in test_golden_roundtrip.py.
Run: TRIPOD_SOURCE_DIR=$PWD PYTHONPATH=$PWD /usr/bin/python3 -m pytest -q suites/python/test_golden_check.py
"""
import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

import golden_fabricate
import gpt2_torch as ref
from reports import safetensors_np as st

VERDICT_KEYS = ["bundle", "results", "framework", "precision", "rtol", "verdict", "steps", "tensors"]
STEP_KEYS = ["step", "loss", "ref_loss", "loss_rel_error", "grad_norm", "ref_grad_norm", "grad_norm_rel_error", "ok"]
TENSOR_KEYS = ["step", "name", "max_abs_error", "allowed", "ok"]


def module(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", *map(str, args)], capture_output=True, text=True, timeout=timeout)


def ok(result):
    assert result.returncode == 0, \
        f"{' '.join(result.args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
    return result


def check(bundle, results, json_out=None):
    return module("reports.golden.check", bundle, results, *(["--json", json_out] if json_out else []))


def final_line(result):
    return result.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return golden_fabricate.fabricate_bundle(tmp_path_factory.mktemp("golden") / "bundle")


@pytest.fixture(scope="module")
def fp32_results(bundle, tmp_path_factory):
    out = tmp_path_factory.mktemp("peer") / "single.json"
    ok(module("reports.peers.single", bundle, "--precision", "fp32", "--out", out))
    return out


def assert_match(bundle, results, tmp_path, precision, framework):
    verdict = tmp_path / "verdict.json"
    result = check(bundle, results, verdict)
    assert result.returncode == 0, result.stdout + result.stderr
    assert final_line(result).startswith("golden check: MATCH")
    v = json.loads(verdict.read_text())
    assert list(v) == VERDICT_KEYS and v["verdict"] == "match" and v["precision"] == precision
    assert v["rtol"] == golden_fabricate.RTOL[precision] and framework in v["framework"]
    assert [s["step"] for s in v["steps"]] == [1, 2, 3, 4] and all(list(s) == STEP_KEYS for s in v["steps"])
    names = list(st.header(bundle / "model.safetensors"))
    assert [(t["step"], t["name"]) for t in v["tensors"]] == [(s, n) for s in (1, 4) for n in names]
    assert all(list(t) == TENSOR_KEYS and t["ok"] and t["max_abs_error"] <= t["allowed"] for t in v["tensors"])
    return v


@pytest.mark.parametrize("precision", ["fp64", "fp32"])
def test_single_process_peer_matches(bundle, fp32_results, tmp_path, precision):
    results = fp32_results
    if precision == "fp64":
        results = tmp_path / "single.json"
        ok(module("reports.peers.single", bundle, "--precision", precision, "--out", results))
    v = assert_match(bundle, results, tmp_path, precision, "single process")
    if precision == "fp64":  # the same arithmetic as the reference, reduced in another order
        assert max(s["loss_rel_error"] for s in v["steps"]) < 1e-13


@pytest.mark.parametrize("precision", ["fp64", "fp32"])
def test_ddp_peer_on_two_processes_matches(bundle, tmp_path, precision):
    results = tmp_path / "ddp.json"
    ok(module("reports.peers.ddp", bundle, "--nproc", 2, "--precision", precision, "--out", results))
    assert_match(bundle, results, tmp_path, precision, "DDP, 2 processes, gloo")


def test_untied_head_matches(tmp_path):
    untied = golden_fabricate.fabricate_bundle(tmp_path / "untied", tied=False, seed=3)
    assert "lm_head.weight" in st.header(untied / "model.safetensors")
    results = tmp_path / "single.json"
    ok(module("reports.peers.single", untied, "--precision", "fp64", "--out", results))
    assert_match(untied, results, tmp_path, "fp64", "single process")


def test_ddp_ranks_count_different_targets(bundle):
    """The DDP test is only meaningful if a per-rank mean averaged over ranks would be wrong: the
    two halves of step 1 count different numbers of targets, and the losses differ by > rtol."""
    targets = np.load(bundle / "targets.npy")[0]  # [B, T]
    counts = [(half != -1).sum() for half in np.split(targets, 2)]
    assert counts[0] != counts[1]
    cfg = golden_fabricate.small_config()
    params = {n: torch.tensor(w, dtype=torch.float64) for n, w in st.load(bundle / "model.safetensors")[0].items()}
    tokens = torch.from_numpy(np.load(bundle / "tokens.npy")[0])
    halves = [ref.lm_loss(ref.forward(params, cfg, t), torch.from_numpy(y))
              for t, y in zip(tokens.split(2), np.split(targets, 2))]
    whole = ref.lm_loss(ref.forward(params, cfg, tokens), torch.from_numpy(targets))
    assert abs(float(sum(halves) / 2 / whole) - 1) > 10 * golden_fabricate.RTOL["fp32"]


def perturbed_copy(bundle, out):
    """The bundle with one initial weight moved by 1e-3: the wte entry of a first-batch token with
    the largest step-1 gradient, so that the change shows however Adam treats it."""
    shutil.copytree(bundle, out)
    weights, metadata = st.load(out / "model.safetensors")
    params = {n: torch.tensor(w, dtype=torch.float64, requires_grad=True) for n, w in weights.items()}
    tokens, targets = (torch.from_numpy(np.load(out / f)[0]) for f in ("tokens.npy", "targets.npy"))
    ref.lm_loss(ref.forward(params, golden_fabricate.small_config(), tokens), targets).backward()
    row = int(tokens[0, 0])
    column = int(params["wte.weight"].grad[row].abs().argmax())
    weights["wte.weight"][row, column] += np.float32(1e-3)
    st.save(out / "model.safetensors", weights, metadata)
    return out


@pytest.mark.parametrize("precision", ["fp32"])
def test_a_perturbed_bundle_differs_at_step_1_naming_the_tensor(bundle, tmp_path, precision):
    perturbed = perturbed_copy(bundle, tmp_path / "perturbed")
    results = tmp_path / "single.json"
    ok(module("reports.peers.single", perturbed, "--precision", precision, "--out", results))
    verdict = tmp_path / "verdict.json"
    result = check(bundle, results, verdict)
    assert result.returncode == 1, result.stdout + result.stderr
    line = final_line(result)
    assert line.startswith("golden check: DIFFERS: first at step 1,") and "tensor wte.weight" in line, line
    v = json.loads(verdict.read_text())
    assert v["verdict"] == "differs"
    first_wte = next(t for t in v["tensors"] if t["step"] == 1 and t["name"] == "wte.weight")
    assert not first_wte["ok"] and first_wte["max_abs_error"] > 0.5e-3
    assert any(" wte.weight " in row and "DIFFERS" in row for row in result.stdout.splitlines())


def rewritten(results, name, change):
    """A copy of RESULTS.json beside it (so its parameter paths still resolve) with `change` applied."""
    doc = json.loads(results.read_text())
    change(doc)
    out = results.parent / name
    out.write_text(json.dumps(doc))  # json writes NaN as NaN, as a careless peer would
    return out


def test_a_tampered_loss_at_step_3_is_named(bundle, fp32_results, tmp_path):
    def tamper(doc):
        doc["losses"][2] *= 1 + 1e-3  # 10x the fp32 rtol
    results = rewritten(fp32_results, "tampered.json", tamper)
    verdict = tmp_path / "verdict.json"
    result = check(bundle, results, verdict)
    assert result.returncode == 1, result.stdout + result.stderr
    line = final_line(result)
    assert line.startswith("golden check: DIFFERS: first at step 3, loss (relative error"), line
    v = json.loads(verdict.read_text())
    assert [s["ok"] for s in v["steps"]] == [True, True, False, True]
    assert abs(v["steps"][2]["loss_rel_error"] - 1e-3) < 1e-4
    assert all(t["ok"] for t in v["tensors"])  # the parameters are untouched


def set_field(key, value):
    return lambda doc: doc.__setitem__(key, value)


CORRUPTIONS = {
    "short_losses": (lambda doc: doc["losses"].pop(), ["field 'losses' has 3 entries, expected 4"]),
    "nan_loss": (lambda doc: doc["losses"].__setitem__(1, float("nan")), ["'losses'[1] (step 2) is nan"]),
    "missing_params": (lambda doc: doc["params"].__setitem__("4", "nowhere.safetensors"),
                       ["nowhere.safetensors: missing"]),
    "bad_precision": (set_field("precision", "bf16"), ["field 'precision' is 'bf16'"]),
    "wrong_steps": (set_field("steps", 5), ["field 'steps' is 5, the bundle has 4"]),
}


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_unusable_results_exit_2_naming_the_file(bundle, fp32_results, corruption):
    change, expected = CORRUPTIONS[corruption]
    results = rewritten(fp32_results, f"{corruption}.json", change)
    result = check(bundle, results)
    assert result.returncode == 2, result.stdout + result.stderr
    message = result.stderr
    assert "bad results" in message and all(e in message for e in expected), message
    named = "nowhere.safetensors" if corruption == "missing_params" else f"{corruption}.json"
    assert named in message


def test_nan_parameters_and_a_missing_results_file_exit_2(bundle, fp32_results, tmp_path):
    result = check(bundle, tmp_path / "absent.json")
    assert result.returncode == 2 and "absent.json: missing" in result.stderr
    doc = json.loads(fp32_results.read_text())
    step1 = fp32_results.parent / doc["params"]["1"]
    tensors, _ = st.load(step1)
    tensors["ln_f.bias"][3] = np.nan
    st.save(tmp_path / "nan-step1.safetensors", tensors)
    results = tmp_path / "nan.json"
    results.write_text(json.dumps(dict(doc, params={"1": "nan-step1.safetensors"})))
    result = check(bundle, results)
    assert result.returncode == 2 and "nan-step1.safetensors: tensor 'ln_f.bias' holds NaN" in result.stderr


def test_a_broken_bundle_exits_2_naming_the_file(bundle, fp32_results, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(bundle, broken)
    weights, metadata = st.load(broken / "model.safetensors")
    weights["h.0.attn.c_attn.weight"] = weights["h.0.attn.c_attn.weight"].T.copy()  # nn.Linear layout, not HF
    st.save(broken / "model.safetensors", weights, metadata)
    result = check(broken, fp32_results)
    assert result.returncode == 2
    assert "model.safetensors: tensor 'h.0.attn.c_attn.weight' has shape [96, 32]" in result.stderr, result.stderr
    shutil.copy(bundle / "model.safetensors", broken / "model.safetensors")
    (broken / "reference" / "fp64.json").unlink()
    result = check(broken, fp32_results)
    assert result.returncode == 2 and "reference/fp64.json: missing" in result.stderr, result.stderr
    result = module("reports.peers.single", broken, "--out", tmp_path / "r.json")
    assert result.returncode == 2 and "fp64.json: missing" in result.stderr
