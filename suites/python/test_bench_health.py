"""`tripod bench health` reads NVML; where the NVIDIA driver's NVML is absent (this machine) it is a
clear error within seconds, exit 1, naming the library, never a crash."""
import subprocess
import time

import pytest

from tripod_cli import TRIPOD, require_tripod


def test_health_without_nvml_is_a_clear_error():
    require_tripod()
    started = time.monotonic()
    result = subprocess.run([str(TRIPOD), "bench", "health", "--library", "libnvidia-ml-absent.so.1"],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 1
    assert "libnvidia-ml-absent.so.1 could not be loaded" in result.stderr, result.stderr
    assert time.monotonic() - started < 10


def test_health_refuses_bad_sampling():
    require_tripod()
    result = subprocess.run([str(TRIPOD), "bench", "health", "--samples", "0"], capture_output=True, text=True,
                            timeout=30)
    assert result.returncode == 1
    assert "--samples must be >= 1" in result.stderr


def test_health_reads_every_gpu_where_nvml_is_present(tmp_path):
    require_tripod()
    out = tmp_path / "health.json"
    result = subprocess.run([str(TRIPOD), "bench", "health", "--samples", "2", "--interval-ms", "10", "--json",
                             str(out)], capture_output=True, text=True, timeout=30)
    if "could not be loaded" in result.stderr:
        pytest.skip("no NVML on this machine")
    assert result.returncode == 0, result.stderr
    import json
    readings = json.loads(out.read_text())["readings"]
    assert readings and all(0 < r["temperature_c"] < 120 and 0 < r["power_w"] < 2000 for r in readings)
