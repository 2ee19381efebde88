"""`tripod bench --quick`, the one command for a new node: every sweep runs, bench.json holds each
section, the summary names best bus bandwidth, sgemm % of peak and MFU per layout, and the
plotting script turns the JSON into PNG files and an HTML page."""
import json
import os
import subprocess

import pytest

from tripod_cli import TRIPOD, folder_lock_held, require_tripod


@pytest.fixture(scope="module")
def quick_bench(tmp_path_factory):
    """One `tripod bench --quick` run (~30 s on 2 cores), shared by the tests that read it."""
    require_tripod()
    out = tmp_path_factory.mktemp("quick") / "bench"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_COMM_WORLD", "PMIX_"))}
    result = subprocess.run([str(TRIPOD), "bench", "--quick", "--out", str(out)], capture_output=True, text=True,
                            timeout=600, env=env)
    return out, result


def test_quick_bench_writes_results_and_plots(quick_bench):
    out, result = quick_bench
    assert result.returncode == 0, result.stdout + result.stderr
    for line in ("best busbw all_reduce", "best sgemm", "MFU dp"):
        assert line in result.stdout
    bench = json.loads((out / "bench.json").read_text())
    assert bench["gemm"]["sgemm_best"]["tflops"] > 0
    assert {r["collective"] for r in bench["comm"]["results"]} >= {"all_reduce", "all_gather", "reduce_scatter",
                                                                     "broadcast", "reduce", "alltoall", "sendrecv"}
    assert all(r["wrong"] == 0 for r in bench["comm"]["results"])
    # Each collective's best row says when its ranks shared their cores (bench comm's on_cpu), and
    # only then (test_bench_comm.py makes them share one).
    for collective in {r["collective"] for r in bench["comm"]["results"]}:
        best = max((r for r in bench["comm"]["results"] if r["collective"] == collective), key=lambda r: r["busbw"])
        line = next(l for l in result.stdout.splitlines() if l.startswith(f"  best busbw {collective} "))
        assert ("cores shared" in line) == (best["on_cpu"] < 0.9), (line, best)
    assert all(0 < r["mfu"] < 1 for r in bench["layouts"]["layouts"])
    assert [s["status"] for s in bench["steps"]] == ["done"] * len(bench["steps"]) and len(bench["steps"]) == 5
    for png in ("busbw.png", "gemm.png", "gemm_layers.png", "mfu.png"):
        data = (out / "plots" / png).read_bytes()
        assert data.startswith(b"\x89PNG") and len(data) > 1000, png
    assert "busbw.png" in (out / "plots" / "index.html").read_text()


def test_bench_json_fits_its_schema(quick_bench):
    """reports/schemas/bench-suite.schema.json: each step's section by a `$ref` to that command's
    own schema, so an undocumented field inside one (here a comm row) fails as it would there."""
    from test_output_schemas import validate_with  # skips where python3-jsonschema is missing by hand
    out, result = quick_bench
    assert result.returncode == 0, result.stdout + result.stderr
    bench = json.loads((out / "bench.json").read_text())
    validate_with("bench-suite", bench)
    assert {"gemm", "kernels"} <= set(bench) and bench["system"]["quick"] is True
    assert bench["system"]["blas"].startswith("OpenBLAS ") and "MAX_THREADS=" in bench["system"]["blas"]
    bench["comm"]["results"][0]["undocumented"] = 1
    with pytest.raises(AssertionError, match="undocumented"):
        validate_with("bench-suite", bench)


def test_refuses_to_run_under_mpirun(tmp_path):
    if not TRIPOD.exists():
        pytest.skip(f"{TRIPOD} not built")
    env = {**os.environ, "OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"}
    result = subprocess.run([str(TRIPOD), "bench", "--quick", "--out", str(tmp_path)], capture_output=True,
                            text=True, timeout=60, env=env)
    assert result.returncode == 1 and "not under mpirun" in result.stderr


def test_on_cuda_the_gpu_sweeps_replace_the_cpu_ones(tmp_path):
    """`bench gemm`/`kernels` refuse --backend cuda (their peak and STREAM are the CPU's), so the
    suite on cuda failed its first two steps even on a GPU; it now runs gemm-rate and kernel-rate.
    Without a GPU every step fails fast, naming the missing device, which is what is checked here."""
    require_tripod()
    if "cuda" not in subprocess.run([str(TRIPOD), "bench", "gemm-rate", "--help"], capture_output=True,
                                    text=True).stdout:
        pytest.skip("this build has no CUDA backend")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_COMM_WORLD", "PMIX_"))}
    result = subprocess.run([str(TRIPOD), "bench", "--quick", "--backend", "cuda", "--ranks", "2", "--out",
                             str(tmp_path)], capture_output=True, text=True, timeout=300, env=env)
    assert "[1/5] GEMM rate" in result.stdout and "[2/5] kernel rate" in result.stdout, result.stdout
    # The multi-rank steps' communicator is chosen from the GPUs NVML counts (staged where ranks
    # outnumber GPUs, as NCCL refuses two ranks on one), and the header says which and why.
    assert "the GPU count is unknown (no NVML)" in result.stdout or " GPU(s): " in result.stdout, result.stdout
    for log in ("gemm_rate.log", "kernel_rate.log"):
        text = (tmp_path / log).read_text()
        assert "measures the CPU" not in text, text
        if result.returncode != 0:  # no GPU here: the device is named, not the CPU suites' refusal
            assert "cuda" in text.lower(), text
    if result.returncode != 0:
        # a failed step's section is {}, and bench.json's steps say which failed, how, and where its log is
        bench = json.loads((tmp_path / "bench.json").read_text())
        failed = [s for s in bench["steps"] if s["status"] == "failed"]
        assert failed and all(s["exit"] and (tmp_path / s["log"]).exists() for s in failed), bench["steps"]
        assert bench["comm"] == {} and any(s["step"] == "collective sweep" for s in failed), bench["steps"]


@pytest.mark.parametrize("args, message", [
    (["--comm", "bogus"], "--comm: unknown communicator 'bogus' (one of: auto, mpi, staged, nccl)"),
    (["--comm", "nccl"], "--comm nccl moves CUDA tensors only"),
    (["--backend", "emulated", "--comm", "mpi"], "--comm mpi moves host memory only"),
])
def test_a_communicator_that_cannot_move_the_backends_tensors_is_refused_before_the_sweeps(tmp_path, args, message):
    # --comm passes to the multi-rank steps (staged lets several ranks share one GPU); a kind that
    # cannot work would have failed them only after the GEMM and kernel sweeps.
    require_tripod()
    result = subprocess.run([str(TRIPOD), "bench", "--quick", *args, "--out", str(tmp_path / "out")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and message in result.stderr, result.stderr
    assert not (tmp_path / "out").exists()


def test_a_second_suite_into_a_folder_another_is_writing_is_refused(tmp_path):
    # Each step writes a fixed name in --out and the summary reads them back: a second suite replaced
    # the first one's files under it, measured while both shared the cores.
    require_tripod()
    out = tmp_path / "bench"
    out.mkdir()
    (out / "bench.json").write_text("{}")  # the previous suite's results
    with folder_lock_held(out):  # what a suite at work holds
        result = subprocess.run([str(TRIPOD), "bench", "--quick", "--out", str(out)], capture_output=True, text=True,
                                timeout=60)
        assert result.returncode == 1 and (f"bench --out {out}: another `tripod bench` is writing its results into "
                                           "this folder") in result.stderr, result.stderr
        assert sorted(p.name for p in out.iterdir()) == ["bench.json"] and (out / "bench.json").read_text() == "{}"


def test_a_failed_steps_section_is_empty_not_an_earlier_suites(tmp_path):
    # The summary read comm.json and layouts.json whatever their age: a rerun into the same --out
    # whose sweeps failed printed the previous suite's bandwidth and MFU as its own.
    require_tripod()
    out = tmp_path / "bench"
    out.mkdir()
    (out / "comm.json").write_text(json.dumps({"results": [{"collective": "all_reduce", "busbw": 999.0,
                                                            "size": 1048576, "on_cpu": 1.0}]}))
    (out / "layouts.json").write_text(json.dumps({"layouts": [{"layout": "STALE-dp2", "mfu": 0.5,
                                                               "tokens_per_second": 12345}]}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_COMM_WORLD", "PMIX_"))}
    result = subprocess.run([str(TRIPOD), "bench", "--quick", "--out", str(out), "--mpirun", "/bin/false"],
                            capture_output=True, text=True, timeout=300, env={**env, "BENCHMARK_FILTER": "none_such"})
    assert result.returncode == 1 and "3 benchmark step(s) failed" in result.stderr, result.stdout + result.stderr
    assert "999.00" not in result.stdout and "STALE" not in result.stdout, result.stdout
    bench = json.loads((out / "bench.json").read_text())
    assert bench["comm"] == {} and bench["layouts"] == {} and bench["pipeline"] == {}
    assert not (out / "comm.json").exists() and not (out / "layouts.json").exists()
