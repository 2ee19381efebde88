"""`tripod bench gemm-rate` on the CPU backend (small sizes): its JSON, the GPT-2 shapes it times,
the peak it holds the rates against (the backend-aware lookup of perf/backend_peak.h, reached for a
GPU's table row through --peak-device), and clear errors, never a crash, for what it cannot do;
and `tripod bench train`'s MFU against the same peak."""
import json
import subprocess

import pytest

from tripod_cli import MPI_ENV, TRIPOD, require_tripod

GPT2_LAYERS = {"qkv": (768, 2304, 12), "attn_proj": (768, 768, 12), "fc": (768, 3072, 12),
               "fc_proj": (3072, 768, 12), "lm_head": (768, 50257, 1)}


def gemm_rate(tmp_path, *args):
    require_tripod()
    out = tmp_path / "gemm.json"
    result = subprocess.run([str(TRIPOD), "bench", "gemm-rate", "--repeat", "2", "--min-time-ms", "0", "--json",
                             str(out), *map(str, args)], capture_output=True, text=True, timeout=300, env=MPI_ENV)
    return result, (json.loads(out.read_text()) if out.exists() else None)


def test_squares_and_gpt2_shapes_with_their_flops_and_the_step_aggregate(tmp_path):
    tokens = 8
    result, j = gemm_rate(tmp_path, "--backend", "cpu", "--dtype", "fp32", "--sizes", "32,48", "--shapes", "gpt2",
                          "--tokens", tokens)
    assert result.returncode == 0, result.stderr
    assert (j["benchmark"], j["dtype"], j["c_dtype"], j["accumulate"], j["tokens"]) == ("gemm_rate", "fp32", "fp32",
                                                                                         "fp32", tokens)
    assert j["backend_name"].startswith("cpu")
    squares = [r for r in j["results"] if r["group"] == "square"]
    assert [(r["m"], r["n"], r["k"]) for r in squares] == [(32, 32, 32), (48, 48, 48)]
    gpt2 = {r["name"]: r for r in j["results"] if r["group"] == "gpt2"}
    assert len(gpt2) == 15
    for layer, (inp, out, per_step) in GPT2_LAYERS.items():
        # model/linear.cpp's three GEMMs of a weight [out, in] over `tokens` rows
        fwd, dx, dw = gpt2[layer + " fwd"], gpt2[layer + " dX"], gpt2[layer + " dW"]
        assert (fwd["m"], fwd["n"], fwd["k"], fwd["trans_a"], fwd["trans_b"]) == (tokens, out, inp, False, True)
        assert (dx["m"], dx["n"], dx["k"], dx["trans_a"], dx["trans_b"]) == (tokens, inp, out, False, False)
        assert (dw["m"], dw["n"], dw["k"], dw["trans_a"], dw["trans_b"], dw["beta"]) == (out, inp, tokens, True,
                                                                                         False, 1.0)
        assert fwd["per_step"] == dx["per_step"] == dw["per_step"] == per_step
    for r in j["results"]:
        assert r["flops_per_gemm"] == 2 * r["m"] * r["n"] * r["k"]
        assert 0 < r["best_seconds"] <= r["median_seconds"]
        assert r["median_tflops"] == pytest.approx(r["flops_per_gemm"] / r["median_seconds"] / 1e12)
        assert r["pct_of_peak_median"] == pytest.approx(100 * r["median_tflops"] * 1e12 / j["peak"]["flops"])
    step = j["gpt2_step"]
    assert step["flops"] == pytest.approx(sum(r["per_step"] * r["flops_per_gemm"] for r in gpt2.values()))
    assert step["seconds"] == pytest.approx(sum(r["per_step"] * r["median_seconds"] for r in gpt2.values()))
    assert j["peak"]["known"] and "nominal CPU peak" in j["peak"]["source"]
    assert j["vocab"] == 50257


def test_the_lm_head_takes_the_vocabulary_given(tmp_path):
    # GPT-2's 50257 against the 50304 that Megatron-LM and llm.c pad it to: a GPU's GEMMs can differ
    result, j = gemm_rate(tmp_path, "--backend", "cpu", "--dtype", "fp32", "--shapes", "gpt2", "--tokens", 4,
                          "--vocab", 96)
    assert result.returncode == 0, result.stderr
    lm = {r["name"]: r for r in j["results"] if r["name"].startswith("lm_head")}
    assert (lm["lm_head fwd"]["n"], lm["lm_head dX"]["k"], lm["lm_head dW"]["m"], j["vocab"]) == (96, 96, 96, 96)


def test_the_lm_head_has_the_trainers_padded_logits_rows(tmp_path):
    # The trainer pads the logits' rows to the backend's GEMM row multiple (8 on a GPU and on the
    # emulated device, 1 on the CPU): the LM head's C and its gradients' dY have that row length.
    for backend, ld in (("emulated", 104), ("cpu", 0)):
        result, j = gemm_rate(tmp_path, "--backend", backend, "--dtype", "fp32", "--shapes", "gpt2", "--tokens", 4,
                              "--vocab", 97)
        assert result.returncode == 0, result.stderr
        lm = {r["name"]: r for r in j["results"] if r["name"].startswith("lm_head")}
        assert (lm["lm_head fwd"]["ldc"], lm["lm_head dX"]["lda"], lm["lm_head dW"]["lda"]) == (ld, ld, ld), backend
        assert (lm["lm_head fwd"]["n"], lm["lm_head dX"]["k"], lm["lm_head dW"]["m"]) == (97, 97, 97)
        assert all(r["lda"] == r["ldc"] == 0 for r in j["results"] if not r["name"].startswith("lm_head"))


def test_bf16_mixed_times_the_trainers_gemms_against_the_bf16_peak(tmp_path):
    """fp32 tensors whose operands the backend rounds (the trainer's GEMMs under bf16-mixed, the
    conversions in the time), held against the bf16 peak, not the fp32 one."""
    result, j = gemm_rate(tmp_path, "--dtype", "bf16-mixed", "--shapes", "gpt2", "--tokens", 8, "--vocab", 97,
                          "--peak-device", "NVIDIA H200")
    assert result.returncode == 0, result.stderr
    assert (j["dtype"], j["c_dtype"], j["accumulate"]) == ("bf16-mixed", "fp32", "fp32")
    assert j["peak"]["precision"] == "bf16" and j["peak"]["flops"] == pytest.approx(989.5e12)
    assert "rounded to bf16 by the backend" in result.stdout
    assert all(r["group"] == "gpt2" for r in j["results"]) and j["gpt2_step"]["tflops"] > 0


@pytest.mark.parametrize("dtype,c_dtype,accumulate", [("bf16", "fp32", "fp32"), ("fp64", "fp64", "fp64")])
def test_each_precision_sets_its_output_and_accumulation(tmp_path, dtype, c_dtype, accumulate):
    result, j = gemm_rate(tmp_path, "--dtype", dtype, "--sizes", "40")
    assert result.returncode == 0, result.stderr
    assert (j["dtype"], j["c_dtype"], j["accumulate"]) == (dtype, c_dtype, accumulate)
    assert j["gpt2_step"] is None and len(j["results"]) == 1


def test_bf16_output_as_pytorchs_bf16_matmul(tmp_path):
    result, j = gemm_rate(tmp_path, "--dtype", "bf16", "--c-dtype", "bf16", "--sizes", "40", "--shapes", "gpt2",
                          "--tokens", 8, "--vocab", 97)
    assert result.returncode == 0, result.stderr
    assert (j["dtype"], j["c_dtype"], j["accumulate"]) == ("bf16", "bf16", "fp32")
    assert "A/B bf16, C bf16" in result.stdout and j["gpt2_step"]["tflops"] > 0


@pytest.mark.parametrize("args,expected", [
    (("--dtype", "fp32", "--c-dtype", "bf16"), "--c-dtype bf16 with A/B in fp32: C is fp32 (bf16 C only with --dtype bf16)"),
    (("--dtype", "bf16", "--c-dtype", "fp64"), "--c-dtype fp64 with A/B in bf16: C is fp32 or bf16"),
    (("--dtype", "bf16-mixed", "--c-dtype", "fp32"), "--c-dtype is for --dtype bf16, fp32 or fp64, not bf16-mixed"),
    (("--dtype", "bf16", "--c-dtype", "fp17"), "fp17"),
])
def test_an_output_dtype_the_inputs_do_not_take_is_refused(tmp_path, args, expected):
    result, _ = gemm_rate(tmp_path, *args, "--sizes", "16")
    assert result.returncode != 0 and expected in result.stderr, result.stderr
    assert not (tmp_path / "gemm.json").exists()


@pytest.mark.parametrize("dtype,tflops", [("bf16", 989.5), ("fp32", 67), ("fp64", 67)])
def test_a_gpu_is_held_against_its_datasheet_peak_for_the_precision(tmp_path, dtype, tflops):
    # The name a CUDA backend reports is "cuda (NVIDIA H200, sm_90, device 0)": the device part is
    # what the table is searched for; fp32 means the plain fp32 pipeline (TF32 off).
    result, j = gemm_rate(tmp_path, "--dtype", dtype, "--sizes", "32", "--peak-device", "NVIDIA H200")
    assert result.returncode == 0, result.stderr
    assert j["peak"]["known"] and j["peak"]["flops"] == pytest.approx(tflops * 1e12)
    assert j["peak"]["precision"] == dtype and "H200" in j["peak"]["source"]


@pytest.mark.parametrize("device,why", [("NVIDIA Imaginary 9000", "is not in the peak table"),
                                        ("NVIDIA H100 80GB HBM3 MIG 1g.10gb", "is a MIG slice")])
def test_a_device_the_table_lacks_is_refused_before_timing(tmp_path, device, why):
    # The flag's only use is to name a peak: a misspelt device would have printed every row's share
    # of the peak as n/a and exited 0, a run that looks measured against nothing.
    result, j = gemm_rate(tmp_path, "--dtype", "bf16", "--sizes", "32", "--peak-device", device)
    assert result.returncode != 0 and j is None
    assert f'--peak-device "{device}": {device} {why}' in result.stderr
    assert "Known devices: NVIDIA H100 PCIe," in result.stderr and "--peak-tflops" in result.stderr
    assert "square 32" not in result.stdout


def test_a_device_without_a_datasheet_figure_for_the_precision_is_refused(tmp_path):
    result, j = gemm_rate(tmp_path, "--dtype", "fp64", "--sizes", "32", "--peak-device", "NVIDIA L4")
    assert result.returncode != 0 and j is None
    assert "NVIDIA L4 has no datasheet figure for fp64" in result.stderr


def test_a_stated_peak_wins(tmp_path):
    result, j = gemm_rate(tmp_path, "--sizes", "32", "--peak-device", "NVIDIA H200", "--peak-tflops", "2")
    assert result.returncode == 0, result.stderr
    assert j["peak"]["flops"] == pytest.approx(2e12) and "stated" in j["peak"]["source"]


@pytest.mark.parametrize("args,message", [
    (["--dtype", "int32"], "dtype"),
    (["--shapes", "llama"], "--shapes knows only gpt2"),
    (["--sizes", "0"], "--sizes must be positive"),
    (["--shapes", "gpt2", "--vocab", "0"], "--vocab must be positive"),
    (["--repeat", "0", "--sizes", "16"], "--repeat must be at least 1"),
    (["--backend", "nosuch"], "nosuch"),
])
def test_bad_options_are_clear_errors(tmp_path, args, message):
    require_tripod()
    result = subprocess.run([str(TRIPOD), "bench", "gemm-rate", *args], capture_output=True, text=True, timeout=60,
                            env=MPI_ENV)
    assert result.returncode == 1, (result.returncode, result.stderr)  # 2 would be an internal error
    assert "tripod: error:" in result.stderr and message in result.stderr


@pytest.mark.parametrize("precision", ["fp32", "bf16-mixed"])
def test_bench_train_reports_mfu_against_the_backend_peak(tmp_path, precision):
    require_tripod()
    out = tmp_path / "bench.json"
    result = subprocess.run([str(TRIPOD), "bench", "train", "--config", "tiny", "--set", "model.vocab_size=4096",
                             "--set", f"train.dtype={precision}", "--batch", "2", "--seq-len", "16", "--steps", "1",
                             "--gemm-size", "64", "--json", str(out)],
                            capture_output=True, text=True, timeout=300, env=MPI_ENV)
    assert result.returncode == 0, result.stderr
    j = json.loads(out.read_text())
    # The CPU emulates bf16 GEMMs in fp32 arithmetic: its fp32 peak either way (a GPU's bf16-mixed
    # run is held against the bf16 peak).
    assert "nominal CPU peak" in j["peak_source"] and "fp32 FLOP/cycle" in j["peak_source"]
    assert j["dtype"] == precision
    assert j["mfu"] == pytest.approx(j["model_flops_per_second"] / j["peak_flops"])
    assert "MFU " in result.stdout
    # memory against the backend's own allocator, where the tensors live (a GPU's are not in the RSS):
    # on the CPU the accounting is the peak but for the allocator's 64-byte padding of small tensors
    # (bf16-mixed's loss gradient is written over its bf16 logits since 2026-12-06: no transient
    # copy, which had been N x V x 2 = 256 KiB here)
    by_hand = j["state_bytes"] + j["activation_bytes"] + j["transient_bytes"]
    assert j["transient_bytes"] == 0
    assert by_hand <= j["allocator_peak_bytes"] <= by_hand + 4096, (by_hand, j["allocator_peak_bytes"])
    assert "the cpu backend's allocator peak" in result.stdout and "+ -" not in result.stdout
    # the baseline GEMM runs under the step's own precision policy
    assert f"threads, {precision} GEMMs:" in result.stdout


def test_bench_trains_peak_rss_is_the_trainings_not_the_sgemm_baselines(tmp_path):
    # The kernel's high-water mark kept the 2048^3 baseline's three 16 MiB matrices, more than this
    # model's whole step: the "training's" peak RSS moved with --gemm-size. It is reset after them.
    require_tripod()
    out = tmp_path / "bench.json"
    result = subprocess.run([str(TRIPOD), "bench", "train", "--config", "tiny", "--set", "model.vocab_size=256",
                             "--batch", "1", "--seq-len", "8", "--steps", "1", "--gemm-size", "2048", "--json",
                             str(out)], capture_output=True, text=True, timeout=300, env=MPI_ENV)
    assert result.returncode == 0, result.stderr
    j = json.loads(out.read_text())
    assert j["base_rss_bytes"] <= j["peak_rss_bytes"] < j["baseline_rss_bytes"], j


def test_a_region_lasts_the_time_asked_for_a_fast_call(tmp_path):
    # Regions were capped at a million calls: a 4x4 GEMM's (~40 ns) lasted 39 ms of the 5 s the header
    # promised. The calls come from a probe of the call repeated until it lasts a millisecond.
    require_tripod()
    out = tmp_path / "gemm.json"
    result = subprocess.run([str(TRIPOD), "bench", "gemm-rate", "--repeat", "1", "--sizes", "4", "--min-time-ms", "300",
                             "--json", str(out)], capture_output=True, text=True, timeout=300, env=MPI_ENV)
    assert result.returncode == 0, result.stderr
    (row,) = json.loads(out.read_text())["results"]
    assert row["calls_per_region"] * row["median_seconds"] >= 0.15, row  # half of it, for a noisy machine
