"""TRIPOD_POISON_UNWRITTEN=1 on the emulated device: the memory it hands out for overwrite is NaN
bytes (backend/unwritten_poison.h), so any operation or layout that reads what nothing wrote shows
it. Every check-backend case still matches the unpoisoned CPU backend (the GEMM attention and both
flash forms), and conform's layouts give the very fingerprints of an unpoisoned run: nothing the
trainer computes reads unwritten memory."""
import json
import os
import subprocess

from tripod_cli import MPI_ENV, TRIPOD, mpirun_command, require_tripod

POISON = {"TRIPOD_POISON_UNWRITTEN": "1"}


def test_every_backend_case_on_a_poisoned_device_matches_the_cpu(tmp_path):
    require_tripod()
    for attention in ("gemm", "flash", "flash-mma"):
        env = {**os.environ, **POISON, "TRIPOD_CUDA_ATTENTION": attention}
        args = ["--only", "attention"] if attention != "gemm" else []
        result = subprocess.run([str(TRIPOD), "check-backend", "--backend", "emulated", "--against", "cpu", "--dtype",
                                 "fp64", "fp32", "bf16", *args, "--json", str(tmp_path / f"{attention}.json")],
                                capture_output=True, text=True, timeout=300, env=env)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr
        rows = json.loads((tmp_path / f"{attention}.json").read_text())["results"]
        assert len(rows) >= (10 if attention != "gemm" else 150) and all(r["pass"] for r in rows), attention


def conform(tmp_path, ranks, dtype, env, name):
    out = tmp_path / f"{name}.json"
    result = subprocess.run(mpirun_command(ranks, "conform", "--backend", "emulated", "--comm", "staged", "--dtype",
                                           dtype, "--json", out, timeout=240),
                            capture_output=True, text=True, timeout=300, env={**MPI_ENV, **env})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    return {row["layout"]: row["fingerprint"] for row in json.loads(out.read_text())["layouts"]}


def test_every_layout_on_poisoned_devices_gives_the_unpoisoned_fingerprints(tmp_path):
    """bf16-mixed holds the most memory allocated for overwrite (the GEMM operands' bf16 copies,
    ZeRO's bf16 gather buffers, -opg's gathers in flight, ZeRO-3's gathered buckets), fp64 the exact
    arithmetic. 2 ranks: the 2-rank list has every one of those buffers at dp2 (4 ranks, 343
    layouts, ran clean too but took 15 s more of CI)."""
    require_tripod()
    for ranks, dtype in ((2, "bf16-mixed"), (2, "fp64")):
        clean = conform(tmp_path, ranks, dtype, {}, f"clean-{ranks}-{dtype}")
        poisoned = conform(tmp_path, ranks, dtype, POISON, f"poisoned-{ranks}-{dtype}")
        assert len(clean) > 80 and poisoned == clean, [k for k in clean if poisoned.get(k) != clean[k]][:5]
        if dtype == "bf16-mixed":  # the buffers named above are all in the list
            sharded = [name for name in clean if "-dp2-" in name]
            assert any(name.endswith("-opg") for name in sharded) and any("-z3-" in name for name in sharded)
            assert any(name.endswith("-gfp32") for name in sharded) and any("-z1-" in name for name in sharded)
