"""Tripod's C++ GPT-2 (forward, backward, clipping, AdamW) against an independent PyTorch model.

`tripod_reference_dump` writes a tiny model, K batches and its own results (see
suites/support/reference_dump.cpp); this test recomputes everything with gpt2_torch (autograd,
torch.optim.AdamW) and compares. Run with Debian's interpreter: /usr/bin/python3 -m pytest -q.

Tolerances. Every comparison is max|got - ref| <= rtol * max(max|ref|, floor): the error relative
to the largest entry of the reference tensor, so entries that are ~0 (gradients that vanish in
exact arithmetic come out as 1e-17 or 1e-9 of rounding noise) cannot produce spurious failures.
The reference always runs in float64, also for fp32 dumps, so only Tripod's rounding counts:
  fp64: rtol 1e-10. Double rounding is ~1e-16 per operation; a tiny model's reductions over tens to
        hundreds of terms give ~1e-15 in logits and gradients and, after Adam's amplification,
        ~3e-13 in final parameters (measured on Tripod's dump), so 1e-10 leaves orders of margin
        for a different summation order, yet a real bug (wrong scale, transposed head, missing
        bias) errs by >= 1e-4.
  fp32: rtol 1e-5. Float rounding is 6e-8; the same sums give <= 6e-7 (measured on Tripod's dump
        and by test_harness_accepts_a_float32_implementation, which runs torch in float32 as the
        implementation under test).
Final parameters additionally get a per-element AdamW slack (gpt2_torch.adam_drift_bound): Adam
divides by sqrt(v) + eps, which turns a gradient error of rtol * max|g| into an update error of up
to ~rtol * max|g| / sqrt(v) times lr. For the attention key bias, whose gradient is exactly zero
in exact arithmetic, fp32 noise (~1e-9) is not small against eps (1e-8), so Tripod moves it by up to
~lr per step while the reference does not; the slack bounds that by 2 * u_max * sum(lr). In fp64
the slack follows from the 1e-10 gradient tolerance: < 1e-2 * lr for those elements, ~1e-8 * lr for
ordinary ones.
"""
import json
import os
import pathlib
import subprocess

import numpy as np
import pytest
import torch

import gpt2_torch as ref
from reports import safetensors_np as st

RTOL = {"fp64": 1e-10, "fp32": 1e-5}
NP_DTYPE = {"fp64": np.float64, "fp32": np.float32}


# --------------------------------------------------------------------------------------------
# Reading a dump and recomputing it

def load_dump(d):
    """Reads and validates a dump directory; returns a dict of its parts (numpy arrays)."""
    d = pathlib.Path(d)
    config = json.loads((d / "config.json").read_text())
    cfg, hp = ref.GPT2Config.from_hf(config), config["tripod"]
    assert hp["dtype"] in RTOL, f"config.json: unknown dtype {hp['dtype']}"
    weights, _ = st.load(d / "model.safetensors")
    shapes = ref.param_shapes(cfg)
    assert sorted(weights) == sorted(shapes), f"model.safetensors: names {sorted(set(weights) ^ set(shapes))} differ"
    for name, w in weights.items():
        assert w.shape == shapes[name], f"model.safetensors: {name} has shape {w.shape}, expected {shapes[name]}"
        assert w.dtype == NP_DTYPE[hp["dtype"]], f"model.safetensors: {name} is {w.dtype}, config says {hp['dtype']}"
    batch, _ = st.load(d / "batch.safetensors")
    tokens, targets = batch["tokens"], batch["targets"]
    K = hp["steps"]
    assert tokens.dtype == np.int32 and tokens.shape == targets.shape and tokens.shape[0] == K, \
        f"batch.safetensors: tokens {tokens.shape} / targets {targets.shape}, expected [{K}, B, T] int32"
    assert tokens.shape[2] <= cfg.n_positions and len(hp["lrs"]) == K
    assert tokens.min() >= 0 and tokens.max() < cfg.vocab_size and targets.max() < cfg.vocab_size
    assert targets.min() >= -1 and (targets == -1).any(), "batch.safetensors: no ignored (-1) targets"
    results, _ = st.load(d / "results.safetensors")
    expected = {"logits", "loss", "losses", "grad_norms"} | {p + n for n in shapes for p in ("grad.", "final.")}
    assert sorted(results) == sorted(expected), \
        f"results.safetensors: missing {sorted(expected - set(results))}, unexpected {sorted(set(results) - expected)}"
    for name, r in results.items():  # either precision: results are compared in float64 anyway
        assert r.dtype in (np.float32, np.float64), f"results.safetensors: {name} is {r.dtype}, not a float"
    return dict(cfg=cfg, hp=hp, weights=weights, tokens=tokens, targets=targets, results=results)


def as_params(weights, dtype=torch.float64):
    return {n: torch.tensor(w, dtype=dtype, requires_grad=True) for n, w in weights.items()}


def reference_results(dump, dtype=torch.float64):
    """All the tensors results.safetensors must hold, plus the AdamW slack per final parameter."""
    cfg, hp = dump["cfg"], dump["hp"]
    tokens, targets = torch.from_numpy(dump["tokens"]), torch.from_numpy(dump["targets"])
    params = as_params(dump["weights"], dtype)
    logits = ref.forward(params, cfg, tokens[0])
    loss = ref.lm_loss(logits, targets[0])
    loss.backward()
    out = {"logits": logits.detach().numpy(), "loss": loss.detach().reshape(1).numpy()}
    out.update({"grad." + n: p.grad.numpy().copy() for n, p in params.items()})
    trained = as_params(dump["weights"], dtype)
    losses, norms, slack = ref.train(trained, cfg, hp, tokens, targets, RTOL[hp["dtype"]])
    out["losses"], out["grad_norms"] = np.array(losses), np.array(norms)
    out.update({"final." + n: p.detach().numpy() for n, p in trained.items()})
    return out, {"final." + n: s.numpy() for n, s in slack.items()}


# --------------------------------------------------------------------------------------------
# Comparing

def mismatch(got, want, rtol, floor=0.0, slack=None):
    """None if |got - want| <= rtol * max(max|want|, floor) + slack everywhere, else a description
    of the worst element."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        return f"shape {got.shape} != {want.shape}"
    if want.size == 0:
        return None
    scale = max(float(np.abs(want).max()), floor)
    if not np.isfinite(got).all():
        return "non-finite values"
    err = np.abs(got - want)
    allowed = rtol * scale + (0.0 if slack is None else np.asarray(slack, dtype=np.float64))
    if (err <= allowed).all():
        return None
    i = np.unravel_index(np.argmax(err - allowed), err.shape)
    return (f"max|err|/scale = {err.max() / scale:.3g} > rtol {rtol:g}; worst at {tuple(int(j) for j in i)}: "
            f"got {got[i]!r}, want {want[i]!r}, allowed {allowed if np.isscalar(allowed) else allowed[i]:.3g}")


def compare(dump, results=None):
    """Compares a loaded dump's results with the torch reference; returns {tensor: problem}."""
    rtol = RTOL[dump["hp"]["dtype"]]
    want, slack = reference_results(dump)
    got = dump["results"] if results is None else results
    grad_max = max(float(np.abs(v).max()) for k, v in want.items() if k.startswith("grad."))
    problems = {}
    for name, w in want.items():
        if np.shape(got[name]) != w.shape:
            bad = f"shape {np.shape(got[name])}, expected {w.shape}"
        elif name.startswith("grad."):
            # A floor a millionth of the largest gradient: tensors whose whole gradient is below
            # that carry no signal a 1e-5 comparison could check.
            bad = mismatch(got[name], w, rtol, floor=1e-6 * grad_max)
        elif name in ("losses", "grad_norms"):
            bad = mismatch(np.asarray(got[name]) / w, np.ones_like(w), rtol)  # per step, relative
        else:
            bad = mismatch(got[name], w, rtol, slack=slack.get(name))
        if bad:
            problems[name] = bad
    return problems


def logits_mismatch(dump, weights):
    """Compares only the dump's logits against a forward pass from `weights` (a cheap sanity probe)."""
    params = as_params(weights)
    logits = ref.forward(params, dump["cfg"], torch.from_numpy(dump["tokens"][0])).detach().numpy()
    return mismatch(dump["results"]["logits"], logits, RTOL[dump["hp"]["dtype"]])


def perturbed_wte(dump, delta=1e-3):
    """The dump's weights with one wte entry (of a token in the first batch) moved by delta."""
    weights = {n: w.copy() for n, w in dump["weights"].items()}
    weights["wte.weight"][int(dump["tokens"][0, 0, 0]), 0] += delta
    return weights


# --------------------------------------------------------------------------------------------
# Fabricating a dump from torch itself, to test the harness without the C++ program

def fabricate_dump(d, dtype="fp64", tied=True, steps=3, seed=0):
    """Writes a dump directory as tripod_reference_dump would, with torch standing in for Tripod:
    torch runs in the dump's dtype (so an fp32 dump carries a genuine float32 implementation's
    rounding). Model: 2 layers, 2 heads, C=16, F=48 (not 4C, so n_inner is exercised), T=6 < 8."""
    d = pathlib.Path(d)
    d.mkdir(parents=True, exist_ok=True)
    cfg = ref.GPT2Config(n_layer=2, n_head=2, n_embd=16, n_positions=8, vocab_size=37, n_inner=48,
                         layer_norm_epsilon=1e-5, tie_word_embeddings=tied)
    torch_dtype = torch.float64 if dtype == "fp64" else torch.float32
    weights = {n: w.to(torch_dtype).numpy() for n, w in ref.init_params(cfg, seed=seed).items()}
    g = torch.Generator().manual_seed(seed + 1)
    B, T = 2, 6
    tokens = torch.randint(0, cfg.vocab_size, (steps, B, T + 1), generator=g, dtype=torch.int32)
    targets = tokens[..., 1:].clone()
    targets[torch.rand(targets.shape, generator=g) < 0.25] = -1  # some ignored targets
    targets[:, :, 0] = tokens[:, :, 1]  # but never all of them
    tokens = tokens[..., :-1].contiguous()
    decay = [n for n, shape in ref.param_shapes(cfg).items() if len(shape) == 2]
    hp = {"dtype": dtype, "steps": steps, "lrs": [1e-2 * (k + 1) / steps for k in range(steps)],
          "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1, "decay": decay, "grad_clip": 0.0}
    dump = dict(cfg=cfg, hp=hp, weights=weights, tokens=tokens.numpy(), targets=targets.numpy())
    # Clip at 0.8 of the first step's gradient norm so that clipping happens at least once.
    hp["grad_clip"] = 0.8 * float(reference_results(dict(dump, hp=dict(hp, steps=1)), torch_dtype)[0]["grad_norms"][0])
    results, _ = reference_results(dump, torch_dtype)
    (d / "config.json").write_text(json.dumps({**cfg.to_hf(), "tripod": hp}, indent=1))
    st.save(d / "model.safetensors", weights, {"format": "pt"})
    st.save(d / "batch.safetensors", {"tokens": dump["tokens"], "targets": dump["targets"]})
    st.save(d / "results.safetensors", {k: np.asarray(v, dtype=NP_DTYPE[dtype]) for k, v in results.items()})
    return d


# --------------------------------------------------------------------------------------------
# Tests

@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_harness_detects_perturbation(tmp_path, tied):
    """The comparison passes on a faithful fp64 dump and fails on each kind of corruption."""
    dump = load_dump(fabricate_dump(tmp_path, "fp64", tied))
    assert compare(dump) == {}
    assert logits_mismatch(dump, dump["weights"]) is None
    assert logits_mismatch(dump, perturbed_wte(dump)) is not None, "a 1e-3 change in wte went unnoticed"
    assert "logits" in compare(dict(dump, weights=perturbed_wte(dump)))
    for name, delta in [("grad.h.1.mlp.c_fc.bias", 1e-8), ("final.ln_f.weight", 1e-8), ("losses", 1e-8)]:
        results = {k: v.copy() for k, v in dump["results"].items()}
        results[name].reshape(-1)[-1] += delta
        assert name in compare(dump, results), f"a {delta:g} error in {name} went unnoticed"
    # An optimizer that differs slightly (weight decay, clipping) shows in the final parameters.
    for change in [{"weight_decay": 0.11}, {"grad_clip": dump["hp"]["grad_clip"] * 1.01}]:
        problems = compare(dict(dump, hp=dict(dump["hp"], **change)))
        assert any(k.startswith("final.") for k in problems), f"optimizer change {change} went unnoticed"
    # Wrong names and shapes are caught when the dump is read.
    weights, _ = st.load(tmp_path / "model.safetensors")
    weights["wte.weight"] = weights["wte.weight"].T.copy()
    st.save(tmp_path / "model.safetensors", weights)
    with pytest.raises(AssertionError, match="wte.weight has shape"):
        load_dump(tmp_path)


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_harness_accepts_a_float32_implementation(tmp_path, tied):
    """torch's own float32 run, standing in for Tripod's fp32 path, is within the fp32 tolerances
    (this is what calibrates them), and a fp32-sized error in a weight is still detected."""
    dump = load_dump(fabricate_dump(tmp_path, "fp32", tied))
    assert compare(dump) == {}
    assert logits_mismatch(dump, perturbed_wte(dump)) is not None


def dump_program():
    """The C++ dump program; skips when not run by CTest, fails when CTest's build lacks it."""
    binary_dir = os.environ.get("TRIPOD_BINARY_DIR")
    if not binary_dir:
        pytest.skip("TRIPOD_BINARY_DIR is not set: run through ctest, or export it to a build directory "
                    "holding suites/tripod_reference_dump")
    program = pathlib.Path(binary_dir) / "suites" / "tripod_reference_dump"
    if not program.is_file():
        pytest.fail(f"{program} does not exist: build the tripod_reference_dump target")
    return program


@pytest.mark.parametrize("tied", [1, 0], ids=["tied", "untied"])
@pytest.mark.parametrize("dtype", ["fp64", "fp32"])
def test_tripod_matches_torch(tmp_path, dtype, tied):
    program = dump_program()
    cmd = [str(program), "--dtype", dtype, "--steps", "3", "--tied", str(tied), "--out", str(tmp_path)]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, f"{' '.join(cmd)} failed ({run.returncode}):\n{run.stdout}\n{run.stderr}"
    dump = load_dump(tmp_path)
    assert dump["hp"]["dtype"] == dtype and dump["cfg"].tie_word_embeddings == bool(tied)
    problems = compare(dump)
    assert not problems, "Tripod differs from the torch reference:\n" + "\n".join(
        f"  {name}: {why}" for name, why in problems.items())
    # The tolerance is not vacuous for this dump: a 1e-3 change to one weight breaks the logits.
    assert logits_mismatch(dump, perturbed_wte(dump)) is not None


def test_tripod_matches_torch_on_the_emulated_device(tmp_path):
    """On the emulated device the logits' rows are padded (37 -> 40 columns, as on CUDA): the dump
    holds the real ones, and they still match torch."""
    program = dump_program()
    cmd = [str(program), "--dtype", "fp64", "--steps", "2", "--tied", "1", "--out", str(tmp_path)]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "TRIPOD_TEST_BACKEND": "emulated"})
    assert run.returncode == 0, f"{' '.join(cmd)} failed ({run.returncode}):\n{run.stdout}\n{run.stderr}"
    problems = compare(load_dump(tmp_path))
    assert not problems, "Tripod differs from the torch reference:\n" + "\n".join(
        f"  {name}: {why}" for name, why in problems.items())
