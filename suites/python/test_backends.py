"""`--backend`: the emulated-device backend (CPU arithmetic on memory tagged as a device's, every
collective staged through host memory) gives exactly the CPU backend's results through the
command line - conform's fingerprints of every trajectory bit, training losses, collective checks -
and a backend that is not built, or does not exist, is a clear error listing those that are."""
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tripod_cli import MPI_ENV, TRIPOD, mpirun_command, require_tripod

SMALL = ["--set", "model.n_layer=2", "--set", "model.d_model=32", "--set", "model.n_head=2",
         "--set", "model.d_ff=64", "--set", "model.context=16", "--set", "train.seq_len=16",
         "--set", "train.batch_size=8", "--set", "train.eval_batches=1", "--set", "train.steps=4",
         "--set", "optim.warmup_steps=1", "--set", "train.eval_every=2"]

# One of every kind: plain DP, each ZeRO stage, TP with and without SP, every pipeline schedule, 3D.
LAYOUTS = ["tp1-pp1-dp8-z0-mb1", "tp1-pp1-dp4-z3-mb2", "tp2-pp1-dp4-z2-mb1-sp", "tp4-pp1-dp2-z1-mb2",
           "tp1-pp2-dp4-z0-mb2-afab", "tp2-pp2-dp2-z1-mb4-1f1b", "tp2-pp2-dp2-z3-mb4-sp-interleaved-v2",
           "tp1-pp4-dp2-z2-mb4-1f1b"]


def run(cmd, timeout=200):
    require_tripod()
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, env=MPI_ENV)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    out = tmp_path_factory.mktemp("corpus") / "markov"
    result = run([TRIPOD, "data", "synthetic", "--out", out, "--vocab-size", "64", "--order", "1", "--tokens", "20000"])
    assert result.returncode == 0, result.stderr
    return out


@pytest.mark.parametrize("dtype", ["fp64", "fp32"])
def test_conform_on_the_emulated_device_is_bit_identical_to_cpu(tmp_path, dtype):
    records = {}
    for backend in ("cpu", "emulated"):
        out = tmp_path / f"{backend}.json"
        result = run(mpirun_command(8, "conform", "--dtype", dtype, "--backend", backend, "--layouts", *LAYOUTS,
                                    "--json", out, timeout=180))
        assert result.returncode == 0, result.stdout + result.stderr
        records[backend] = json.loads(out.read_text())
    cpu, emulated = records["cpu"], records["emulated"]
    assert emulated["backend"] == "emulated" and "emulated" in run(
        [TRIPOD, "conform", "--help"]).stdout
    assert cpu["reference_fingerprint"] == emulated["reference_fingerprint"]
    for a, b in zip(cpu["layouts"], emulated["layouts"], strict=True):
        assert a["layout"] == b["layout"] and a["pass"] and b["pass"]
        assert a["fingerprint"] == b["fingerprint"], a["layout"]
        assert len(a["fingerprint"]) == 16


def metrics_of(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()[1:]]


@pytest.mark.parametrize("ranks,layout", [(1, []), (2, ["--zero", "1"]), (4, ["--tp", "2", "--pp", "2",
                                                                               "--microbatches", "2"])])
def test_training_on_the_emulated_device_gives_the_cpu_losses_exactly(corpus, tmp_path, ranks, layout):
    runs = {}
    for backend in ("cpu", "emulated"):
        metrics = tmp_path / f"{backend}.jsonl"
        args = ["train", "--config", "tiny", "--set", f"data.dir={corpus}", "--set", f"train.metrics={metrics}",
                *SMALL, *layout, "--backend", backend]
        result = run(mpirun_command(ranks, *args) if ranks > 1 else [TRIPOD, *args])
        assert result.returncode == 0, result.stdout + result.stderr
        assert f"backend {'emulated' if backend == 'emulated' else 'cpu'}" in result.stdout
        runs[backend] = metrics_of(metrics)
    for key in ("loss", "grad_norm", "val_loss"):
        assert [r.get(key) for r in runs["cpu"]] == [r.get(key) for r in runs["emulated"]], key


def test_collective_benchmark_on_emulated_device_buffers_checks_clean(tmp_path):
    out = tmp_path / "comm.json"
    result = run(mpirun_command(4, "bench", "comm", "all", "-b", "8", "-e", "64K", "-f", "8", "-n", "2",
                                "--backend", "emulated", "-J", out))
    assert result.returncode == 0, result.stdout + result.stderr
    records = json.loads(out.read_text())
    assert records["settings"]["backend"] == "emulated"
    assert records["results"] and all(r["wrong"] == 0 for r in records["results"])
    assert "Out of bounds values : 0 OK" in result.stdout


def built_backends():
    result = run([TRIPOD, "bench", "train", "--backend", "tpu"])
    return result.stderr.split("built into this binary: ")[1].split(")")[0].split(", ")


def has_gpu():
    return subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode == 0 if shutil.which("nvidia-smi") \
        else False


@pytest.mark.parametrize("backend", ["cuda", "tpu"])
def test_an_unavailable_backend_is_a_clear_error(corpus, backend):
    built = built_backends()
    assert built[:2] == ["cpu", "emulated"] and set(built) <= {"cpu", "emulated", "cuda"}
    if backend == "tpu":
        message = f"unknown backend 'tpu' (built into this binary: {', '.join(built)})"
    elif "cuda" in built:
        if has_gpu():
            pytest.skip("a GPU is present: the CUDA backend is available, not an error")
        message = "backend 'cuda': no usable CUDA device"
    else:
        message = "backend 'cuda' is not built into this binary"
    for args in (["train", "--config", "tiny", "--set", f"data.dir={corpus}", *SMALL],
                 ["bench", "train", "--config", "tiny", "--set", "model.vocab_size=64", "--steps", "1"]):
        result = run([TRIPOD, *args, "--backend", backend])
        assert result.returncode == 1, result.stdout + result.stderr
        assert message in result.stderr
    result = run(mpirun_command(2, "conform", "--backend", backend))
    assert result.returncode != 0 and message in result.stderr


def test_check_backend_only_takes_several_names():
    # the GPU check's sanitizer step runs every kernel family in one process
    result = run([TRIPOD, "check-backend", "--dtype", "fp32", "bf16", "--only", "layernorm", "adamw"])
    assert result.returncode == 0, result.stdout + result.stderr
    ops = {line.split()[0] for line in result.stdout.splitlines()[2:] if line.endswith("PASS")}
    # a name matches every operation that contains it: the LayerNorm that writes a bf16 operand too,
    # AdamW over many runs too
    assert ops == {"layernorm_forward/backward", "layernorm_operand", "adamw", "adamw_runs"}, result.stdout
    result = run([TRIPOD, "check-backend", "--only", "no-such-op", "nor-this"])
    assert result.returncode == 1 and "--only 'no-such-op', 'nor-this' matches no operation" in result.stderr
    # adamw exists, in the fp32 and fp64 groups: the message says which groups were searched
    result = run([TRIPOD, "check-backend", "--dtype", "bf16", "--only", "adamw"])
    assert result.returncode == 1 and "--only 'adamw' matches no operation of the --dtype group(s) bf16" in result.stderr


def test_check_backend_runs_the_bf16_cases_as_a_group_of_their_own():
    # The GPU check's check-bf16 step: until 2026-12-05 --dtype bf16 was refused ("bf16 cases come
    # with fp32") and the step showed as skipped.
    cases = {}
    for group in ("fp32", "bf16"):
        result = run([TRIPOD, "check-backend", "--dtype", group, "--only", "convert", "operand"])
        assert result.returncode == 0, result.stdout + result.stderr
        cases[group] = {" ".join(line.split()[:2]) for line in result.stdout.splitlines()[2:] if line.endswith("PASS")}
    assert cases["fp32"] == {"convert fp64->fp32", "convert fp32->fp64"}, cases
    assert {"convert fp32->bf16", "convert bf16->fp64", "gelu_operand fp32->bf16",
            "attention_backward_operand fp32->bf16,"} <= cases["bf16"], cases
    assert not any("fp64->fp32" in c or "fp32->fp64" in c for c in cases["bf16"]), cases
    bad = run([TRIPOD, "check-backend", "--dtype", "fp16"])
    assert bad.returncode != 0 and "--dtype: fp64, fp32 or bf16, not 'fp16'" in bad.stderr


@pytest.mark.parametrize("suite,instead", [("gemm", "gemm-rate"), ("kernels", "kernel-rate")])
def test_the_cpu_microbenchmarks_refuse_a_gpu_and_name_the_gpu_ones(suite, instead):
    # their yardsticks (the CPU's nominal peak, a STREAM triad) would make a GPU's figures nonsense
    result = run([TRIPOD, "bench", suite, "--backend", "cuda", "--quick"])
    assert result.returncode != 0
    assert f"on a GPU run `tripod bench {instead} --backend cuda`" in result.stderr, result.stderr


def test_flash_attention_asked_where_it_cannot_run_says_why(corpus, tmp_path):
    """TRIPOD_CUDA_ATTENTION asks the emulated device for flash attention; where the policy or the
    shape rules it out, the GEMM attention runs and the start of the run says why (the backend's
    name still ends in "flash attention")."""
    require_tripod()

    def start(*extra):
        result = subprocess.run([str(c) for c in [TRIPOD, "train", "--backend", "emulated", "--config", "tiny",
                                                  "--set", f"data.dir={corpus}", *SMALL, "--set", "train.steps=1",
                                                  *extra]],
                                capture_output=True, text=True, timeout=200,
                                env={**MPI_ENV, "TRIPOD_CUDA_ATTENTION": "flash"})
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
        assert "flash attention)" in result.stdout.splitlines()[0], result.stdout
        return result.stdout

    assert ("note: TRIPOD_CUDA_ATTENTION=flash takes fp32 tensors under bf16-mixed only (this run: fp32, not "
            "bf16-mixed): the GEMM attention runs instead") in start()
    # SMALL's head size 16 at T = 16: the flash state needs T > head size
    assert "note: TRIPOD_CUDA_ATTENTION=flash does not take head size 16 at T = 16" in start(
        "--set", "train.dtype=bf16-mixed")


def test_conform_under_flash_mma_keeps_qkv_in_bf16_and_passes_every_layout(tmp_path):
    """flash-mma on the emulated device at a head size its kernels take (16, at T 24): every 2-rank
    layout (TP with and without SP, ZeRO, pipelines, recomputation) passes with qkv kept in bf16
    (Backend::attention_input_dtype: c_attn's GEMM writes it, the kernels read it), and every
    layout accounts less activation memory than under flash, whose blocks keep qkv in fp32 (and the
    backward's output gradient of attention, which flash-mma keeps in bf16 too but under selective
    recomputation)."""
    require_tripod()
    shape = ["--set", "model.n_head=2", "--set", "model.context=24", "--set", "train.seq_len=24"]
    rows = {}
    for attention in ("flash", "flash-mma"):
        out = tmp_path / f"{attention}.json"
        result = subprocess.run(mpirun_command(2, "conform", "--backend", "emulated", "--comm", "staged", "--dtype",
                                               "bf16-mixed", *shape, "--json", out, timeout=240),
                                capture_output=True, text=True, timeout=300,
                                env={**MPI_ENV, "TRIPOD_CUDA_ATTENTION": attention})
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
        assert "flash attention" in result.stdout.splitlines()[0] and "note:" not in result.stdout
        rows[attention] = {row["layout"]: row for row in json.loads(out.read_text())["layouts"]}
    mma, flash = rows["flash-mma"], rows["flash"]
    assert len(mma) > 80 and all(row["pass"] for row in mma.values()), [k for k, r in mma.items() if not r["pass"]]
    # (the accounting's transient part, buffers in flight, varies from run to run by up to 0.06 MiB
    # here, more than the 0.02 MiB of qkv bytes: the rest of it is compared, which does not)
    steady = {name: row["accounted_mib"] - row["transient_mib"]
              for name, row in mma.items() if row.get("accounted_mib")}
    assert len(steady) > 80
    assert all(mib < flash[name]["accounted_mib"] - flash[name]["transient_mib"] for name, mib in steady.items())
