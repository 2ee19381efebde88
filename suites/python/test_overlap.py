"""Overlap mechanisms from the command line: the MPI progress thread (`--mpi-progress-us`), ZeRO-3
prefetch (`--zero3-prefetch`) and activation recomputation (`train.recompute`) change no bit of
training - the metrics are identical to a run without them - and `tripod bench overlap` reports the
fraction hidden per mechanism, in its table and as JSON."""
import json
import os
import subprocess
from pathlib import Path

import pytest

from tripod_cli import BUILD_DIR, MPI_ENV, MPIRUN, make_markov_corpus, mpirun_command, require_tripod

ALGORITHM_VARIABLE = "OMPI_MCA_coll_libnbc_iallreduce_algorithm"
REDUCE_ALGORITHM_VARIABLE = "OMPI_MCA_coll_libnbc_ireduce_algorithm"
SMALL = ["--set", "model.n_layer=2", "--set", "model.d_model=32", "--set", "model.n_head=2",
         "--set", "model.d_ff=64", "--set", "model.context=16", "--set", "train.seq_len=16",
         "--set", "train.batch_size=8", "--set", "train.eval_batches=1", "--set", "train.steps=4",
         "--set", "optim.warmup_steps=1"]


def mpirun(ranks, *args, timeout=120):
    require_tripod()
    return subprocess.run(mpirun_command(ranks, *args), capture_output=True, text=True, timeout=timeout, env=MPI_ENV)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return make_markov_corpus(tmp_path_factory.mktemp("corpus") / "markov")


def metric_lines(path):  # every step's record, without the header and the wall-clock fields
    records = [json.loads(line) for line in Path(path).read_text().splitlines()[1:]]
    return [{k: v for k, v in r.items() if k in ("step", "loss", "grad_norm", "val_loss")} for r in records]


def test_mechanisms_change_no_bit(corpus, tmp_path):
    runs = {"plain": [], "progress": ["--mpi-progress-us", "100"], "prefetch": ["--zero3-prefetch", "3"],
            "selective": ["--set", "train.recompute=selective"], "full": ["--set", "train.recompute=full"],
            "pieces": ["--mpi-chunk-mb", "0.002"]}  # every bucket's reduce-scatter in 2 KiB pieces
    got = {}
    for name, extra in runs.items():
        metrics = tmp_path / f"{name}.jsonl"
        result = mpirun(2, "train", "--config", "tiny", "--set", f"data.dir={corpus}", "--set",
                        f"train.metrics={metrics}", *SMALL, "--zero", "3", *extra)
        assert result.returncode == 0, name + ": " + result.stdout + result.stderr
        got[name] = metric_lines(metrics)
        assert len(got[name]) >= 4, name
    for name in runs:
        assert got[name] == got["plain"], name


# Tied: the head's part during backward, the rows after it; untied (ZeRO-2, which reduces every
# micro-batch): only the rows and wpe are ever sent.
@pytest.mark.parametrize("head,zero,says", [
    ("tied", "1", "tied wte's gradient reduced over DP in two parts"),
    ("untied", "2", "untied wte's gradient reduced over DP as the batches' token rows only (train.split_tied_grad)")])
def test_the_embedding_gradient_split_can_be_turned_off_and_changes_only_rounding(corpus, tmp_path, head, zero, says):
    got = {}
    for split in ("true", "false"):
        metrics = tmp_path / f"{split}.jsonl"
        result = mpirun(2, "train", "--config", "tiny", "--set", f"data.dir={corpus}", "--set",
                        f"train.metrics={metrics}", *SMALL, "--zero", zero, "--set", f"train.split_tied_grad={split}",
                        "--set", f"model.tie_embeddings={'true' if head == 'tied' else 'false'}")
        assert result.returncode == 0, split + ": " + result.stdout + result.stderr
        assert (says in result.stdout) == (split == "true"), result.stdout
        got[split] = metric_lines(metrics)
    assert len(got["true"]) == len(got["false"]) >= 4
    for on, off in zip(got["true"], got["false"]):  # fp32: the two parts are summed over DP separately
        for key in set(on) & {"loss", "val_loss"}:
            assert abs(on[key] - off[key]) <= 1e-5 * abs(off[key]), (on, off)


def test_bench_overlap_reports_each_mechanism(tmp_path):
    out = tmp_path / "overlap.json"
    result = mpirun(2, "bench", "overlap", "--config", "tiny", "--batch", "2", "--seq-len", "16", "--vocab", "64",
                    "--repeats", "2", "--progress-us", "100", "--json", out)
    assert result.returncode == 0, result.stdout + result.stderr
    for label in ("no communication", "bucketed all-reduce", "tied wte's gradient in two parts", "progress thread",
                  "gathered on use", "prefetched", "hidden by bucketing", "with the tied gradient split"):
        assert label in result.stdout, label
    report = json.loads(out.read_text())
    assert set(report["hidden_by_mechanism"]) == {"bucketing", "bucketing_with_tied_grad_split",
                                                  "bucketing_with_progress_thread", "zero3_prefetch",
                                                  "zero3_prefetch_with_progress_thread"}
    assert report["hidden_fraction"] == report["hidden_by_mechanism"]["bucketing"]
    assert set(report["seconds"]) == {"compute", "at_end", "bucketed", "bucketed_split", "bucketed_progress",
                                      "zero3_on_use", "zero3_prefetch", "zero3_prefetch_progress"}
    assert all(s > 0 for s in report["seconds"].values())
    assert set(report["communication_call_seconds"]) == set(report["seconds"])
    calls = report["communication_call_seconds"]
    assert 0 <= calls["compute"] < calls["at_end"]  # without reductions the hooks only look for work in flight
    # ZeRO-3's calls split: parameter gathers, and the rest (reduce-scatters); some time in each
    gathers = report["gather_call_seconds"]
    assert set(gathers) == {"zero3_on_use", "zero3_prefetch", "zero3_prefetch_progress"}
    assert all(0 < gathers[row] < calls[row] for row in gathers), (gathers, calls)
    assert "gathers = of those calls" in result.stdout
    # A bucket closes once it holds --bucket-mb (1 MiB by default): the header said "<=" of buckets
    # that hold more; it names the largest now.
    header = result.stdout.split("tripod bench overlap: ")[1].split("\n")[0]
    buckets = int(header.split(" buckets (")[0].split()[-1])
    largest = float(header.split("the largest ")[1].split(" MiB")[0])
    assert "closed at >= 1.00 MiB" in header and buckets >= 2 and largest >= 1.0, header
    assert "with the progress thread:" in result.stdout  # ZeRO-3's prefetch with the thread advancing it
    assert set(report["hidden_in_calls_by_mechanism"]) == set(report["hidden_by_mechanism"])
    assert 0 < report["last_bucket_share"] < 1
    # The split's second part: the token rows of wte (and wpe), within the embeddings' last bucket.
    assert 0 < report["split_rest_share"] <= report["last_bucket_share"]
    if ALGORITHM_VARIABLE not in os.environ:  # Tripod asks Open MPI for its ring unless the user chose
        assert report["iallreduce_algorithm"] == "ring"
        assert "non-blocking all-reduce: ring" in result.stdout
    if REDUCE_ALGORITHM_VARIABLE not in os.environ:  # and for its binomial reduce
        assert report["ireduce_algorithm"] == "binomial"
        assert "non-blocking reduce: binomial (Open MPI coll_libnbc_ireduce_algorithm 2)" in result.stdout


@pytest.mark.parametrize("dtype, gemms", [("fp32", "exact fp32"), ("bf16-mixed", "bf16 operands, fp32 accumulation")])
def test_bench_overlap_runs_the_precision_policy_as_training_does(tmp_path, dtype, gemms):
    # --set train.dtype=bf16-mixed used to time exact fp32 GEMMs: the policy was never applied.
    out = tmp_path / "overlap.json"
    result = mpirun(2, "bench", "overlap", "--config", "tiny", "--batch", "1", "--seq-len", "8", "--vocab", "64",
                    "--repeats", "1", "--set", f"train.dtype={dtype}", "--json", out)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"tiny, {dtype} (GEMMs: {gemms})" in result.stdout
    report = json.loads(out.read_text())
    assert report["precision"] == dtype and report["gemms"] == gemms
    assert ("ZeRO-3 gathers the GEMM weights as bf16" in result.stdout) == (dtype == "bf16-mixed")


def test_a_users_all_reduce_and_reduce_algorithms_are_kept():
    # mpirun passes OMPI_MCA_ variables on to every rank
    env = {**MPI_ENV, ALGORITHM_VARIABLE: "2", REDUCE_ALGORITHM_VARIABLE: "1"}
    result = subprocess.run(mpirun_command(2, "bench", "overlap", "--config", "tiny", "--batch", "1", "--seq-len", "8",
                                           "--vocab", "64", "--repeats", "1", "--progress-us", "0"),
                            capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "non-blocking all-reduce: binomial (Open MPI coll_libnbc_iallreduce_algorithm 2)" in result.stdout
    assert "non-blocking reduce: chain (Open MPI coll_libnbc_ireduce_algorithm 1)" in result.stdout


def test_bare_reduction_comparison_prints_each_size():
    """microbench/bare_nonblocking_reductions.cpp, the measurement behind the two-rank reduce_scatter."""
    require_tripod()
    program = BUILD_DIR / "microbench" / "tripod_bare_nonblocking_reductions"
    result = subprocess.run([MPIRUN, "--oversubscribe", "--mca", "btl", "self,vader", "--timeout", "60", "-np", "2",
                             str(program), "-b", "8K", "-e", "32K", "-f", "2", "-r", "1"],
                            capture_output=True, text=True, timeout=90, env=MPI_ENV)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = [line.split() for line in result.stdout.splitlines() if not line.startswith("#")]
    assert [int(row[0]) for row in rows] == [8192, 16384, 32768]
    assert all(len(row) == 5 and float(row[1]) > 0 and float(row[2]) > 0 for row in rows)


@pytest.mark.parametrize("program", ["tripod_bare_nonblocking_reductions", "tripod_bare_mpi_allreduce"])
@pytest.mark.parametrize("args, message", [
    (["-b", "8K", "-e", "32K", "-f"], "-f needs a value"),  # was ignored, and the default factor ran
    (["-b", "8X"], "-b 8X: not a size"),                     # was 8 bytes
    (["-b", "2", "-e", "8"], "-b must be at least"),         # a 0-float reduction
    (["-b", "64K", "-e", "8K"], "-e must be at least -b"),   # no row, exit 0
    (["-b", "8K", "-e", "8K", "-f", "two"], "-f two: not a whole number"),
    (["-q", "1"], "unknown flag -q"),
])
def test_the_bare_baselines_refuse_a_bad_command_line(program, args, message):
    require_tripod()
    result = subprocess.run([MPIRUN, "--oversubscribe", "--mca", "btl", "self,vader", "--timeout", "60", "-np", "2",
                             str(BUILD_DIR / "microbench" / program), *args],
                            capture_output=True, text=True, timeout=90, env=MPI_ENV)
    assert result.returncode != 0 and f"{program}: {message}" in result.stderr, result.stdout + result.stderr


def test_the_bare_comparison_prints_the_bytes_it_reduced():
    # 3 ranks cannot split 8 KiB into whole floats per rank: 8184 bytes are reduced, and printed.
    require_tripod()
    result = subprocess.run([MPIRUN, "--oversubscribe", "--mca", "btl", "self,vader", "--timeout", "60", "-np", "3",
                             str(BUILD_DIR / "microbench" / "tripod_bare_nonblocking_reductions"), "-b", "8K", "-e",
                             "8K", "-r", "1"], capture_output=True, text=True, timeout=90, env=MPI_ENV)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = [line.split() for line in result.stdout.splitlines() if not line.startswith("#")]
    assert [int(row[0]) for row in rows] == [8184]


@pytest.mark.parametrize("args, message", [
    (["train", "--config", "tiny", "--mpi-progress-us", "-5"], "--mpi-progress-us: -5 is negative"),
    (["train", "--config", "tiny", "--zero", "3", "--zero3-prefetch", "-1"], "--zero3-prefetch"),
    (["train", "--config", "tiny", "--mpi-chunk-mb", "-1"], "--mpi-chunk-mb: -1 is out of range (MiB, 0-1048576; 0: whole messages)"),
    (["train", "--config", "tiny", "--set", "train.recompute=most"], "train.recompute: none, selective or full"),
    (["bench", "overlap", "--mpi-progress-us", "100"], "leave --mpi-progress-us at 0"),
])
def test_bad_settings_fail_clearly(args, message):
    result = mpirun(2, *args)
    assert result.returncode != 0
    assert message in result.stdout + result.stderr, result.stdout + result.stderr


def test_bench_overlap_on_one_rank_is_refused(tmp_path):
    # Nothing is communicated on one rank: its "hidden" shares read 100 % (and -65 %), exit 0.
    result = mpirun(1, "bench", "overlap", "--config", "tiny", "--batch", "1", "--seq-len", "16", "--vocab", "64",
                    "--repeats", "1", "--json", tmp_path / "o.json")
    assert result.returncode != 0
    assert "bench overlap measures data-parallel communication: run it on 2 or more ranks" in result.stderr, \
        result.stderr
    assert not (tmp_path / "o.json").exists()
