"""ci/gpu-check.sh without a GPU: the dry run CI relies on (everything the real run needs is found,
each step's CPU form runs in miniature, the GPU steps are reported skipped), and the guarantees the
real run rests on - a step that hangs or fails is reported as such and turns the run red, missing
binaries fail the probe, a folder of other files is never emptied - plus the pieces it runs: the
training comparison, the summary, and the PyTorch peer on the CPU."""
import json
import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tripod_cli import TRIPOD, require_tripod

SOURCE = Path(os.environ.get("TRIPOD_SOURCE_DIR", Path(__file__).resolve().parents[2]))
GPU_CHECK = SOURCE / "ci" / "gpu-check.sh"


def gpu_check(out, *args, env=None, timeout=400):
    require_tripod()
    full_env = {**os.environ, "TRIPOD_PYTHON": sys.executable, "OMP_NUM_THREADS": "2", **(env or {})}
    return subprocess.run(["bash", str(GPU_CHECK), str(out), "--build-dir", str(TRIPOD.parent.parent), *args],
                          capture_output=True, text=True, timeout=timeout, env=full_env)


def summary(out):
    return json.loads((out / "summary.json").read_text())


def test_dry_run_finds_everything_and_runs_each_cpu_form(tmp_path):
    out = tmp_path / "dry"
    result = gpu_check(out, "--dry-run")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    s = summary(out)
    assert s["mode"] == "dry-run" and s["overall"] == "pass"
    steps = {x["name"]: x for x in s["steps"]}
    gpu_steps = ["check-fp64", "check-fp32", "check-bf16", "train-fp64", "train-fp32", "train-bf16", "train-rerun",
                 "golden", "gemm-bf16", "gemm-fp32", "bench-train", "flash", "flash-mma", "peer", "gtest",
                 "sanitizer"]
    for name in gpu_steps:
        assert steps[name]["status"] == "skipped" and "no GPU" in steps[name]["reason"], steps[name]
    for name in ["probe", "data", "dry-check-fp64", "dry-check-fp32", "dry-train-fp64", "dry-train-fp32",
                 "dry-train-bf16", "dry-train-rerun", "dry-golden", "dry-gemm-bf16", "dry-gemm-fp32",
                 "dry-bench-train", "dry-peer"]:
        assert steps[name]["status"] == "pass", steps[name]
    assert "MATCH" in steps["dry-golden"]["key"] and "DIFFERS" not in steps["dry-golden"]["key"]
    # the peer's attention per SDPA backend, set beside the kernels step's at the same shape
    assert "attention B1 T64 H1 hd64 fp32 fwd+bwd: " in steps["dry-peer"]["key"], steps["dry-peer"]
    assert "x PyTorch's " in steps["dry-peer"]["key"], steps["dry-peer"]
    # ZeRO 1-3's bf16 weight gathers against -gfp32, both heads, on the emulated device
    assert steps["dry-bf16-gathers"]["status"] == "pass", steps["dry-bf16-gathers"]
    assert steps["dry-bf16-gathers"]["key"].count("4/4 pairs with the same fingerprint") == 2
    # bf16: its own run (the bf16 group of check-backend)
    assert steps["dry-check-bf16"]["status"] == "pass", steps["dry-check-bf16"]
    assert "DRY RUN" in result.stdout and "PASS" in result.stdout
    # the probe records the build and its libraries as the binary reports them
    version = (out / "probe" / "version.txt").read_text()
    assert version.startswith("tripod ") and "OpenBLAS" in version and "Open MPI" in version, version
    # the plan lists every step with its limit, and each CPU form left its results
    plan = (out / "plan.txt").read_text()
    assert all(name in plan for name in gpu_steps)
    assert json.loads((out / "dry-train-rerun" / "compare.json").read_text())["pass"]
    assert json.loads((out / "dry-gemm-bf16" / "gemm.json").read_text())["dtype"] == "bf16"
    # bf16 C (as PyTorch's bf16 matmul) and PyTorch's own rate on the same squares, in the key figure
    assert json.loads((out / "dry-gemm-bf16" / "gemm-bf16out.json").read_text())["c_dtype"] == "bf16"
    assert json.loads((out / "dry-gemm-bf16" / "torch-gemm.json").read_text())["results"][0]["m"] == 64
    assert "bf16 C 64^3" in steps["dry-gemm-bf16"]["key"] and "Tripod/PyTorch" in steps["dry-gemm-bf16"]["key"]
    assert json.loads((out / "dry-peer" / "peer.json").read_text())["benchmark"] == "pytorch_peer"
    # bench-train's second run, with the vocabulary padded (500 -> 512), in the key figure
    assert json.loads((out / "dry-bench-train" / "bench-padded.json").read_text())["padded_vocab"] == 512
    assert "vocabulary padded to 512" in steps["dry-bench-train"]["key"]
    # and its third, with the CUDA backend's fused forms off (TRIPOD_CUDA_FUSIONS=none), as a ratio
    assert json.loads((out / "dry-bench-train" / "bench-unfused.json").read_text())["tokens_per_second"] > 0
    assert "fusions off: " in steps["dry-bench-train"]["key"] and "(fused " in steps["dry-bench-train"]["key"]
    # and its fourth, the padded vocabulary at a larger batch (the CPU form: 4 sequences)
    large = json.loads((out / "dry-bench-train" / "bench-large.json").read_text())
    assert (large["batch"], large["padded_vocab"]) == (4, 512)
    assert "; B4 padded: " in steps["dry-bench-train"]["key"]
    # kernels runs twice, the second time with the fused forms off, and gives LayerNorm backward's ratio
    assert json.loads((out / "dry-kernels" / "kernels-unfused.json").read_text())["results"]
    assert "layernorm bwd: " in steps["dry-kernels"]["key"] and "fusions off" in steps["dry-kernels"]["key"]
    # the flash step's CPU form: its check, benchmarks and speed report, against the dry kernels and bench-train
    assert steps["dry-flash"]["status"] == "pass", steps["dry-flash"]
    assert "attention fwd bf16" in steps["dry-flash"]["key"] and " vs missing" not in steps["dry-flash"]["key"]
    assert "train loss max rel" in steps["dry-flash"]["key"], steps["dry-flash"]  # emulated flash vs the CPU
    # flash-mma (the forward in mma.sync fragments), the same parts on the emulated device
    assert steps["dry-flash-mma"]["status"] == "pass", steps["dry-flash-mma"]
    assert "train loss max rel" in steps["dry-flash-mma"]["key"], steps["dry-flash-mma"]
    assert "flash attention (mma tiles)" in (out / "dry-flash-mma" / "bench.json").read_text()
    speed = json.loads((out / "dry-flash" / "speed.json").read_text())
    assert speed["step"]["speedup"] is not None
    assert speed["large_step"]["batch"] == 4 and speed["large_step"]["speedup"] is not None, speed  # the padded B4
    for name in ["dry-check-fp64", "dry-train-fp64", "dry-gemm-fp32", "dry-bench-train", "dry-peer"]:
        assert steps[name]["key"], name  # a key figure read from the step's JSON
    # the steps added for issues 15 and 17 run their CPU forms too, each to its verdict
    for name in ["dry-nccl-1g", "dry-nccl-multi", "overlap-cpu", "pipeline-cpu"]:
        assert steps[name]["status"] == "pass" and steps[name]["key"], steps[name]
    assert "#wrong 0" in steps["dry-nccl-1g"]["key"] and "passed, 0 failed" in steps["dry-nccl-multi"]["key"]


@pytest.mark.parametrize("fake,status", [("hang", "timeout"), ("fail", "fail")])
def test_a_hanging_or_failing_step_turns_the_run_red(tmp_path, fake, status):
    out = tmp_path / fake
    result = gpu_check(out, "--dry-run", "--only", f"probe,fake-{fake}", "--export", tmp_path / "export",
                       env={"TRIPOD_GPU_CHECK_FAKE_STEP": fake}, timeout=120)
    assert result.returncode != 0
    s = summary(out)
    steps = {x["name"]: x for x in s["steps"]}
    assert steps[f"fake-{fake}"]["status"] == status
    assert steps["probe"]["status"] == "pass"
    assert s["overall"] == "fail" and "FAIL" in result.stdout
    if fake == "hang":  # killed at its limit (16 s), not waited for (it sleeps 60 s)
        assert steps["fake-hang"]["seconds"] < 30
    exported = sorted(p.name for p in (tmp_path / "export").iterdir())
    assert exported == ["gpu-check.tar.gz", "summary.json", "summary.txt"]


def run_fake_step(tmp_path, fake):
    """The dry run's probe and one fake step (ci/gpu-check.sh TRIPOD_GPU_CHECK_FAKE_STEP), which must
    fail the run: its folder, the run's result and the fake step's summary record."""
    out = tmp_path / fake
    result = gpu_check(out, "--dry-run", "--only", f"probe,fake-{fake}", env={"TRIPOD_GPU_CHECK_FAKE_STEP": fake},
                       timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    return out, result, {x["name"]: x for x in summary(out)["steps"]}[f"fake-{fake}"]


def test_a_silent_exit_124_before_the_limit_is_the_programs_own_failure_not_a_timeout(tmp_path):
    # tripod's communication watchdog exits 124, as `timeout` does; an empty log once ended the
    # whole script under pipefail, with no record and an earlier summary saying PASS
    out, result, step = run_fake_step(tmp_path, "exit124")
    assert step["status"] == "fail" and "before its 10 s limit" in step["reason"], step
    assert summary(out)["overall"] == "fail"


def test_a_crashed_program_is_the_reason_not_the_steps_last_words(tmp_path):
    # The H100 run's segfaults read "exit 1: <the step's last line>"; the crash report's first line
    # (reference/core/crash_report.h) now says what happened and where the stack is.
    out, result, step = run_fake_step(tmp_path, "crash")
    assert step["status"] == "fail", step
    assert step["reason"].startswith("exit 1: tripod: fatal signal SIGSEGV (segmentation fault) in main;"), step
    assert "-> main" in (out / "fake-crash" / "stack-tripod.txt").read_text()  # the named stack, beside the log
    assert "its stack is in fake-crash/log.txt" in step["reason"] and "check-backend failed" not in step["reason"]


def test_a_failed_mpi_steps_reason_is_the_ranks_error_not_mpiruns_banner(tmp_path):
    # MPI steps' failures read "exit 1: -------...", a rule of the banner mpirun prints after a rank's error.
    out, result, step = run_fake_step(tmp_path, "mpi-error")
    assert step["reason"] == "exit 1: tripod: error: rank 1 of 2: the ranks read different training tokens from " \
                             "data.dir data", step


def test_a_step_cut_by_the_budget_is_unrun_not_a_timeout(tmp_path):
    # its own limit is 16 s; a 12 s budget gives it what is left, and reaching that is not its fault.
    # (A step starts only with 5 s of the budget left: the budget leaves gpu-check's start-up 7 s,
    # where a 6 s budget under a limit of 8 had left it 1, too little on a loaded machine.)
    out = tmp_path / "cut"
    result = gpu_check(out, "--dry-run", "--only", "fake-hang", "--budget", "12",
                       env={"TRIPOD_GPU_CHECK_FAKE_STEP": "hang"}, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    step = summary(out)["steps"][0]
    assert step["status"] == "unrun" and "all the budget had left" in step["reason"], step
    assert summary(out)["overall"] == "incomplete" and "INCOMPLETE" in result.stdout


def test_a_process_a_step_leaves_running_is_killed(tmp_path):
    # a rank in a process group of its own outlives `timeout`'s kill of mpirun; the step's marker finds it
    out = tmp_path / "orphan"
    result = gpu_check(out, "--dry-run", "--only", "fake-orphan", env={"TRIPOD_GPU_CHECK_FAKE_STEP": "orphan"},
                       timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    pid = int((out / "fake-orphan" / "orphan.pid").read_text())
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        state = "gone"
    assert state in ("gone", "Z", "X"), f"process {pid} still running ({state})"
    assert "killed 1 process(es) step fake-orphan left running" in (out / "fake-orphan" / "log.txt").read_text()


def test_steps_the_budget_leaves_no_time_for_make_the_run_incomplete_not_green(tmp_path):
    # with a 1 s budget no step may start: nothing fails, nothing is measured, and the verdict
    # says so (and the export is written all the same)
    out = tmp_path / "short"
    result = gpu_check(out, "--dry-run", "--only", "probe,data", "--budget", "1", "--export", tmp_path / "export",
                       timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    s = summary(out)
    assert [(x["name"], x["status"]) for x in s["steps"]] == [("probe", "unrun"), ("data", "unrun")]
    assert s["overall"] == "incomplete" and "INCOMPLETE" in result.stdout and "2 not run" in result.stdout
    assert (tmp_path / "export" / "summary.json").exists()


def test_only_brings_the_corpus_and_the_export_leaves_out_parameter_files(tmp_path):
    # --only train-fp32 without data failed on a GPU ("data directory ... does not exist"); and the
    # export came back over the device tool's 16 MiB per file with the golden step's weights in it
    out, export = tmp_path / "only", tmp_path / "export"
    result = gpu_check(out, "--dry-run", "--only", "train-fp32,golden", "--export", export)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "--only adds step data" in result.stdout
    steps = {x["name"]: x["status"] for x in summary(out)["steps"]}
    assert steps["data"] == steps["dry-train-fp32"] == steps["dry-golden"] == "pass", steps
    assert list(out.glob("dry-golden/**/*.safetensors"))  # they stay in the results folder
    import tarfile
    with tarfile.open(export / "gpu-check.tar.gz") as tar:
        names = tar.getnames()
    assert any(n.endswith("compare.json") for n in names) and any("dry-golden" in n for n in names), names
    assert not [n for n in names if n.endswith((".safetensors", ".npy"))]
    assert (export / "gpu-check.tar.gz").stat().st_size < 2 << 20


def test_missing_binaries_fail_the_probe(tmp_path):
    empty = tmp_path / "empty-build"
    (empty / "reference").mkdir(parents=True)
    out = tmp_path / "out"
    require_tripod()
    result = subprocess.run(["bash", str(GPU_CHECK), str(out), "--dry-run", "--build-dir", str(empty), "--only",
                             "probe"], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "TRIPOD_PYTHON": sys.executable})
    assert result.returncode != 0
    probe = summary(out)["steps"][0]
    assert probe["status"] == "fail" and "not found" in (out / "probe" / "log.txt").read_text()


def test_the_cuda_backends_run_time_library_is_the_one_the_check_looks_for_and_is_not_linked():
    # The CUDA backend loads cuBLASLt itself (dlopen), so ldd does not list it: gpu-check finds it
    # by a name of its own, which must be the one the binary loads. Linking it again would cost
    # every process start ~0.1 s.
    require_tripod()
    linked = subprocess.run(["ldd", str(TRIPOD)], capture_output=True, text=True, timeout=60).stdout
    if "libcudart" not in linked:
        pytest.skip("this build has no CUDA backend")
    assert "libcublasLt" not in linked, linked
    # the name as a C string (the compiler may also build it from immediates, in pieces)
    loaded = set(re.findall(rb"libcublasLt\.so\.[0-9]+(?=\x00)", TRIPOD.read_bytes()))
    assert len(loaded) == 1, loaded
    check_lib = (SOURCE / "ci" / "gpu-check-lib.sh").read_text()
    names = re.search(r'^CUDA_SONAMES_LOADED_AT_RUN_TIME="([^"]*)"', check_lib, re.M).group(1).split()
    assert names == [loaded.pop().decode()]


def test_a_folder_of_other_files_is_never_emptied(tmp_path):
    keep = tmp_path / "precious.txt"
    keep.write_text("keep me")
    result = gpu_check(tmp_path, "--dry-run", "--only", "probe", timeout=60)
    assert result.returncode == 2 and "not empty" in result.stderr
    assert keep.read_text() == "keep me"


@pytest.mark.parametrize("env,args,message", [
    ({"GPT2_LARGE_BATCH": "3x2"}, [], "GPT2_LARGE_BATCH must be a whole number >= 0, got '3x2'"),
    ({"GPT2_BATCH": "0"}, [], "GPT2_BATCH must be a whole number >= 1, got '0'"),
    ({}, ["--budget", "7m"], "--budget must be a whole number >= 1, got '7m'"),
])
def test_a_knob_that_is_not_a_whole_number_is_refused_before_any_step(tmp_path, env, args, message):
    # Else a typo would reach a step as a shell test's "integer expression expected", minutes into a lease.
    result = gpu_check(tmp_path / "out", "--dry-run", *args, env=env, timeout=60)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert not (tmp_path / "out").exists()


# ---- the pieces: training comparison, summary ----

def write_metrics(path, losses, norms=None):
    lines = [json.dumps({"event": "start", "step": 0})]
    for i, loss in enumerate(losses):
        lines.append(json.dumps({"step": i, "loss": loss, "grad_norm": (norms or losses)[i]}))
    path.write_text("\n".join(lines) + "\n")
    return path


def compare(*args):
    return subprocess.run([sys.executable, str(SOURCE / "reports" / "compare_training.py"), *map(str, args)],
                          capture_output=True, text=True, timeout=60)


def test_compare_training_tolerance_and_bitwise(tmp_path):
    ref = write_metrics(tmp_path / "ref.jsonl", [7.5, 7.25, 7.0])
    close = write_metrics(tmp_path / "close.jsonl", [7.5 * (1 + 1e-12), 7.25, 7.0])
    far = write_metrics(tmp_path / "far.jsonl", [7.5, 7.25 * (1 + 1e-6), 7.0])
    assert compare("--a", close, "--b", ref, "--rel-tol", 1e-10, "--steps", 3).returncode == 0
    bad = compare("--a", far, "--b", ref, "--rel-tol", 1e-10, "--json", tmp_path / "c.json")
    assert bad.returncode == 1 and "loss differs" in bad.stdout
    assert json.loads((tmp_path / "c.json").read_text())["loss_max_rel"] == pytest.approx(1e-6, rel=1e-3)
    # one ulp apart: within any tolerance, but not bit for bit
    ulp = write_metrics(tmp_path / "ulp.jsonl", [7.5, float(np.nextafter(7.25, 8)), 7.0])
    assert compare("--a", ulp, "--b", ref, "--rel-tol", 1e-15).returncode == 0
    assert compare("--a", ulp, "--b", ref, "--bitwise").returncode == 1
    assert compare("--a", ref, "--b", ref, "--bitwise").returncode == 0
    # a run that stopped early is a failure, not a shorter comparison
    short = write_metrics(tmp_path / "short.jsonl", [7.5, 7.25])
    assert compare("--a", short, "--b", ref, "--rel-tol", 1.0).returncode == 1
    assert compare("--a", ref, "--b", ref, "--rel-tol", 1.0, "--steps", 10).returncode == 1


@pytest.mark.parametrize("case", ["no shared step", "reference without norms", "cut-off line", "no step record"])
def test_compare_training_inputs_it_cannot_compare_are_a_fail_not_a_traceback(tmp_path, case):
    # Each ended in a traceback without the --json the docstring says is written either way: a
    # TypeError formatting None, a KeyError on the reference's grad_norm, a JSONDecodeError naming no file.
    ref = write_metrics(tmp_path / "ref.jsonl", [7.5, 7.25, 7.0])
    other = tmp_path / "other.jsonl"
    if case == "no shared step":
        other.write_text("".join(json.dumps({"step": 10 + i, "loss": 7.0, "grad_norm": 1.0}) + "\n" for i in range(3)))
        expected = "the runs logged different steps: [0, 1, 2] vs [10, 11, 12]"
    elif case == "reference without norms":
        other.write_text("".join(json.dumps({"step": i, "loss": 7.5 - 0.25 * i}) + "\n" for i in range(3)))
        expected = "no gradient norm in both runs at steps [0, 1, 2] (bound 0.1)"
    elif case == "cut-off line":
        other.write_text(ref.read_text() + '{"step": 3, "loss": 6.')
        expected = f"{other}:5: not a JSON record"
    else:
        other.write_text(json.dumps({"event": "start", "step": 0}) + "\n")
        expected = f"{other}: holds no step records"
    result = compare("--a", ref, "--b", other, "--rel-tol", 1e-10, "--norm-rel-tol", 0.1, "--json", tmp_path / "c.json")
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stdout.startswith("FAIL: ") and expected in result.stdout, result.stdout
    assert json.loads((tmp_path / "c.json").read_text())["pass"] is False
    if case == "reference without norms":  # the losses alone are still compared, and pass ungated
        assert compare("--a", ref, "--b", other, "--rel-tol", 1e-10).returncode == 0


def test_compare_training_bitwise_fails_where_both_runs_are_nan(tmp_path):
    # null == null: --bitwise passed two runs whose every loss and gradient norm was NaN.
    nan = write_metrics(tmp_path / "nan.jsonl", [None, None, None])
    result = compare("--a", nan, "--b", nan, "--bitwise")
    assert result.returncode == 1 and "or are NaN (null), at steps [0, 1, 2]" in result.stdout, result.stdout
    losses_only = tmp_path / "losses.jsonl"  # a run that logs no norm still passes on its losses
    losses_only.write_text("".join(json.dumps({"step": i, "loss": 7.0 - i}) + "\n" for i in range(3)))
    assert compare("--a", losses_only, "--b", losses_only, "--bitwise").returncode == 0


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, a in tensors.items():
        raw = a.tobytes()
        header[name] = {"dtype": {np.float32: "F32", np.float64: "F64"}[a.dtype.type], "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def test_compare_training_checkpoints(tmp_path):
    ref = write_metrics(tmp_path / "ref.jsonl", [7.5, 7.25])
    w = np.linspace(-1, 1, 12, dtype=np.float64).reshape(3, 4)
    for name, scale in (("a", 1.0), ("b", 1.0), ("c", 1 + 1e-9)):
        (tmp_path / name).mkdir()
        write_safetensors(tmp_path / name / "model.safetensors", {"wte": w * scale, "ln_f.bias": w[0].astype(np.float32)})
        write_safetensors(tmp_path / name / "optimizer.safetensors", {"m.wte": w})
    same = compare("--a", ref, "--b", ref, "--bitwise", "--ckpt-a", tmp_path / "a", "--ckpt-b", tmp_path / "b")
    assert same.returncode == 0, same.stdout
    off = compare("--a", ref, "--b", ref, "--bitwise", "--ckpt-a", tmp_path / "c", "--ckpt-b", tmp_path / "b",
                  "--json", tmp_path / "off.json")
    assert off.returncode == 1 and "checkpoint files differ" in off.stdout
    ckpt = json.loads((tmp_path / "off.json").read_text())["checkpoint"]
    assert ckpt["worst_param"] == "wte" and ckpt["param_max_rel"] == pytest.approx(1e-9, rel=1e-3)
    gated = compare("--a", ref, "--b", ref, "--rel-tol", 1e-10, "--param-rel-tol", 1e-10, "--ckpt-a", tmp_path / "c",
                    "--ckpt-b", tmp_path / "b")
    assert gated.returncode == 1 and "parameters differ" in gated.stdout


def test_compare_training_counts_a_nan_as_infinitely_far(tmp_path):
    # Python's max() keeps what it holds against a NaN, and numpy's NaN fails every comparison: a NaN
    # parameter in any tensor but the first compared vanished from the worst difference and passed
    # --param-rel-tol; a NaN loss (Tripod's metrics write it as null) ended the script in a TypeError.
    ref = write_metrics(tmp_path / "ref.jsonl", [7.5, 7.25, 7.0])
    nan_loss = write_metrics(tmp_path / "nan.jsonl", [7.5, None, 7.0])
    result = compare("--a", nan_loss, "--b", ref, "--rel-tol", 1.0, "--json", tmp_path / "l.json")
    assert result.returncode == 1 and "loss differs by inf relative" in result.stdout, result.stdout + result.stderr
    assert json.loads((tmp_path / "l.json").read_text())["loss_max_rel"] == float("inf")
    w = np.linspace(-1, 1, 12, dtype=np.float64).reshape(3, 4)
    poisoned = w.copy()
    poisoned[1, 2] = np.nan
    for name, wte in (("a", poisoned), ("b", w)):
        (tmp_path / name).mkdir()
        write_safetensors(tmp_path / name / "model.safetensors", {"ln_f.bias": w[0] * 1.001, "wte": wte})
    gated = compare("--a", ref, "--b", ref, "--rel-tol", 1e-10, "--param-rel-tol", 0.01, "--ckpt-a", tmp_path / "a",
                    "--ckpt-b", tmp_path / "b", "--json", tmp_path / "p.json")
    assert gated.returncode == 1 and "parameters differ by inf in wte" in gated.stdout, gated.stdout + gated.stderr
    # and the same with the NaN in the reference
    gated = compare("--a", ref, "--b", ref, "--rel-tol", 1e-10, "--param-rel-tol", 0.01, "--ckpt-a", tmp_path / "b",
                    "--ckpt-b", tmp_path / "a")
    assert gated.returncode == 1 and "parameters differ by inf in wte" in gated.stdout, gated.stdout + gated.stderr


def run_summary(out, *args):
    return subprocess.run([sys.executable, str(SOURCE / "reports" / "gpu_check_summary.py"), str(out), *args],
                          capture_output=True, text=True, timeout=60)


def test_summary_is_never_green_on_a_failure_or_on_nothing(tmp_path):
    (tmp_path / "steps.tsv").write_text("probe\tpass\t1.0\t\t\ngemm-bf16\ttimeout\t60.0\tkilled at its 60 s limit\t\n")
    result = run_summary(tmp_path)
    assert result.returncode == 1 and "GPU CHECK: FAIL" in result.stdout
    s = summary(tmp_path)
    assert s["overall"] == "fail" and s["counts"]["timeout"] == 1
    target = next(t for t in s["targets"] if "8192^3" in t["target"])
    assert target["met"] is None and target["measured"] == "not measured"
    (tmp_path / "steps.tsv").write_text("")
    result = run_summary(tmp_path)
    assert result.returncode == 1 and "no step ran" in result.stdout
    # steps the budget left no time for: nothing failed, but the check is not green either
    (tmp_path / "steps.tsv").write_text("probe\tpass\t1.0\t\t\npeer\tunrun\t0\tout of the 420 s budget\t\n")
    result = run_summary(tmp_path)
    assert result.returncode == 1 and "GPU CHECK: INCOMPLETE" in result.stdout and "1 not run" in result.stdout
    assert summary(tmp_path)["overall"] == "incomplete"
    # written mid-run (all that comes back of a run stopped from outside): the steps not reached
    # yet make it incomplete, never a PASS of what happened to finish
    (tmp_path / "steps.tsv").write_text("probe\tpass\t1.0\t\t\n")
    result = run_summary(tmp_path, "--pending", "probe,data,peer")
    assert result.returncode == 1 and "GPU CHECK: INCOMPLETE" in result.stdout and "2 not reached yet" in result.stdout
    s = summary(tmp_path)
    assert [(x["name"], x["status"]) for x in s["steps"]] == [("probe", "pass"), ("data", "pending"), ("peer", "pending")]


def test_summary_names_the_failed_operations_of_a_check_whose_error_is_not_finite(tmp_path):
    # check-backend writes a NaN or infinite error (an unwritten output read as NaN) as JSON null;
    # the key figure must still name the failures (it once said 'key figure unreadable')
    (tmp_path / "check-fp32").mkdir()
    rows = [{"op": "layernorm", "dtype": "fp32", "pass": True, "bit_identical": False, "max_rel": 1e-7,
             "max_abs": 1e-7, "error_over_bound": 0.01},
            {"op": "gelu_operand", "dtype": "fp32", "pass": False, "bit_identical": False, "max_rel": None,
             "max_abs": None, "error_over_bound": None}]
    (tmp_path / "check-fp32" / "check.json").write_text(json.dumps({"results": rows}))
    (tmp_path / "steps.tsv").write_text("check-fp32\tfail\t5.0\t\t\n")
    run_summary(tmp_path)
    key = summary(tmp_path)["steps"][0]["key"]
    assert key.startswith("2 cases, 1 failed") and "worst inf/NaN rel = inf/NaN of bound (gelu_operand fp32)" in key, key
    assert "FAILED: gelu_operand fp32" in key, key


def test_a_result_of_an_unexpected_shape_leaves_the_summary_written(tmp_path):
    # bench.json without tokens_per_second: targets() raised KeyError before summary.json was
    # written, and the export kept the previous step's summary.
    (tmp_path / "bench-train").mkdir()
    (tmp_path / "bench-train" / "bench.json").write_text(json.dumps({"dtype": "bf16-mixed", "mfu": 0.3}))
    (tmp_path / "steps.tsv").write_text("bench-train\tpass\t20.0\t\t\n")
    result = run_summary(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    s = summary(tmp_path)
    assert s["steps"][0]["name"] == "bench-train"
    assert any("unreadable" in t["measured"] and "tokens_per_second" in t["measured"] for t in s["targets"]), s["targets"]


def test_summary_reads_the_key_figures_and_judges_the_gemm_target(tmp_path):
    (tmp_path / "gemm-bf16").mkdir()
    row = {"name": "square 8192", "group": "square", "m": 8192, "n": 8192, "k": 8192, "median_tflops": 700.0,
           "pct_of_peak_median": 70.7}
    (tmp_path / "gemm-bf16" / "gemm.json").write_text(json.dumps(
        {"dtype": "bf16", "results": [row], "gpt2_step": None}))
    (tmp_path / "steps.tsv").write_text("gemm-bf16\tpass\t20.0\t\t\n")
    result = run_summary(tmp_path)
    assert result.returncode == 0, result.stdout
    s = summary(tmp_path)
    assert "8192^3 700.0 TFLOP/s (70.7% of peak)" in s["steps"][0]["key"]
    target = next(t for t in s["targets"] if "8192^3" in t["target"])
    assert target["met"] is False and "NOT MET" in result.stdout
    # a device with no entry in the peak table: measured, nothing to judge it against (not NOT MET)
    row["pct_of_peak_median"] = None
    (tmp_path / "gemm-bf16" / "gemm.json").write_text(json.dumps({"dtype": "bf16", "results": [row], "gpt2_step": None}))
    run_summary(tmp_path)
    target = next(t for t in summary(tmp_path)["targets"] if "8192^3" in t["target"])
    assert target["met"] is None and "700.0 TFLOP/s" in target["measured"]
    # with bf16 C measured too (PyTorch's bf16 matmul's configuration) the target is judged on it,
    # fp32 C and PyTorch's rate beside it
    bf16_c = dict(row, median_tflops=760.0, pct_of_peak_median=76.8)
    (tmp_path / "gemm-bf16" / "gemm-bf16out.json").write_text(json.dumps({"dtype": "bf16", "c_dtype": "bf16",
                                                                        "results": [bf16_c], "gpt2_step": None}))
    (tmp_path / "gemm-bf16" / "torch-gemm.json").write_text(json.dumps({"results": [dict(row, median_tflops=790.0)]}))
    (tmp_path / "steps.tsv").write_text("gemm-bf16\tpass\t20.0\t\t\n")
    run_summary(tmp_path)
    s = summary(tmp_path)
    target = next(t for t in s["targets"] if "8192^3" in t["target"])
    assert target["met"] is True, target
    assert target["measured"] == "bf16 C 760.0 TFLOP/s = 76.8%; fp32 C 700.0 TFLOP/s = n/a; PyTorch bf16 790.0 TFLOP/s"
    assert "PyTorch bf16 8192^3 790.0 TFLOP/s (Tripod/PyTorch 0.96x)" in s["steps"][0]["key"]
    bf16_c["pct_of_peak_median"] = 74.9
    (tmp_path / "gemm-bf16" / "gemm-bf16out.json").write_text(json.dumps({"results": [bf16_c]}))
    run_summary(tmp_path)
    assert next(t for t in summary(tmp_path)["targets"] if "8192^3" in t["target"])["met"] is False
    # a sanitizer that ran out of its own time did not show "finds nothing"
    (tmp_path / "steps.tsv").write_text("sanitizer\ttimeout\t90.0\tkilled at its 90 s limit\t\n")
    run_summary(tmp_path)
    assert next(t for t in summary(tmp_path)["targets"] if "sanitizer" in t["target"])["met"] is False


def test_summary_reads_a_gemm_table_with_a_failed_shape(tmp_path):
    """gemm-rate records a shape that failed as {name, ..., error} and times the rest: the summary
    judges on the timed rows, names the failed one, and never reads a failed 8192^3 as measured."""
    (tmp_path / "gemm-bf16").mkdir()
    timed = {"name": "square 4096", "group": "square", "m": 4096, "n": 4096, "k": 4096, "median_tflops": 650.0,
             "pct_of_peak_median": 65.7}
    failed = {"name": "square 8192", "group": "square", "m": 8192, "n": 8192, "k": 8192, "trans_a": False,
              "trans_b": False, "error": "cuBLASLt: no algorithm"}
    (tmp_path / "gemm-bf16" / "gemm.json").write_text(json.dumps(
        {"dtype": "bf16", "results": [timed, failed], "gpt2_step": None}))
    (tmp_path / "steps.tsv").write_text("gemm-bf16\tfail\t20.0\tgemm-rate: 1 of 2 GEMMs failed\t\n")
    result = run_summary(tmp_path)
    assert result.returncode != 0, result.stdout
    s = summary(tmp_path)
    assert "4096^3 650.0 TFLOP/s (65.7% of peak)" in s["steps"][0]["key"], s["steps"][0]
    assert "FAILED: square 8192" in s["steps"][0]["key"], s["steps"][0]
    target = next(t for t in s["targets"] if "8192^3" in t["target"])
    assert target["met"] is None and target["measured"] == "not measured", target


def test_summary_shows_the_unfused_step_when_the_default_one_failed_and_the_fusion_bisection(tmp_path):
    (tmp_path / "bench-train").mkdir()
    (tmp_path / "bench-train" / "bench-unfused.json").write_text(json.dumps(
        {"tokens_per_second": 150000.0, "median_step_seconds": 0.0546}))
    (tmp_path / "train-bf16").mkdir()
    (tmp_path / "train-bf16" / "fusions.txt").write_text("none pass\nbias pass\nresidual fail\n")
    (tmp_path / "steps.tsv").write_text("bench-train\tfail\t20.0\texit 1\t\ntrain-bf16\tfail\t30.0\texit 1\t\n")
    run_summary(tmp_path)
    steps = {x["name"]: x for x in summary(tmp_path)["steps"]}
    assert steps["bench-train"]["key"] == "default run failed; fusions off: 150000 tokens/s, step 54.6 ms"
    assert steps["train-bf16"]["key"] == "TRIPOD_CUDA_FUSIONS alone: none pass, bias pass, residual fail"


def test_summary_of_a_train_step_whose_metrics_could_not_be_compared_names_why(tmp_path):
    # compare_training writes its JSON also when a metrics file cannot be read (a cut-off line):
    # no steps, null maxima. The key figure says why, not "key figure unreadable".
    ref = write_metrics(tmp_path / "ref.jsonl", [7.5, 7.25])
    cut = tmp_path / "cut.jsonl"
    cut.write_text(ref.read_text() + '{"step": 2, "loss": 7.')
    (tmp_path / "train-fp64").mkdir()
    compare("--a", cut, "--b", ref, "--rel-tol", 1e-10, "--json", tmp_path / "train-fp64" / "compare.json")
    (tmp_path / "steps.tsv").write_text("train-fp64\tfail\t30.0\texit 1\t\n")
    run_summary(tmp_path)
    key = summary(tmp_path)["steps"][0]["key"]
    assert key == f"not compared: {cut}:4: not a JSON record (Expecting ',' delimiter): cut off?", key


def test_the_mfu_target_is_judged_on_the_best_bf16_mixed_run_and_names_it(tmp_path):
    # The issue leaves batch and context to us: bench-train's fourth run (padded, B32) may reach the
    # target where B8 does not; the target line names the run it was judged on.
    (tmp_path / "bench-train").mkdir()
    run = {"config": "gpt2-124m", "seq_len": 1024, "dtype": "bf16-mixed", "median_step_seconds": 0.03}
    files = {"bench.json": dict(run, batch=8, padded_vocab=50257, mfu=0.35, tokens_per_second=270000.0),
             "bench-padded.json": dict(run, batch=8, padded_vocab=50304, mfu=0.37, tokens_per_second=280000.0),
             "bench-large.json": dict(run, batch=32, padded_vocab=50304, mfu=0.41, tokens_per_second=310000.0,
                                      median_step_seconds=0.105)}
    for name, j in files.items():
        (tmp_path / "bench-train" / name).write_text(json.dumps(j))
    (tmp_path / "steps.tsv").write_text("bench-train\tpass\t20.0\t\t\n")
    run_summary(tmp_path)
    s = summary(tmp_path)
    target = next(t for t in s["targets"] if "MFU >= 40%" in t["target"])
    assert target["met"] is True, target
    assert "judged on B32xT1024, vocabulary 50304 (MFU 41.0%)" in target["measured"], target
    assert "; B32 padded: 310000 tokens/s, MFU 41.0%, step 105.0 ms" in s["steps"][0]["key"]
    # below the target at every batch: not met; only the B8 run: judged on it, nothing named
    files["bench-large.json"]["mfu"] = 0.39
    (tmp_path / "bench-train" / "bench-large.json").write_text(json.dumps(files["bench-large.json"]))
    run_summary(tmp_path)
    assert next(t for t in summary(tmp_path)["targets"] if "MFU >= 40%" in t["target"])["met"] is False
    for name in ("bench-padded.json", "bench-large.json"):
        (tmp_path / "bench-train" / name).unlink()
    run_summary(tmp_path)
    target = next(t for t in summary(tmp_path)["targets"] if "MFU >= 40%" in t["target"])
    assert target["met"] is False and "judged on" not in target["measured"]
    # the flash step's runs count, named, once that step passed (its kernels and training checked)
    (tmp_path / "flash").mkdir()
    (tmp_path / "flash" / "bench-large.json").write_text(
        json.dumps(dict(run, batch=32, padded_vocab=50304, mfu=0.43, tokens_per_second=330000.0)))
    for flash_status, met in (("fail", False), ("pass", True)):
        (tmp_path / "steps.tsv").write_text(f"bench-train\tpass\t20.0\t\t\nflash\t{flash_status}\t60.0\t\t\n")
        run_summary(tmp_path)
        target = next(t for t in summary(tmp_path)["targets"] if "MFU >= 40%" in t["target"])
        assert target["met"] is met, (flash_status, target)
        assert ("judged on B32xT1024, vocabulary 50304, flash attention (MFU 43.0%)" in target["measured"]) is met
    # and flash-mma's likewise, named as such
    (tmp_path / "flash-mma").mkdir()
    (tmp_path / "flash-mma" / "bench.json").write_text(
        json.dumps(dict(run, batch=8, padded_vocab=50304, mfu=0.45, tokens_per_second=350000.0)))
    for status, judged in (("fail", "flash attention (MFU 43.0%)"), ("pass", "flash attention, mma tiles (MFU 45.0%)")):
        (tmp_path / "steps.tsv").write_text(
            f"bench-train\tpass\t20.0\t\t\nflash\tpass\t60.0\t\t\nflash-mma\t{status}\t60.0\t\t\n")
        run_summary(tmp_path)
        target = next(t for t in summary(tmp_path)["targets"] if "MFU >= 40%" in t["target"])
        assert target["met"] is True and judged in target["measured"], (status, target)


def test_a_failing_bf16_training_step_runs_again_with_each_cuda_fusion_alone(tmp_path):
    # TRIPOD_GPU_CHECK_BISECT=always: the bisection on a pass too (the emulated device of a dry run
    # passes with every setting: the variable is the CUDA backend's)
    out = tmp_path / "out"
    result = gpu_check(out, "--dry-run", "--only", "train-bf16", env={"TRIPOD_GPU_CHECK_BISECT": "always"})
    assert result.returncode == 0, result.stdout + result.stderr
    lines = (out / "dry-train-bf16" / "fusions.txt").read_text().split()
    assert lines == ["none", "pass", "bias", "pass", "residual", "pass", "bias-grad", "pass", "operands", "pass",
                     "loss-stats", "pass", "layernorm-grads", "pass", "qkv-bf16", "pass",
                     "loss-gradient", "pass"]
    steps = {x["name"]: x for x in summary(out)["steps"]}
    assert "TRIPOD_CUDA_FUSIONS alone: none pass, bias pass" in steps["dry-train-bf16"]["key"]
    # the emulated device ignores the variable: the names are checked against the CUDA backend's own
    names = re.findall(r'case CudaFusion::\w+: return "([a-z0-9-]+)";', (SOURCE / "reference/backend/cuda/host/fusion_choice.cpp").read_text())
    assert lines[2::2] == names


def test_summary_judges_issue_15_and_17_targets_from_their_steps(tmp_path):
    (tmp_path / "overlap-cpu").mkdir()
    (tmp_path / "pipeline-cpu").mkdir()
    overlap = {"ranks": 2, "compute_seconds": 0.1,
               "hidden_by_mechanism": {"bucketing": 0.61, "bucketing_with_progress_thread": 0.83,
                                       "bucketing_with_tied_grad_split": 0.7, "zero3_prefetch": 0.95,
                                       "zero3_prefetch_with_progress_thread": 0.97},
               "hidden_in_calls_by_mechanism": {"bucketing": 0.1, "bucketing_with_progress_thread": 0.9,
                                                "bucketing_with_tied_grad_split": 0.2, "zero3_prefetch": 0.1,
                                                "zero3_prefetch_with_progress_thread": 0.3}}
    (tmp_path / "overlap-cpu" / "overlap.json").write_text(json.dumps(overlap))

    def layouts(pairs):
        rows = []
        for blocking, ahead in pairs:
            rows += [{"layout": "tp1-pp2-dp1-z0-mb4-1f1b-ra0", "tokens_per_second": blocking},
                     {"layout": "tp1-pp2-dp1-z0-mb4-1f1b", "tokens_per_second": ahead}]
        (tmp_path / "pipeline-cpu" / "layouts.json").write_text(json.dumps({"threads_per_rank": 7, "layouts": rows}))

    layouts([(100, 110), (100, 104), (100, 103)])
    (tmp_path / "steps.tsv").write_text("nccl-1g\tpass\t30.0\t\t\noverlap-cpu\tpass\t20.0\t\t\n"
                                        "pipeline-cpu\tpass\t10.0\t\t\n")
    result = run_summary(tmp_path)
    assert result.returncode == 0, result.stdout
    s = summary(tmp_path)
    issue15 = next(t for t in s["targets"] if t["target"].startswith("issue 15"))
    assert issue15["met"] is True
    hidden = next(t for t in s["targets"] if "hidden behind backward" in t["target"])
    # the best DP mechanism (the progress thread's 83 %), not ZeRO-3's gathers (with or without the thread)
    assert hidden["met"] is True and "+ progress thread 83.0%" in hidden["measured"], hidden
    gain = next(t for t in s["targets"] if "pp=2" in t["target"])
    assert gain["met"] is True and "median gain 4.0%" in gain["measured"]
    assert "blocking 100/100/100 vs posted ahead 110/104/103" in s["steps"][2]["key"]
    # below the target, or one pair slower, is NOT MET
    overlap["hidden_by_mechanism"]["bucketing_with_progress_thread"] = 0.79
    (tmp_path / "overlap-cpu" / "overlap.json").write_text(json.dumps(overlap))
    layouts([(100, 110), (100, 99), (100, 103)])
    run_summary(tmp_path)
    s = summary(tmp_path)
    assert next(t for t in s["targets"] if "hidden behind backward" in t["target"])["met"] is False
    assert next(t for t in s["targets"] if "pp=2" in t["target"])["met"] is False
    # a failed parse check is NOT MET; a skipped many-core step measures nothing
    (tmp_path / "steps.tsv").write_text("nccl-1g\tfail\t30.0\texit 1\t\noverlap-cpu\tskipped\t0\t2 cores\t\n")
    (tmp_path / "overlap-cpu" / "overlap.json").unlink()
    run_summary(tmp_path)
    s = summary(tmp_path)
    assert next(t for t in s["targets"] if t["target"].startswith("issue 15"))["met"] is False
    assert next(t for t in s["targets"] if "hidden behind backward" in t["target"])["met"] is None


def test_the_multi_gpu_step_skips_on_a_node_without_two_gpus(tmp_path):
    require_tripod()
    out = tmp_path / "out"
    env = {**os.environ, "TRIPOD_PYTHON": sys.executable, "CUDA_VISIBLE_DEVICES": "0"}
    subprocess.run(["bash", str(GPU_CHECK), str(out), "--build-dir", str(TRIPOD.parent.parent), "--only", "nccl-multi"],
                   capture_output=True, text=True, timeout=120, env=env)
    step = {x["name"]: x for x in summary(out)["steps"]}["nccl-multi"]
    assert step["status"] == "skipped" and "1 GPU(s) on this node" in step["reason"], step
    target = next(t for t in summary(out)["targets"] if "several GPUs" in t["target"])
    assert target["met"] is None and "skipped" in target["measured"]


def test_the_many_core_steps_skip_below_six_cores(tmp_path):
    require_tripod()
    out = tmp_path / "out"
    # OMP_NUM_THREADS as CTest sets it: GNU nproc would answer it instead of counting cores
    env = {**os.environ, "TRIPOD_PYTHON": sys.executable, "OMP_NUM_THREADS": "2"}
    result = subprocess.run(["taskset", "-c", "0", "bash", str(GPU_CHECK), str(out), "--build-dir",
                             str(TRIPOD.parent.parent), "--only", "overlap-cpu,pipeline-cpu"],
                            capture_output=True, text=True, timeout=120, env=env)
    steps = {x["name"]: x for x in summary(out)["steps"]}
    assert steps["overlap-cpu"]["status"] == "skipped" and "1 cores" in steps["overlap-cpu"]["reason"], result.stdout
    assert steps["pipeline-cpu"]["status"] == "skipped"


# ---- the PyTorch peer, on the CPU ----

def test_peer_on_cpu_counts_the_same_flops_as_tripod(tmp_path):
    pytest.importorskip("torch")
    require_tripod()
    out = tmp_path / "peer.json"
    result = subprocess.run([sys.executable, str(SOURCE / "reports" / "gpu_peer.py"), "--device", "cpu", "--config",
                             "tiny", "--batch", "2", "--seq-len", "16", "--steps", "2", "--warmup", "1", "--json",
                             str(out)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    peer = json.loads(out.read_text())
    assert [r["precision"] for r in peer["results"]] == ["bf16", "fp32"]
    for r in peer["results"]:
        assert len(r["losses"]) == 2 and all(6 < x < 9 for x in r["losses"])  # ~ln(2048) at the start
        assert r["tokens_per_second"] == pytest.approx(2 * 16 / r["median_step_seconds"])
        assert r["mfu"] is None and "peak unknown" in r["peak_source"]  # no peak for a CPU
    # Tripod's count for the same model and context (bench train's JSON gives FLOP/s x step time).
    bench = tmp_path / "bench.json"
    result = subprocess.run([str(TRIPOD), "bench", "train", "--config", "tiny", "--set", "model.vocab_size=2048",
                             "--batch", "2", "--seq-len", "16", "--steps", "1", "--gemm-size", "64", "--json",
                             str(bench)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    b = json.loads(bench.read_text())
    tripod_per_token = b["model_flops_per_second"] * b["median_step_seconds"] / (2 * 16)
    assert peer["model_flops_per_token"] == pytest.approx(tripod_per_token, rel=1e-12)


def test_peer_rejects_what_it_cannot_run():
    pytest.importorskip("torch")
    result = subprocess.run([sys.executable, str(SOURCE / "reports" / "gpu_peer.py"), "--device", "cpu",
                             "--precision", "fp8"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "--precision" in result.stderr


def test_tf32_is_turned_off_through_whichever_api_the_torch_has():
    sys.path.insert(0, str(SOURCE / "reports"))
    from torch_fp32 import ieee_fp32

    class Old:  # before PyTorch 2.9: only allow_tf32, and unknown names raise AssertionError
        def __init__(self):
            object.__setattr__(self, "values", {})

        def __setattr__(self, name, value):
            if name != "allow_tf32":
                raise AssertionError("Unknown attribute " + name)
            self.values[name] = value

    class New:  # 2.9 and later: fp32_precision per backend
        pass

    def torch_with(matmul, cudnn):
        return type("T", (), {"backends": type("B", (), {"cuda": type("C", (), {"matmul": matmul}), "cudnn": cudnn})})

    matmul, cudnn = Old(), type("Cudnn", (), {})()  # old cuDNN module: no .conv, a plain allow_tf32
    assert ieee_fp32(torch_with(matmul, cudnn)) == "cuda.matmul.allow_tf32=False, cudnn.allow_tf32=False"
    assert matmul.values == {"allow_tf32": False} and cudnn.allow_tf32 is False
    matmul, cudnn = New(), type("Cudnn", (), {"conv": New()})()
    assert ieee_fp32(torch_with(matmul, cudnn)) == "cuda.matmul.fp32_precision='ieee', cudnn.conv.fp32_precision='ieee'"
    assert matmul.fp32_precision == "ieee" and cudnn.conv.fp32_precision == "ieee"
    assert not hasattr(matmul, "allow_tf32")  # the deprecated name left alone where the new one exists


# ---- the bundle for a bare GPU node (ci/gpu-bundle.sh; its chroot proof needs root: by hand) ----

def test_the_bundle_of_this_build_passes_the_dry_run_through_its_own_loader(tmp_path):
    require_tripod()
    bundle = tmp_path / "bundle"
    made = subprocess.run(["bash", str(SOURCE / "ci" / "gpu-bundle.sh"), str(bundle), "--build-dir",
                           str(TRIPOD.parent.parent), "--no-verify", "--any-march"], capture_output=True, text=True, timeout=400,
                          env={**os.environ, "TRIPOD_BUNDLE_XZ_LEVEL": "0"})  # fast: what is checked is the content
    assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-2000:]
    manifest = (bundle / "MANIFEST.txt").read_text()
    for soname in ("libopenblas.so.0", "libmpi.so.40", "libgomp.so.1", "libstdc++.so.6", "libc.so.6"):
        assert soname in manifest, soname
    assert not any(x in manifest for x in ("libcudart", "libcublas", "libcuda.so"))  # the node's, never bundled
    # Open MPI's launcher and plugins travel too (multi-rank runs on a node without Open MPI).
    assert (bundle / "openmpi" / "env.sh").exists() and (bundle / "openmpi" / "bin" / "orterun").exists()
    assert list((bundle / "openmpi" / "lib" / "openmpi3").glob("mca_btl_vader.so"))
    assert not list((bundle / "openmpi" / "lib" / "openmpi3").glob("*ucx*"))  # fabric plugins left out
    info = json.loads((bundle / "bundle.json").read_text())
    assert info["node_must_provide"]["glibc_required"].startswith("GLIBC_2.")
    assert info["bytes"] < 40 * 2**20
    # The dry run from the bundle, forced through lib/glibc's loader (the path a node with an older
    # glibc takes), so that every library comes from the bundle.
    out = tmp_path / "out"
    result = subprocess.run(["bash", str(GPU_CHECK), str(out), "--dry-run", "--bundle", str(bundle), "--only",
                             "probe,data,train-fp32,gemm-fp32,nccl-1"], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "TRIPOD_PYTHON": sys.executable, "OMP_NUM_THREADS": "2",
                                 "TRIPOD_GPU_CHECK_BUNDLED_GLIBC": "1"})
    assert result.returncode == 0, result.stdout[-4000:]
    assert "lib/glibc/ld-linux-x86-64.so.2" in (out / "probe" / "library_path.txt").read_text()
    assert "== orterun -np 2" in (out / "dry-nccl-1" / "log.txt").read_text()  # the bundle's Open MPI
    listing = (out / "probe" / "ldd-tripod.txt").read_text()
    resolved = [line.split("=>")[1].split()[0] for line in listing.splitlines() if "=>" in line]
    cuda = ("libcudart", "libcublas", "libnccl")  # a CUDA build's: the node's toolkit provides them
    assert resolved and all(str(out / "work" / "bundle") in path or any(c in path for c in cuda)
                            for path in resolved), listing
    # A process started without mpirun (a singleton, as the GPU tests' NCCL case is) through that
    # loader starts no orted: a bare node's loader would find none of the bundle's libraries for it
    # (no LD_LIBRARY_PATH in this mode). A failing orted stands in for that node's.
    fake = tmp_path / "fake-bin"
    fake.mkdir()
    (fake / "orted").write_text(f"#!/bin/sh\necho ran >> '{fake}/marker'\nexit 1\n")
    (fake / "orted").chmod(0o755)
    work = out / "work" / "bundle"
    libs = next(line.split(": ", 1)[1] for line in (out / "probe" / "library_path.txt").read_text().splitlines()
                if line.startswith("library path: "))
    singleton = subprocess.run(
        ["bash", "-c", f'. "{work}/openmpi/env.sh" && export OPAL_BINDIR="{fake}" && exec '
         f'"{work}/lib/glibc/ld-linux-x86-64.so.2" --library-path "{libs}" "{work}/bin/tripod" '
         "bench comm all_reduce -b 8 -e 8"], capture_output=True, text=True, timeout=120,
        env={**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"})
    assert singleton.returncode == 0 and not (fake / "marker").exists(), singleton.stdout[-2000:] + singleton.stderr[-2000:]
