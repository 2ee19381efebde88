"""`tripod train` under mpirun: data-parallel runs with every ZeRO stage give the single-process
losses, and bad layouts fail on every rank with a clear message and a non-zero exit, never a hang."""
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tripod_cli import MPI_ENV, TRIPOD, make_markov_corpus, mpirun_command, require_tripod
SMALL = ["--set", "model.n_layer=1", "--set", "model.d_model=32", "--set", "model.n_head=2",
         "--set", "model.d_ff=64", "--set", "model.context=16", "--set", "train.seq_len=16",
         "--set", "train.batch_size=8", "--set", "train.eval_batches=1", "--set", "train.steps=4",
         "--set", "train.dtype=fp64", "--set", "optim.warmup_steps=1"]


def run(cmd, timeout=120):
    require_tripod()
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=MPI_ENV)


def mpirun(ranks, *args):
    return run(mpirun_command(ranks, *args))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return make_markov_corpus(tmp_path_factory.mktemp("corpus") / "markov")


def losses(metrics, key="loss"):
    return [json.loads(line)[key] for line in Path(metrics).read_text().splitlines()[1:] if key in line]


def test_every_zero_stage_matches_single_process(corpus, tmp_path):
    reference = tmp_path / "single.jsonl"
    single = run([str(TRIPOD), "train", "--config", "tiny", "--set", f"data.dir={corpus}",
                  "--set", f"train.metrics={reference}", *SMALL])
    assert single.returncode == 0, single.stderr
    for zero in range(4):
        metrics = tmp_path / f"zero{zero}.jsonl"
        result = mpirun(2, "train", "--config", "tiny", "--set", f"data.dir={corpus}", "--set",
                        f"train.metrics={metrics}", *SMALL, "--zero", zero)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "tp=1 pp=1 dp=2, ZeRO-" + str(zero) in result.stdout
        assert result.stdout.count("done:") == 1, "only rank 0 reports"
        assert "memory per rank" in result.stdout
        assert "  threads: 2 ranks on this machine, " in result.stdout  # as conform and the README say it
        for got, want in zip(losses(metrics), losses(reference)):
            assert abs(got - want) <= 1e-10 * abs(want)  # fp64: DP only reorders the gradient sums


@pytest.mark.parametrize("args, message", [
    (["--dp", "4"], "needs 4 ranks but the world has 2"),
    (["--zero", "5"], "the ZeRO stage (--zero) must be 0, 1, 2 or 3"),
    (["--bucket-mb", "0"], "the gradient bucket size (--bucket-mb) must be a number of MiB in (0, 1048576] (got 0)"),
    (["--pp", "2"], "the model has only 1 layer (model.n_layer)"),
    (["--pp", "2", "--set", "model.n_layer=2", "--schedule", "interleaved", "--virtual-stages", "2"],
     "needs 4 chunks of at least one layer each, but the model has only 2 layers"),
    (["--pp", "2", "--set", "model.n_layer=4", "--schedule", "interleaved", "--virtual-stages", "2",
      "--microbatches", "1"], "to be a multiple of the pipeline stages"),
    (["--microbatches", "8"], "which do not split into 8 micro-batches"),
    (["--pp", "2", "--set", "model.n_layer=2", "--pipeline-split", "1,2"], "pipeline split sums to 3 layers"),
    (["--pp", "2", "--set", "model.n_layer=2", "--schedule", "zigzag"], "unknown pipeline schedule 'zigzag'"),
    (["--zero", "0", "--gather-fp32"], "fp32 parameter gathers (-gfp32, --gather-fp32) are for ZeRO 1-3"),
    (["--zero", "3", "--overlap-param-gather"], "overlapped parameter gathers (-opg, --overlap-param-gather) are "
     "for ZeRO-1/2, whose updated parameters are all-gathered after the step (ZeRO-3: gathers on use; -pfN prefetches)"),
])
def test_bad_layout_fails_on_every_rank(corpus, args, message):
    result = mpirun(2, "train", "--config", "tiny", "--set", f"data.dir={corpus}", *SMALL, *args)
    assert result.returncode != 0
    assert result.stderr.count(message) == 2, result.stderr  # both ranks say why
    assert "rank 0 of 2" in result.stderr and "rank 1 of 2" in result.stderr


@pytest.mark.parametrize("zero, fp32_flag, said", [
    ("3", "--zero3-gather-fp32", "ZeRO-3 gathers the GEMM weights as bf16: "),  # the flag's first name
    ("2", "--gather-fp32", "ZeRO-2 gathers the GEMM weights as bf16 after each step: "),
    ("1", "--gather-fp32", "ZeRO-1 gathers the GEMM weights as bf16 after each step: ")])
def test_bf16_gathers_are_said_and_give_the_fp32_gathers_losses(corpus, tmp_path, zero, fp32_flag, said):
    # bf16-mixed ZeRO 1-3 over 2 DP ranks gather the GEMM weights as bf16 (ZeRO-3 on use, ZeRO-1/2
    # after the step), say so at start-up, and train bit for bit as with fp32 gathers (the metrics
    # print losses to every digit).
    mixed = [a if a != "train.dtype=fp64" else "train.dtype=bf16-mixed" for a in SMALL]
    seen = {}
    for extra in ([], [fp32_flag]):
        metrics = tmp_path / f"z{zero}-{len(extra)}.jsonl"
        result = mpirun(2, "train", "--config", "tiny", "--set", f"data.dir={corpus}", "--set",
                        f"train.metrics={metrics}", *mixed, "--zero", zero, *extra)
        assert result.returncode == 0, result.stdout + result.stderr
        # one block of d_model 32, d_ff 64: c_attn 96 x 32, c_proj 32 x 32, c_fc 64 x 32, its c_proj 32 x 64
        assert (said + "8192 of 11168 parameters" in result.stdout) == (not extra), result.stdout
        seen[bool(extra)] = losses(metrics)
    assert seen[False] == seen[True] and len(seen[False]) == 4


@pytest.mark.parametrize("schedule, extra", [("afab", []), ("1f1b", ["--set", "train.pipeline_split=[3,1]"]),
                                             ("1f1b", ["--pipeline-split", "auto"]),
                                             ("interleaved", ["--virtual-stages", "2"])])
def test_pipeline_matches_single_process(corpus, tmp_path, schedule, extra):
    deep = [*SMALL, "--set", "model.n_layer=4"]
    reference = tmp_path / "single.jsonl"
    assert run([str(TRIPOD), "train", "--config", "tiny", "--set", f"data.dir={corpus}",
                "--set", f"train.metrics={reference}", *deep]).returncode == 0
    metrics, trace = tmp_path / "pp2.jsonl", tmp_path / "timeline.json"
    result = mpirun(2, "train", "--config", "tiny", "--set", f"data.dir={corpus}", "--set", f"train.metrics={metrics}",
                    *deep, "--pp", 2, "--schedule", schedule, "--microbatches", 4, "--pipeline-trace", trace, *extra)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"tp=1 pp=2 dp=1, ZeRO-0, {schedule} m=4" in result.stdout
    assert f"pipeline {schedule} p=2 m=4" in result.stdout and "bubble" in result.stdout
    if "train.pipeline_split=[3,1]" in extra:
        assert "split [3,1]" in result.stdout
    if "auto" in extra:  # this model's head (6*32*64 FLOPs/token) is a fraction of a block: even
        assert "split [2,2]" in result.stdout
    for key in ("loss", "val_loss"):  # held-out loss: forward-only pipeline
        assert len(losses(metrics, key)) == len(losses(reference, key)) > 0
        for got, want in zip(losses(metrics, key), losses(reference, key)):
            assert abs(got - want) <= 1e-10 * abs(want)  # fp64: pipelining only reorders the norm's and wte's sums
    timeline = json.loads(trace.read_text())
    assert timeline["schedule"] == schedule and len(timeline["ranks"]) == 2
    v = 2 if schedule == "interleaved" else 1
    for rank in timeline["ranks"]:
        computes = [a for a in rank if a["action"] in ("F", "B")]
        assert len(computes) == 2 * 4 * v  # every micro-batch forward and backward on each chunk
        assert all(a["end"] >= a["start"] >= 0 for a in rank)
    assert 0 <= timeline["measured_bubble"] < 1 and timeline["theoretical_bubble"] == pytest.approx(1 / (4 * v + 1))
    # peak activation memory: AFAB keeps all m micro-batches in flight, 1F1B at most p - rank
    if schedule == "afab":
        assert timeline["in_flight"] == [4, 4]
    if schedule == "1f1b":
        assert timeline["in_flight"] == [2, 1]
        assert timeline["activation_bytes"][0] > timeline["activation_bytes"][1]


def test_three_dimensional_layout_matches_single_process(corpus, tmp_path):
    deep = [*SMALL, "--set", "model.n_layer=2"]
    reference = tmp_path / "single.jsonl"
    assert run([str(TRIPOD), "train", "--config", "tiny", "--set", f"data.dir={corpus}",
                "--set", f"train.metrics={reference}", *deep]).returncode == 0
    metrics = tmp_path / "3d.jsonl"
    result = mpirun(8, "train", "--config", "tiny", "--set", f"data.dir={corpus}", "--set", f"train.metrics={metrics}",
                    *deep, "--tp", 2, "--pp", 2, "--dp", 2, "--zero", 1, "--microbatches", 2, "--sequence-parallel")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "tp=2 pp=2 dp=2, ZeRO-1, sequence parallel, 1f1b m=2" in result.stdout
    for got, want in zip(losses(metrics), losses(reference)):
        assert abs(got - want) <= 1e-10 * abs(want)


def test_tensor_parallel_matches_single_process(corpus, tmp_path):
    reference = tmp_path / "single.jsonl"
    assert run([str(TRIPOD), "train", "--config", "tiny", "--set", f"data.dir={corpus}",
                "--set", f"train.metrics={reference}", *SMALL]).returncode == 0
    for extra, layout in (([], "tp=2 pp=1 dp=2, ZeRO-1"), (["--sequence-parallel"], "ZeRO-1, sequence parallel")):
        metrics = tmp_path / "tp2.jsonl"
        result = mpirun(4, "train", "--config", "tiny", "--set", f"data.dir={corpus}", "--set",
                        f"train.metrics={metrics}", *SMALL, "--tp", 2, "--zero", 1, *extra)
        assert result.returncode == 0, result.stdout + result.stderr
        assert layout in result.stdout
        for got, want in zip(losses(metrics), losses(reference)):
            assert abs(got - want) <= 1e-10 * abs(want)


def test_heads_not_dividing_by_tp_fails_on_every_rank(corpus):
    # SMALL has 2 heads: tp=4 is more than the heads
    result = mpirun(4, "train", "--config", "tiny", "--set", f"data.dir={corpus}", *SMALL, "--tp", 4)
    assert result.returncode != 0
    assert result.stderr.count("rank ") >= 4 and "head" in result.stderr, result.stderr


def test_a_world_that_is_no_multiple_of_tp_times_pp_is_named(corpus):
    # dp was rounded down without a word: "layout tp=2 pp=1 dp=1 needs 2 ranks but the world has 3".
    result = mpirun(3, "train", "--config", "tiny", "--set", f"data.dir={corpus}", *SMALL, "--tp", "2")
    assert result.returncode != 0
    assert "the world's 3 ranks are not a multiple of tp x pp = 2" in result.stderr, result.stderr


def test_batch_not_dividing_among_ranks(corpus):
    result = mpirun(3, "train", "--config", "tiny", "--set", f"data.dir={corpus}", *SMALL)
    assert result.returncode != 0
    assert "does not divide among 3 data-parallel ranks" in result.stderr


def test_ranks_that_outnumber_the_cpus_are_held_against_the_cpus_peak(corpus, tmp_path):
    # Each rank's nominal peak counted a core of its own: 4 one-thread ranks on 2 CPUs were held
    # against 4 cores' peak, halving the MFU (3.54 % printed of 7.07 %).
    cpus = len(os.sched_getaffinity(0))
    if cpus > 4:
        pytest.skip(f"{cpus} CPUs: the test runs twice as many ranks as CPUs, at most 8")
    metrics = tmp_path / "m.jsonl"
    result = mpirun(2 * cpus, "train", "--config", "tiny", "--set", f"data.dir={corpus}", *SMALL,
                    "--set", "train.steps=1", "--set", "train.batch_size=8", "--set", f"train.metrics={metrics}")
    assert result.returncode == 0, result.stderr
    assert "sharing their machines' CPUs" in result.stdout, result.stdout
    per_rank = float(re.search(r"ranks of ([0-9.]+) TFLOP/s each", result.stdout).group(1)) * 1e12
    start = json.loads(metrics.read_text().splitlines()[0])
    # Half a core's peak each; the ranks measure their own clocks, so not to the digit.
    assert 0.3 < start["peak_flops"] / (2 * cpus * per_rank) < 0.7, (start["peak_flops"], per_rank, result.stdout)


def test_ranks_reading_different_corpora_fail_on_every_rank(tmp_path):
    # Each rank reads its own copy of data.dir (node-local disks): rank 1's copy of another corpus
    # trained on other tokens than rank 0's, exit 0. Simulated with one working folder per rank and a
    # relative data.dir (mpirun's MPMD form).
    require_tripod()
    for node, seed in (("node0", 1), ("node1", 2)):
        (tmp_path / node).mkdir()
        run([str(TRIPOD), "data", "synthetic", "--out", str(tmp_path / node / "data"), "--vocab-size", "64",
             "--order", "1", "--tokens", "20000", "--seed", str(seed)])
    args = [str(TRIPOD), "train", "--config", "tiny", "--set", "data.dir=data", *SMALL, "--dp", "2"]
    command = mpirun_command(1, *args[1:])  # mpirun's options, then the first program's
    first = command.index(str(TRIPOD))
    mpmd = [*command[:first - 2], "-np", "1", "--wdir", str(tmp_path / "node0"), *args,
            ":", "-np", "1", "--wdir", str(tmp_path / "node1"), *args]
    result = run(mpmd)
    assert result.returncode != 0, result.stdout
    assert result.stderr.count("the ranks read different training tokens from data.dir data: rank 0's have XXH64") == 2, \
        result.stderr
    assert "rank 1 has " in result.stderr and "step " not in result.stdout
    # The same training split with another held-out one: each rank evaluated its rows on its own
    # copy, a validation loss over two corpora, exit 0.
    (tmp_path / "node1" / "data").rename(tmp_path / "other")
    shutil.copytree(tmp_path / "node0" / "data", tmp_path / "node1" / "data")
    shutil.copy(tmp_path / "other" / "val_000000.bin", tmp_path / "node1" / "data" / "val_000000.bin")
    result = run(mpmd)
    assert result.returncode != 0, result.stdout
    assert result.stderr.count("the ranks read different held-out tokens from data.dir data") == 2, result.stderr
    # The same corpus on both: it trains.
    shutil.copy(tmp_path / "node0" / "data" / "val_000000.bin", tmp_path / "node1" / "data" / "val_000000.bin")
    result = run(mpmd)
    assert result.returncode == 0, result.stderr
