"""A fatal signal makes tripod print its stack (reference/core/crash_report.h) and still die of the
signal; reports/symbolize_stack.py names the frames' functions from the build. The first GPU run
of the bf16-operand GEMMs died of a segmentation fault with no word of where: finding the function
took a second lease."""
import os
import signal
import subprocess
import sys
from pathlib import Path

from tripod_cli import MPI_ENV, TRIPOD, make_markov_corpus, require_tripod

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "reports" / "symbolize_stack.py"


def symbolize(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=120)


def test_a_segfaulting_tripod_prints_a_stack_that_names_its_functions(tmp_path):
    """The signal is raised in Tripod's own code, at the start of a training step (TRIPOD_FAULT=segv),
    not sent from outside at a random moment: a signal landing inside OpenBLAS's assembly kernels
    (no unwind tables) ended the stack there, which for a tiny model (most of a step in OpenBLAS's
    sgemm kernel) was nearly every time."""
    require_tripod()
    corpus = make_markov_corpus(tmp_path / "markov", tokens=20000)
    log = tmp_path / "log.txt"
    env = {**os.environ, **MPI_ENV, "OMP_NUM_THREADS": "1", "TRIPOD_FAULT": "segv:0:2"}
    with open(log, "w") as out:
        rc = subprocess.run([str(TRIPOD), "train", "--config", "tiny", "--set", f"data.dir={corpus}",
                             "--set", "model.vocab_size=512", "--set", "train.steps=3"],
                            stdout=out, stderr=subprocess.STDOUT, env=env, timeout=120).returncode
    assert rc == -signal.SIGSEGV  # still dies of the signal: exit status 139 to a shell
    text = log.read_text()
    assert "tripod: TRIPOD_FAULT: rank 0 raises SIGSEGV at the start of step 2" in text, text[-2000:]
    assert "tripod: fatal signal SIGSEGV (segmentation fault); its stack follows" in text, text[-2000:]
    named = symbolize(log, TRIPOD)
    assert named.returncode == 0, named.stderr
    frames = [line for line in named.stdout.splitlines() if "  -> " in line]
    functions = [line.split("  -> ", 1)[1] for line in frames]
    assert any(f.startswith("main") for f in functions), named.stdout
    assert any("run_training" in f for f in functions), named.stdout  # the training loop, where it was raised
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
