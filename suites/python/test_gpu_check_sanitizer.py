"""gpu-check's sanitizer step without a GPU: reports/sanitizer_log.py on logs shaped as
compute-sanitizer writes them, and the step itself run against a stand-in compute-sanitizer on the
PATH (each tool clean, finding errors, or hanging past its share of the step's time)."""
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tripod_cli import TRIPOD, require_tripod

SOURCE = Path(os.environ.get("TRIPOD_SOURCE_DIR", Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(SOURCE / "reports"))
import sanitizer_log  # noqa: E402

OUR_KERNEL = "void tripod::cuda::(anonymous namespace)::rows_kernel<float, tripod::kernels::LayerNormOp>(float*, int)"
MEMCHECK_ERROR = f"""========= COMPUTE-SANITIZER
========= Invalid __global__ read of size 4 bytes
=========     at {OUR_KERNEL}+0x1f0 in layernorm.cu:88
=========     by thread (31,0,0) in block (2,0,0)
=========     Address 0x7f3a00000400 is out of bounds
=========
========= ERROR SUMMARY: 1 error
"""
INITCHECK_LIBRARY = """========= COMPUTE-SANITIZER
========= Uninitialized __global__ memory read of size 16 bytes
=========     at sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_cgasize1x2x1+0x5a0
=========     by thread (0,0,0) in block (0,0,0)
=========
========= Uninitialized __global__ memory read of size 16 bytes
=========     at sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_cgasize1x2x1+0x5b0
=========     by thread (1,0,0) in block (0,0,0)
=========
========= ERROR SUMMARY: 2 errors
"""
RACE = f"""========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at {OUR_KERNEL}+0x2c0 in layernorm.cu:101
=========     and Read access at {OUR_KERNEL}+0x310 in layernorm.cu:104 [64 hazards]
=========
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""
CLEAN = {"memcheck": "========= COMPUTE-SANITIZER\n  layernorm fp32  PASS\n========= ERROR SUMMARY: 0 errors\n",
         "racecheck": "========= COMPUTE-SANITIZER\n========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\n"}


def test_the_log_reader_names_the_error_and_whose_kernel_it_is():
    r = sanitizer_log.describe("memcheck", MEMCHECK_ERROR)
    assert r["errors"] == 1 and r["ours"] == [OUR_KERNEL], r
    assert r["line"].startswith("memcheck: 1 error in 1 kernel (ours: void tripod::cuda::")
    assert r["line"].endswith("Invalid __global__ read of size 4 bytes")
    # a library's kernel (cuBLASLt reading an operand's padding, say) counts, and is said not to be ours
    r = sanitizer_log.describe("initcheck", INITCHECK_LIBRARY)
    assert r["errors"] == 2 and r["records"] == 2 and r["ours"] == [] and len(r["kernels"]) == 1, r
    assert "2 errors in 1 kernel (none of them ours): Uninitialized __global__ memory read" in r["line"]
    # a race names both accesses' kernel once
    r = sanitizer_log.describe("racecheck", RACE)
    assert r["errors"] == 1 and r["kernels"] == [OUR_KERNEL], r
    assert r["line"].startswith("racecheck: 1 error in 1 kernel (ours:")


def test_the_log_reader_says_clean_only_on_a_summary_of_none():
    assert sanitizer_log.describe("memcheck", CLEAN["memcheck"])["line"] == "memcheck: clean"
    assert sanitizer_log.describe("racecheck", CLEAN["racecheck"])["line"] == "racecheck: clean"
    # no summary: the run was cut short, never "clean"
    assert sanitizer_log.describe("initcheck", "========= COMPUTE-SANITIZER\n  layernorm PASS\n")["line"] == \
        "initcheck: no summary (cut short?)"


def test_the_log_reader_cli_writes_its_json(tmp_path):
    log = tmp_path / "initcheck.log"
    log.write_text(INITCHECK_LIBRARY)
    out = subprocess.run([sys.executable, str(SOURCE / "reports" / "sanitizer_log.py"), "initcheck", str(log), "--json",
                          str(tmp_path / "r.json")], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("initcheck: 2 errors")
    assert json.loads((tmp_path / "r.json").read_text())["errors"] == 2


# ---- the step, against a stand-in compute-sanitizer ----

FAKE = """#!/bin/bash
# compute-sanitizer's stand-in: --tool T; what T does comes from FAKE_<T> (clean, error, hang)
tool=""
while [ $# -gt 0 ]; do case $1 in --tool) tool=$2; shift 2 ;; --*) shift 2 ;; *) break ;; esac; done
echo "$tool" >>"$FAKE_CALLS"
var=FAKE_${tool^^}
case ${!var:-clean} in
  clean) cat "$FAKE_DIR/clean-$tool.log" 2>/dev/null || echo "========= ERROR SUMMARY: 0 errors"; exit 0 ;;
  error) cat "$FAKE_DIR/error-$tool.log"; exit 99 ;;
  hang) sleep 300 ;;
esac
"""


def run_sanitizer_step(tmp_path, budget=None, **behaviour):
    require_tripod()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "compute-sanitizer"
    fake.write_text(FAKE)
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    (tmp_path / "clean-memcheck.log").write_text(CLEAN["memcheck"])
    (tmp_path / "clean-racecheck.log").write_text(CLEAN["racecheck"])
    (tmp_path / "error-initcheck.log").write_text(INITCHECK_LIBRARY)
    (tmp_path / "error-memcheck.log").write_text(MEMCHECK_ERROR)
    out = tmp_path / "out"
    env = {**os.environ, "TRIPOD_PYTHON": sys.executable, "PATH": f"{bin_dir}:{os.environ['PATH']}",
           "FAKE_DIR": str(tmp_path), "FAKE_CALLS": str(tmp_path / "calls"),
           **{f"FAKE_{k.upper()}": v for k, v in behaviour.items()}}
    result = subprocess.run(["bash", str(SOURCE / "ci" / "gpu-check.sh"), str(out), "--build-dir",
                             str(TRIPOD.parent.parent), "--only", "sanitizer", *(["--budget", str(budget)] if budget else [])],
                            capture_output=True, text=True, timeout=300, env=env)
    step = {x["name"]: x for x in json.loads((out / "summary.json").read_text())["steps"]}["sanitizer"]
    calls = (tmp_path / "calls").read_text().split() if (tmp_path / "calls").exists() else []
    return result, step, calls, out / "sanitizer"


def test_every_tool_runs_and_a_clean_run_passes(tmp_path):
    result, step, calls, folder = run_sanitizer_step(tmp_path)
    assert calls == ["memcheck", "initcheck", "racecheck"], calls
    assert step["status"] == "pass", (step, result.stdout[-3000:])
    key = (folder / "key.txt").read_text()
    assert "memcheck: clean" in key and "initcheck: clean" in key and "racecheck: clean" in key, key


def test_a_tool_that_finds_errors_fails_the_step_and_the_others_still_run(tmp_path):
    result, step, calls, folder = run_sanitizer_step(tmp_path, initcheck="error")
    assert calls == ["memcheck", "initcheck", "racecheck"], calls
    assert step["status"] == "fail", step
    key = (folder / "key.txt").read_text()
    assert "initcheck: 2 errors in 1 kernel (none of them ours): Uninitialized __global__ memory read" in key, key
    assert json.loads((folder / "initcheck.json").read_text())["errors"] == 2
    assert "FAILED: initcheck" in (folder / "log.txt").read_text()
    # the target is judged on the step: not met
    s = json.loads((folder.parent / "summary.json").read_text())
    assert next(t for t in s["targets"] if "sanitizer" in t["target"])["met"] is False


def test_a_tool_cut_by_its_time_makes_the_step_incomplete_not_failed(tmp_path):
    # racecheck hangs: it is cut at its share of the step, here what a 30 s budget leaves (less 5 s),
    # shared by the three tools (memcheck and initcheck, the first, take theirs at once). Not 20 s:
    # a tool whose share is under 5 s is not run, and 20 s left memcheck exactly 5 when gpu-check's
    # start took no time, so a loaded machine's second of start-up skipped it (CI, 2026-12-06).
    result, step, calls, folder = run_sanitizer_step(tmp_path, budget=30, racecheck="hang")
    assert calls == ["memcheck", "initcheck", "racecheck"], calls
    assert step["status"] == "unrun", step
    assert "racecheck cut at its" in (folder / "key.txt").read_text()


@pytest.mark.parametrize("tools", ["memcheck leakcheck", " "])
def test_a_sanitizer_tool_list_that_is_not_compute_sanitizers_is_refused_before_any_step(tmp_path, tools):
    require_tripod()
    env = {**os.environ, "TRIPOD_PYTHON": sys.executable, "SANITIZER_TOOLS": tools}
    result = subprocess.run(["bash", str(SOURCE / "ci" / "gpu-check.sh"), str(tmp_path / "out"), "--build-dir",
                             str(TRIPOD.parent.parent), "--only", "sanitizer"],
                            capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 2 and "SANITIZER_TOOLS" in result.stderr, result.stderr
    assert not (tmp_path / "out" / "sanitizer").exists()
