"""A fatal signal makes tripod print its stack (reference/core/crash_report.h) and still die of the
signal; reports/symbolize_stack.py names the frames' functions from the build. The first GPU run
of the bf16-operand GEMMs died of a segmentation fault with no word of where: finding the function
took a second lease."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tripod_cli import TRIPOD, require_tripod

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "reports" / "symbolize_stack.py"


def symbolize(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=120)


def test_a_segfaulting_tripod_prints_a_stack_that_names_its_functions(tmp_path):
    require_tripod()
    log = tmp_path / "log.txt"
    # One thread, so the signal lands on the main thread, deep in a training step.
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with open(log, "w") as out:
        proc = subprocess.Popen([str(TRIPOD), "bench", "train", "--config", "tiny", "--set", "model.vocab_size=512",
                                 "--steps", "100000"], stdout=out, stderr=subprocess.STDOUT, env=env)
        time.sleep(3)
        proc.send_signal(signal.SIGSEGV)
        rc = proc.wait(timeout=60)
    assert rc == -signal.SIGSEGV  # still dies of the signal: exit status 139 to a shell
    text = log.read_text()
    assert "tripod: fatal signal SIGSEGV (segmentation fault); its stack follows" in text, text[-2000:]
    named = symbolize(log, TRIPOD)
    assert named.returncode == 0, named.stderr
    frames = [line for line in named.stdout.splitlines() if "  -> " in line]
    functions = [line.split("  -> ", 1)[1] for line in frames]
    assert any(f.startswith("main") for f in functions), named.stdout
    assert any("run_bench_train" in f for f in functions), named.stdout  # the command's own function
    site = symbolize(log, TRIPOD, "--site")  # where the signal struck, as the GPU check's reason gives it
    assert site.returncode == 0 and site.stdout.strip(), site.stderr
    assert "on_fatal_signal" not in site.stdout and "(" not in site.stdout.replace("(anonymous namespace)", "")


def test_the_crash_site_is_the_first_frame_below_the_handler_without_its_arguments():
    sys.path.insert(0, str(ROOT / "reports"))
    from symbolize_stack import crash_site
    handler = "tripod::(anonymous namespace)::on_fatal_signal(int) (crash_report.cpp:?)"
    assert crash_site([handler, "", "void tripod::cpu::gemm<float>(bool, bool, long) (gemm.cpp:12)", "main"]) \
        == "void tripod::cpu::gemm<float>"
    assert crash_site([handler, "tripod::(anonymous namespace)::backward_products(tripod::Backend&) (linear.cpp:?)"]) \
        == "tripod::(anonymous namespace)::backward_products"
    # inlined: the innermost call; a clone suffix goes with the arguments
    assert crash_site(["f(int) [clone .constprop.0] < g(int)"]) == "f"
    assert crash_site(["std::function<void (int)>::operator()(int) const"]) == "std::function<void (int)>::operator()"
    assert crash_site([handler, ""]) is None


def test_frames_of_other_binaries_and_logs_without_frames(tmp_path):
    require_tripod()
    log = tmp_path / "other.txt"
    log.write_text("tripod: error: something else\n/lib/x86_64-linux-gnu/libc.so.6(+0x3c050)[0x7f0]\n")
    result = symbolize(log, TRIPOD)
    assert result.returncode == 1 and "holds no frame of tripod" in result.stderr
    assert symbolize(tmp_path / "missing.txt", TRIPOD).returncode == 2
    # A frame of the binary's name but from another build: an offset with no symbol is said so.
    log.write_text("/node/bin/tripod(+0xfffffff0)[0x55555560e1f0]\n")
    result = symbolize(log, TRIPOD)
    assert result.returncode == 0 and "no symbol" in result.stdout, result.stdout
