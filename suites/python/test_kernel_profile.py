"""reports/kernel_profile.py, the GPU check's `profile` step, on Nsight Compute's own CSV: rows cut
from a real run on an H200 (ci/gpu-check.sh, 2026-12-04: ncu 2025.3's warnings and ==PROF== lines
first, values in ns with thousands separators)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "reports" / "kernel_profile.py"
FIXTURE = Path(__file__).parent / "fixtures" / "ncu_gpu_time.csv"

sys.path.insert(0, str(ROOT / "reports"))
import kernel_profile  # noqa: E402


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=60)


def test_kernels_are_summed_by_name_per_step(tmp_path):
    out, key = tmp_path / "profile.json", tmp_path / "key.txt"
    result = run(FIXTURE, "--steps", 2, "--json", out, "--key", key)
    assert result.returncode == 0, result.stderr
    s = json.loads(out.read_text())
    by_name = {k["name"]: k for k in s["kernels"]}
    # the two Kernel2 rows: 6,687,008 ns + 6,163,264 ns, over 2 steps
    assert by_name["Kernel2"]["calls"] == 2 and by_name["Kernel2"]["ms_per_step"] == pytest.approx(6.425136)
    assert by_name["warp_rows_kernel"]["calls"] == 3
    assert s["kernels"][0]["name"] == "Kernel2"  # the largest first
    assert sum(k["share"] for k in s["kernels"]) == pytest.approx(1.0)
    assert s["launches_per_step"] == pytest.approx(3.0)
    assert s["kernel_ms_per_step"] == pytest.approx(sum(k["ms_per_step"] for k in s["kernels"]))
    assert "Kernel2" in result.stdout and key.read_text().startswith(f"{s['kernel_ms_per_step']:.1f} ms of kernels/step")


def test_demangled_names_keep_what_a_generic_kernel_computes():
    """ncu --print-kernel-base demangled (what the profile step asks for now): the template
    arguments say which element-wise operation a generic kernel ran; the rest is noise. Written by
    hand in that form."""
    assert kernel_profile.short_name(
        "void tripod::cuda::(anonymous namespace)::elementwise_kernel<tripod::cuda::(anonymous namespace)::"
        "ConvertOp<float, tripod::bf16>>(T1, long)") == "elementwise_kernel<ConvertOp<float, bf16>>"
    assert kernel_profile.short_name(
        "void tripod::cuda::(anonymous namespace)::warp_rows_kernel<tripod::cuda::(anonymous namespace)::"
        "HeadMajorRowCopy<float, tripod::bf16>>(T1, long)") == "warp_rows_kernel<HeadMajorRowCopy<float, bf16>>"
    assert kernel_profile.short_name("Kernel2") == "Kernel2"
    assert kernel_profile.short_name("nvjet_sm90_tss_192x192_64x4_1x2_h_bz_coopB_TNN") == \
        "nvjet_sm90_tss_192x192_64x4_1x2_h_bz_coopB_TNN"
    rows = [{"Metric Name": "gpu__time_duration.sum", "Metric Unit": "ns", "Metric Value": v, "Kernel Name": n}
            for n, v in [("void tripod::cuda::elementwise_kernel<tripod::cuda::AddOp<float>>(T1, long)", "1,000"),
                         ("void tripod::cuda::elementwise_kernel<tripod::cuda::GeluForwardOp<float>>(T1, long)", "3,000"),
                         ("void tripod::cuda::elementwise_kernel<tripod::cuda::AddOp<float>>(T1, long)", "2,000")]]
    s = kernel_profile.summarise(rows, steps=1)
    assert [(k["name"], k["calls"]) for k in s["kernels"]] == [("elementwise_kernel<AddOp<float>>", 2),
                                                               ("elementwise_kernel<GeluForwardOp<float>>", 1)]


def test_units_are_read_not_assumed():
    row = {"Metric Unit": "usecond", "Metric Value": "1,234.5", "Kernel Name": "k"}
    assert kernel_profile.kernel_seconds(row) == pytest.approx(1.2345e-3)
    with pytest.raises(ValueError, match="unknown time unit"):
        kernel_profile.kernel_seconds({"Metric Unit": "cycle", "Metric Value": "5", "Kernel Name": "k"})


def test_a_file_without_kernel_rows_is_an_error_not_an_empty_table(tmp_path):
    bad = tmp_path / "ncu.csv"
    bad.write_text("==ERROR== The application returned an error code (1).\n")
    result = run(bad, "--steps", 2)
    assert result.returncode == 1 and "no kernel rows" in result.stderr
    assert run(FIXTURE, "--steps", 0).returncode == 1
