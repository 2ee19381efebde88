"""Per-rank step times in the metrics JSONL: every train.rank_stats_every steps the ranks gather
their step and wait times, and the report names the rank that worked longest (a straggler made
with --slow-rank), on the CPU as on a GPU."""
import json
import subprocess

from tripod_cli import MPI_ENV, TRIPOD, make_markov_corpus, mpirun_command, require_tripod

SMALL = ["--set", "model.n_layer=1", "--set", "model.d_model=32", "--set", "model.n_head=2",
         "--set", "model.d_ff=64", "--set", "model.context=16", "--set", "train.seq_len=16",
         "--set", "train.batch_size=8", "--set", "train.eval_batches=1", "--set", "optim.warmup_steps=1"]


def run(cmd, timeout=120):
    require_tripod()
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=MPI_ENV)


def test_the_slow_rank_is_named_in_the_metrics_and_the_summary(tmp_path):
    corpus = make_markov_corpus(tmp_path / "markov")
    metrics = tmp_path / "m.jsonl"
    result = run(mpirun_command(3, "train", "--config", "tiny", "--set", f"data.dir={corpus}", *SMALL,
                                "--set", "train.steps=12", "--set", "train.rank_stats_every=5", "--set", "train.batch_size=6",
                                "--set", f"train.metrics={metrics}", "--slow-rank", "2:30"))
    assert result.returncode == 0, result.stdout + result.stderr
    events = [json.loads(line) for line in metrics.read_text().splitlines()]
    ranks = [e for e in events if e.get("event") == "ranks"]
    assert [e["step"] for e in ranks] == [5, 10, 12]  # every 5 steps and at the last
    assert [e["steps"] for e in ranks] == [5, 5, 2]
    for e in ranks:
        assert len(e["step_seconds"]) == len(e["comm_wait_seconds"]) == len(e["busy_seconds"]) == 3
        assert e["slowest_rank"] == 2, e
        assert e["slowest_busy_seconds"] >= 0.030  # it slept 30 ms in every step
        assert e["straggler_ratio"] > 1
        # The others waited for it: most of their step is waiting.
        assert min(e["comm_wait_seconds"][:2]) > e["comm_wait_seconds"][2]
    assert "ranks (last 2 steps): slowest 2," in result.stdout


def test_bad_slow_rank_and_interval_are_refused(tmp_path):
    for args, message in [(["--slow-rank", "1"], "--slow-rank: '1' is not RANK:MILLISECONDS"),
                          (["--slow-rank", "x:5"], "--slow-rank: 'x:5' is not RANK:MILLISECONDS"),
                          (["--set", "train.rank_stats_every=-1"], "train.rank_stats_every must be >= 0")]:
        result = run([str(TRIPOD), "train", "--config", "tiny", *SMALL, "--set", "train.steps=1", *args])
        assert result.returncode != 0
        assert message in result.stderr, result.stderr
