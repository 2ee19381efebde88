"""reports/torch_attention_rate.py (PyTorch's causal attention per SDPA backend, the peer of Tripod's
attention rows) on the CPU, and how the GPU check's summary reads it beside Tripod's figures."""
import json
import os
import subprocess
import sys
from pathlib import Path

SOURCE = Path(os.environ.get("TRIPOD_SOURCE_DIR", Path(__file__).resolve().parents[2]))
SCRIPT = SOURCE / "reports" / "torch_attention_rate.py"
sys.path.insert(0, str(SOURCE / "reports"))
import gpu_check_summary  # noqa: E402


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=300)


def test_it_times_forward_and_backward_and_checks_the_backward_reruns(tmp_path):
    result = run("--device", "cpu", "--batch", "1", "--seq-len", "48", "--heads", "2", "--head-dim", "16", "--dtype",
                 "fp32", "--repeat", "2", "--min-time-ms", "0", "--json", tmp_path / "a.json")
    assert result.returncode == 0, result.stdout + result.stderr
    j = json.loads((tmp_path / "a.json").read_text())
    ran = [r for r in j["results"] if "error" not in r]
    assert j["causal"] and ran, j
    for r in ran:
        assert r["fwd_median_ms"] > 0 and r["bwd_median_ms"] > 0
        # the nominal FLOPs of tripod bench kernel-rate: 4·B·H·T²·hd forward, twice that backward
        products = 1 * 2 * 48 * 48 * 16
        assert abs(r["fwd_nominal_tflops"] * 1e12 * r["fwd_median_ms"] / 1e3 - 4 * products) < 1e-3 * products
        assert abs(r["bwd_nominal_tflops"] * 1e12 * r["bwd_median_ms"] / 1e3 - 8 * products) < 1e-3 * products
        assert r["deterministic_backward"] is True  # the CPU's kernels add in one order
        assert r["fwd_pct_of_peak"] is None  # no peak for a CPU unless stated


def test_a_bad_shape_is_refused():
    result = run("--device", "cpu", "--heads", "0")
    assert result.returncode == 2 and "must be positive" in result.stderr, result.stderr


def write(path, obj):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))


def test_the_summary_sets_pytorchs_backends_beside_tripods_attention(tmp_path):
    shape = {"batch": 8, "seq_len": 1024, "heads": 12, "head_dim": 64, "dtype": "bf16"}
    write(tmp_path / "peer" / "attention.json", {"results": [
        {"backend": "flash", **shape, "fwd_median_ms": 0.08, "bwd_median_ms": 0.22, "deterministic_backward": False},
        {"backend": "cudnn", **shape, "fwd_median_ms": 0.07, "bwd_median_ms": 0.18, "deterministic_backward": True},
        {"backend": "math", **shape, "error": "No available kernel"}]})
    write(tmp_path / "peer" / "peer.json", {"torch": "2.11.0", "batch": 8, "seq_len": 1024, "attention": "sdpa",
                                            "results": [{"precision": "bf16", "tokens_per_second": 189782,
                                                         "mfu": 0.164}]})
    write(tmp_path / "kernels" / "kernels.json", {"attention_batch": 8, "context": 1024, "heads": 12, "channels": 768,
                                                  "results": [
        {"name": "attention fwd bf16", "median_seconds": 0.00055},
        {"name": "attention bwd bf16", "median_seconds": 0.00071}]})
    key = gpu_check_summary.key_peer(tmp_path / "peer")
    assert key.startswith("PyTorch 2.11.0 B8xT1024 sdpa: bf16 189782 tokens/s MFU 16.4%; "), key
    assert ("attention B8 T1024 H12 hd64 bf16 fwd+bwd: flash 0.080+0.220 ms (backward not deterministic), "
            "cudnn 0.070+0.180 ms") in key, key
    assert key.endswith("Tripod's 0.550+0.710 ms, 5.0x PyTorch's cudnn"), key  # 1.26 / 0.25
    # kernel-rate's attention at another shape is not compared; without its figures, PyTorch's alone;
    # without the file, the GPT-2 line alone
    kernels = json.loads((tmp_path / "kernels" / "kernels.json").read_text())
    write(tmp_path / "kernels" / "kernels.json", {**kernels, "context": 512})
    assert gpu_check_summary.key_peer(tmp_path / "peer").endswith("cudnn 0.070+0.180 ms")
    # a kernel-rate row that failed (its error recorded, no timing): not compared, and no error
    write(tmp_path / "kernels" / "kernels.json", {**kernels, "results": [
        {"name": "attention fwd bf16", "error": "CUDA error in attention_forward"}, kernels["results"][1]]})
    assert gpu_check_summary.key_peer(tmp_path / "peer").endswith("cudnn 0.070+0.180 ms")
    (tmp_path / "kernels" / "kernels.json").unlink()
    assert gpu_check_summary.key_peer(tmp_path / "peer").endswith("cudnn 0.070+0.180 ms")
    (tmp_path / "peer" / "attention.json").unlink()
    assert gpu_check_summary.key_peer(tmp_path / "peer").endswith("MFU 16.4%")
