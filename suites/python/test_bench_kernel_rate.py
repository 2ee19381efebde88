"""`tripod bench kernel-rate`: every memory-bound kernel of a GPT-2 step timed through the backend,
in GB/s and as a percentage of a copy measured in the same run; on the CPU and the emulated device
here (a GPU runs the same command in ci/gpu-check.sh)."""
import json
import os
import subprocess

import pytest

from tripod_cli import TRIPOD, require_tripod

KERNELS = ["copy", "add", "bias_add", "layernorm fwd", "layernorm bwd", "gelu fwd", "gelu bwd", "adamw",
           "adamw 96 runs (1 call)", "adamw 96 runs apart", "cross-entropy fwd", "cross-entropy bwd", "cross-entropy window fwd", "ce window fwd, 1 pass",
           "cross-entropy window bwd", "ce fwd+bwd, 1 kernel", "ce fwd then bwd",
           "embedding bwd", "attention fwd", "attention bwd"]


def run(*args):
    require_tripod()
    return subprocess.run([str(TRIPOD), "bench", "kernel-rate", *map(str, args)], capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("backend, dtype", [("cpu", "fp32"), ("emulated", "fp64")])
def test_every_kernel_is_timed_against_the_copy(tmp_path, backend, dtype):
    out = tmp_path / "k.json"
    result = run("--backend", backend, "--dtype", dtype, "--tokens", 64, "--channels", 32, "--vocab", 100,
                 "--repeat", 2, "--min-time-ms", 0, "--json", out)
    assert result.returncode == 0, result.stderr
    j = json.loads(out.read_text())
    # fp32 also times the bf16-mixed policy's forms: an output gradient's copy with its bias gradient,
    # ln(x), gelu(fc), its backward's d fc and the loss gradient as bf16 operands (fused and apart;
    # gelu's two also from a bf16 fc and d gelu),
    # the attention projection with the residual stream's add (fused and apart), c_attn's bf16 qkv
    # (fused and apart), and attention on
    # bf16 operands, its output and its backward's dqkv as bf16 operands (fused and apart)
    mixed = ["bias_grad+bf16 (fused)", "bias_grad, bf16 apart", "gelu->bf16 (fused)", "gelu, bf16 apart",
             "layernorm->bf16 (fused)", "layernorm, bf16 apart", "gelu bwd+db+bf16 (fused)", "gelu bwd, db+bf16 apart",
             "gelu->bf16, bf16 fc", "gelu bwd+db+bf16, bf16 fc, d", "ce window bwd->bf16 (fused)",
             "ce window bwd, bf16 apart", "ce window fwd, bf16 logits",
             "ce window bwd, bf16 logits", "ce fwd+bwd, 1 kernel, bf16", "ce fwd then bwd, bf16",
             "proj+residual (fused)",
             "proj, residual apart", "qkv->bf16, bias (fused)", "qkv, bf16 apart", "attention fwd bf16",
             "attention fwd->bf16 (fused)", "attention fwd, bf16 apart",
             "attention bwd bf16", "attention bwd->bf16 (fused)", "attention bwd, bf16 apart"]
    assert [r["name"] for r in j["results"]] == KERNELS + (mixed if dtype == "fp32" else [])
    size = 8 if dtype == "fp64" else 4
    copy = j["results"][0]
    # the baseline copies [N, 4C], past a GPU's L2 at GPT-2 sizes
    assert copy["bytes"] == 2 * 4 * 64 * 32 * size and copy["pct_of_copy"] == pytest.approx(100)
    assert j["copy_gbps"] == pytest.approx(copy["median_gbps"])
    for r in j["results"]:
        assert r["median_seconds"] > 0 and r["best_seconds"] <= r["median_seconds"]
        assert r["median_gbps"] == pytest.approx(r["bytes"] / r["median_seconds"] / 1e9, rel=1e-9)
        assert r["pct_of_copy"] == pytest.approx(100 * r["median_gbps"] / j["copy_gbps"], rel=1e-9)
    ce = {r["name"]: r["bytes"] for r in j["results"]}
    assert ce["cross-entropy bwd"] == 2 * ce["cross-entropy fwd"] == 2 * 64 * 100 * size
    # the window forms (training's loss) read the logits twice forward, read and write them backward
    assert ce["cross-entropy window fwd"] == ce["cross-entropy window bwd"] == 2 * 64 * 100 * size
    # the one-pass statistics read the logits once
    assert ce["ce window fwd, 1 pass"] == 64 * 100 * size
    # a training forward's loss with its gradient, one kernel or the calls apart: both counted as
    # the logits read and written once
    assert ce["ce fwd+bwd, 1 kernel"] == ce["ce fwd then bwd"] == 2 * 64 * 100 * size
    # AdamW's 96 runs move what one call over the same [N, C] moves
    assert ce["adamw 96 runs (1 call)"] == ce["adamw 96 runs apart"] == ce["adamw"] == 7 * 64 * 32 * size
    # dout twice, and the 9 distinct table rows (ids below 64 / 8 + 1) read and written
    assert ce["embedding bwd"] == (2 * 64 * 32 + 2 * 9 * 32) * size
    if dtype == "fp32":  # [N, 4C] read in fp32 once, written in bf16, counted alike for both forms
        assert ce["bias_grad+bf16 (fused)"] == ce["bias_grad, bf16 apart"] == 4 * 64 * 32 * (4 + 2)
        assert ce["gelu->bf16 (fused)"] == ce["gelu, bf16 apart"] == 4 * 64 * 32 * (4 + 2)
        assert ce["layernorm->bf16 (fused)"] == ce["layernorm, bf16 apart"] == 64 * 32 * (4 + 2)
        # the projection with the residual: the output written and the residual read, 2 N C^2 FLOPs
        assert ce["proj+residual (fused)"] == ce["proj, residual apart"] == 2 * 64 * 32 * 4
        flops = {r["name"]: r.get("nominal_flops") for r in j["results"]}
        assert flops["proj+residual (fused)"] == flops["proj, residual apart"] == 2 * 64 * 32 * 32
        # c_attn's qkv in bf16 (flash-mma's input): the bf16 [N, 3C] written, 2 N 3C C FLOPs
        assert ce["qkv->bf16, bias (fused)"] == ce["qkv, bf16 apart"] == 3 * 64 * 32 * 2
        assert flops["qkv->bf16, bias (fused)"] == flops["qkv, bf16 apart"] == 2 * 64 * 3 * 32 * 32
        # the loss gradient's: the logits read, the bf16 operand written
        assert ce["ce window bwd->bf16 (fused)"] == ce["ce window bwd, bf16 apart"] == 64 * 100 * (4 + 2)
        # bf16-mixed's bf16 logits: read once forward, read and written backward
        assert 2 * ce["ce window fwd, bf16 logits"] == ce["ce window bwd, bf16 logits"] == 2 * 64 * 100 * 2
        assert ce["ce fwd+bwd, 1 kernel, bf16"] == ce["ce fwd then bwd, bf16"] == 2 * 64 * 100 * 2
        # the GELU backward's: fc and d gelu read, the bf16 operand written
        assert ce["gelu bwd+db+bf16 (fused)"] == ce["gelu bwd, db+bf16 apart"] == 4 * 64 * 32 * (2 * 4 + 2)
        # the same from bf16-mixed's bf16 pre-activation fc and gradient of gelu(fc): their bytes halved
        assert ce["gelu->bf16, bf16 fc"] == 4 * 64 * 32 * (2 + 2)
        assert ce["gelu bwd+db+bf16, bf16 fc, d"] == 4 * 64 * 32 * (2 + 2 + 2)
    # attention: --context defaults to 1024, so at most the 64 tokens (one sequence); C 32 < 64: one head
    assert (j["attention_batch"], j["context"], j["heads"]) == (1, 64, 1)
    nc, square = 64 * 32, 1 * 1 * 64 * 64
    assert ce["attention fwd"] == (4 * nc + square) * size and ce["attention bwd"] == (7 * nc + square) * size
    att = {r["name"]: r for r in j["results"] if r["name"].startswith("attention")}
    assert att["attention fwd"]["nominal_flops"] == 4 * 1 * 64 * 64 * 32
    assert att["attention bwd"]["nominal_flops"] == 8 * 1 * 64 * 64 * 32
    for r in att.values():
        assert r["nominal_tflops"] == pytest.approx(r["nominal_flops"] / r["median_seconds"] / 1e12, rel=1e-9)
    assert all("nominal_flops" not in r for r in j["results"] if not r["name"].startswith(("attention", "proj", "qkv")))
    for name in KERNELS:
        assert name in result.stdout


def test_attention_takes_the_context_and_heads_given(tmp_path):
    out = tmp_path / "k.json"
    result = run("--tokens", 64, "--channels", 32, "--vocab", 50, "--context", 16, "--heads", 4, "--repeat", 1,
                 "--min-time-ms", 0, "--json", out)
    assert result.returncode == 0, result.stderr
    j = json.loads(out.read_text())
    assert (j["attention_batch"], j["context"], j["heads"]) == (4, 16, 4)
    assert "attention B 4 x T 16, H 4" in result.stdout


def test_flash_mma_times_attention_from_the_models_bf16_qkv_and_gradient(tmp_path):
    """Where the model keeps qkv and attention's output gradient in bf16 (flash-mma at head size 16
    here, on the emulated device), three more rows time the attention from them (the forward also as
    the bf16 operand it writes), their bytes counting both in bf16; the other attentions keep fp32
    and have no such rows (the list above)."""
    require_tripod()
    out = tmp_path / "k.json"
    result = subprocess.run([TRIPOD, "bench", "kernel-rate", "--backend", "emulated", "--tokens", "64", "--channels",
                             "32", "--vocab", "50", "--context", "32", "--heads", "2", "--repeat", "1",
                             "--min-time-ms", "0", "--json", str(out)],
                            capture_output=True, text=True, timeout=120,
                            env={**os.environ, "TRIPOD_CUDA_ATTENTION": "flash-mma"})
    assert result.returncode == 0, result.stderr
    rows = {r["name"]: r for r in json.loads(out.read_text())["results"]}
    nc, state = 64 * 32, 2 * 2 * 32 * 32  # the state buffer counted as the T x T scores, as the fp32 rows count it
    assert rows["attention fwd, bf16 qkv"]["bytes"] == 3 * nc * 2 + (nc + state) * 4
    # as training runs it: the bf16 operand written instead of the fp32 out
    assert rows["attention fwd->bf16, bf16 qkv"]["bytes"] == 3 * nc * 2 + state * 4 + nc * 2
    assert rows["attention bwd, bf16 qkv, dout"]["bytes"] == 4 * nc * 2 + (3 * nc + state) * 4
    assert rows["attention bwd, bf16 qkv, dout"]["nominal_flops"] == 8 * 2 * 32 * 32 * 32


@pytest.mark.parametrize("args, message", [
    (["--dtype", "bf16"], "kernel-rate: --dtype fp32 or fp64, not bf16"),
    (["--tokens", "0"], "--tokens, --channels and --vocab must be positive"),
    (["--repeat", "0", "--tokens", "8"], "--repeat must be at least 1"),
    (["--tokens", "96", "--context", "64"], "kernel-rate: --context 64 does not divide --tokens 96"),
    (["--tokens", "64", "--channels", "32", "--heads", "5"], "kernel-rate: --heads 5 does not divide --channels 32"),
    (["--context", "0"], "kernel-rate: --context must be positive"),
])
def test_bad_input_is_refused(args, message):
    result = run(*args)
    assert result.returncode != 0
    assert message in result.stderr, result.stderr
