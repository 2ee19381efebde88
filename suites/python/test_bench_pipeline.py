"""`tripod bench pipeline` under mpirun (2 ranks), `tripod bench layouts` with pipelined layouts and
`tripod schedule` (the simulator). Bench pipeline: every schedule is measured for every micro-batch
count it supports, the theoretical bubble is (p-1)/(v*m+p-1), the 1F1B timeline holds each
micro-batch's forward and backward once per rank with its sends and receives, and the plotting
scripts turn the timeline and a bench.json holding only the pipeline sections into figures.
No timing thresholds: only what the output must say, however fast the machine is."""
import json
import subprocess
import sys
from collections import Counter

import pytest

from tripod_cli import MPI_ENV, TRIPOD, mpirun_command, require_tripod

# Largest first: the timeline was the last m's, which an ascending list hid.
P, MICROBATCHES = 2, [4, 2]


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    require_tripod()
    out = tmp_path_factory.mktemp("pipeline")
    result = subprocess.run(mpirun_command(P, "bench", "pipeline", "--microbatches", ",".join(map(str, MICROBATCHES)),
                                           "--forward-ms", 2, "--repeats", 1, "--json", out / "pipeline.json",
                                           "--trace", out / "timeline.json"),
                            capture_output=True, text=True, timeout=120, env=MPI_ENV)
    assert result.returncode == 0, result.stdout + result.stderr
    return out, result.stdout, json.loads((out / "pipeline.json").read_text()), \
        json.loads((out / "timeline.json").read_text())


def test_every_schedule_is_measured_against_theory(bench):
    _, stdout, results, _ = bench
    assert results["benchmark"] == "pipeline" and results["stages"] == P
    rows = results["results"]
    # interleaved (v=2) needs m to be a multiple of p: both 2 and 4 are
    assert [(r["schedule"], r["microbatches"], r["virtual_stages"]) for r in rows] == [
        (s, m, 2 if s == "interleaved" else 1) for m in MICROBATCHES for s in ("afab", "1f1b", "interleaved")]
    for r in rows:
        v, m = r["virtual_stages"], r["microbatches"]
        assert r["stages"] == P and r["forward_ms"] == 2
        assert r["theoretical_bubble"] == pytest.approx((P - 1) / (v * m + P - 1))
        assert 0 <= r["measured_bubble"] < 1
        assert r["ratio"] == pytest.approx(r["measured_bubble"] / r["theoretical_bubble"])
        assert r["step_seconds"] > 0
    assert stdout.count("interleaved ") == len(MICROBATCHES), "only rank 0 prints the table"


def test_timeline_is_the_1f1b_step_of_the_largest_m(bench):
    _, _, results, timeline = bench
    m = max(MICROBATCHES)
    assert (timeline["schedule"], timeline["stages"], timeline["microbatches"], timeline["virtual_stages"]) == \
        ("1f1b", P, m, 1)
    assert timeline["theoretical_bubble"] == pytest.approx((P - 1) / (m + P - 1))
    (row,) = [r for r in results["results"] if (r["schedule"], r["microbatches"]) == ("1f1b", m)]
    assert timeline["measured_bubble"] == pytest.approx(row["measured_bubble"])  # --repeats 1: the same run
    assert len(timeline["ranks"]) == P
    for rank, actions in enumerate(timeline["ranks"]):
        assert all(a["end"] >= a["start"] >= 0 for a in actions)
        computes = [a for a in actions if a["action"] in ("F", "B")]
        assert len(computes) == 2 * m
        assert sorted((a["action"], a["microbatch"]) for a in computes) == \
            sorted((k, i) for k in "BF" for i in range(m))
        assert {a["chunk"] for a in computes} == {rank}  # v = 1: rank r holds stage r
        for i in range(m):  # a micro-batch's backward follows its forward
            (f,) = [a for a in computes if (a["action"], a["microbatch"]) == ("F", i)]
            (b,) = [a for a in computes if (a["action"], a["microbatch"]) == ("B", i)]
            assert b["start"] >= f["end"]
        comms = Counter(a["action"] for a in actions if a["action"] not in ("F", "B"))
        want = Counter()
        if rank > 0:
            want.update({"recv-act": m, "send-grad": m})
        if rank < P - 1:
            want.update({"send-act": m, "recv-grad": m})
        assert comms == want


def test_plots_of_the_timeline_and_of_a_pipeline_only_bench_json(bench, tmp_path):
    out, _, results, timeline = bench
    png = tmp_path / "timeline.png"
    result = subprocess.run([sys.executable, "-m", "reports.plot_pipeline", str(out / "timeline.json"),
                             "--out", str(png)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert png.read_bytes().startswith(b"\x89PNG") and png.stat().st_size > 1000
    bench_json = tmp_path / "bench.json"
    bench_json.write_text(json.dumps({"pipeline": results, "pipeline_timeline": timeline}))
    result = subprocess.run([sys.executable, "-m", "reports.plot_bench", str(bench_json), "--out",
                             str(tmp_path / "plots")], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    for name in ("bubble.png", "timeline.png"):
        assert (tmp_path / "plots" / name).read_bytes().startswith(b"\x89PNG"), name
    html = (tmp_path / "plots" / "index.html").read_text()
    assert "bubble.png" in html and "timeline.png" in html and "bubble 1f1b p=2 m=4" in html
    assert "no 'comm' results" in result.stderr  # the missing sections are skipped, not fatal


SMALL_LAYOUTS = ["--config", "tiny", "--set", "model.n_layer=2", "--seq-len", 16, "--batch", 4, "--vocab", 64,
                 "--steps", 1]


def bench_layouts(*args, json_out=None):
    """`bench layouts` of the small model on P ranks: (the completed process, its --json rows or None)."""
    require_tripod()
    result = subprocess.run(mpirun_command(P, "bench", "layouts", *SMALL_LAYOUTS, *args,
                                           *(["--json", json_out] if json_out else [])),
                            capture_output=True, text=True, timeout=120, env=MPI_ENV)
    rows = json.loads(json_out.read_text())["layouts"] if json_out and result.returncode == 0 else None
    return result, rows


def test_bench_layouts_times_pipelined_layouts(tmp_path):
    # end-to-end MFU of named layouts, pipelined ones included; a layout of the wrong size is refused
    layouts = ["tp1-pp2-dp1-z0-mb4-1f1b", "tp1-pp2-dp1-z1-mb2-afab", "tp1-pp1-dp2-z0-mb1"]
    result, records = bench_layouts("--layouts", *layouts, json_out=tmp_path / "l.json")
    assert result.returncode == 0, result.stdout + result.stderr
    assert [r["layout"] for r in records] == layouts
    assert [r["pp"] for r in records] == [2, 2, 1] and records[0]["schedule"] == "1f1b"
    assert all(0 < r["mfu"] < 1 and r["tokens_per_second"] > 0 for r in records)
    # the process's resident memory, per layout: a high-water mark at or above its base
    assert all(0 < r["resident_base_mib"] <= r["resident_peak_mib"] for r in records)
    # the accounting's transient part (in flight: pipeline messages, buckets) given apart, within it
    assert all(0 <= r["transient_mib_max_rank"] < r["accounted_mib_max_rank"] for r in records)
    assert records[0]["transient_mib_max_rank"] > 0  # the pipeline's messages
    wrong, _ = bench_layouts("--layouts", "tp1-pp4-dp1-z0-mb4-1f1b")
    assert wrong.returncode != 0 and "needs 4 ranks, launched with 2" in wrong.stderr


def test_schedule_command_prints_checks_and_draws(tmp_path):
    # `tripod schedule`: the schedule as data, the simulator's verdict, and a drawable simulated timeline
    require_tripod()
    result = subprocess.run([str(TRIPOD), "schedule", "--pp", "4", "--microbatches", "8", "--json",
                             str(tmp_path / "s.json")], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "rank 0: F0.c0 F1.c0 F2.c0 F3.c0 B0.c0 F4.c0" in result.stdout  # warm-up of p-1 forwards, then 1F1B
    assert "micro-batches in flight per rank: 4 3 2 1" in result.stdout
    assert "simulated bubble 0.2727 (theory 0.2727)" in result.stdout
    timeline = json.loads((tmp_path / "s.json").read_text())
    assert timeline["time_unit"] == "stage forwards" and timeline["measured_bubble"] == pytest.approx(3 / 11)
    drawn = subprocess.run([sys.executable, "-m", "reports.plot_pipeline", str(tmp_path / "s.json"), "--out",
                            str(tmp_path / "s.png")], capture_output=True, text=True, timeout=120)
    assert drawn.returncode == 0 and (tmp_path / "s.png").stat().st_size > 1000, drawn.stderr
    bad = subprocess.run([str(TRIPOD), "schedule", "--pp", "4", "--microbatches", "6", "--schedule", "interleaved",
                          "--virtual-stages", "2"], capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "multiple of the pipeline stages" in bad.stderr


def test_bench_layouts_times_a_layout_in_the_recomputation_its_name_gives(tmp_path):
    # --recompute's default (none) replaced a name's -rsel/-rfull, and the row kept the name: memory
    # and time without recomputation under a recomputing layout's name. train.recompute was dropped too.
    names = ["tp1-pp1-dp2-z1-mb1", "tp1-pp1-dp2-z1-mb1-rsel", "tp1-pp1-dp2-z1-mb1-rfull"]
    result, records = bench_layouts("--layouts", *names, json_out=tmp_path / "l.json")
    assert result.returncode == 0, result.stdout + result.stderr
    assert [(r["layout"], r["recompute"]) for r in records] == list(zip(names, ["none", "selective", "full"]))
    none, selective, full = (r["activation_mib_max_rank"] for r in records)
    assert full < selective < none, records
    configured, rows = bench_layouts("--zero", 1, "--set", "train.recompute=full", json_out=tmp_path / "c.json")
    assert configured.returncode == 0, configured.stdout + configured.stderr
    (row,) = rows
    assert (row["layout"], row["recompute"]) == ("dp2-z1-rfull", "full")


@pytest.mark.parametrize("args, message", [
    (["--layouts", "tp1-pp1-dp2-z1-mb1-rsel", "--recompute", "none"],
     "layout tp1-pp1-dp2-z1-mb1-rsel names its recomputation (selective): leave --recompute out"),
    # found when reached, after the other layouts' timings (lost with them)
    (["--zero", "0", "7"], "ZeRO stage (--zero) must be 0, 1, 2 or 3 (got 7)"),
    (["--layouts", "tp1-pp1-dp2-z1-mb1", "tp1-pp2-dp1-z0-mb3-1f1b"], "micro"),
])
def test_bench_layouts_refuses_a_bad_layout_before_timing_any(args, message):
    result, _ = bench_layouts(*args)
    assert result.returncode != 0 and message in result.stderr, result.stdout + result.stderr
    assert "measured sgemm" not in result.stdout and "step (s)" not in result.stdout, result.stdout


@pytest.mark.parametrize("args, message", [
    (["--pp", "2", "--microbatches", "8200"], "8200 micro-batches x 2 chunks need 32800 message tags"),
    (["--pp", "1", "--microbatches", "2", "--schedule", "interleaved", "--virtual-stages", "2"],
     "virtual stages (--virtual-stages 2) need pipeline parallelism (--pp > 1)"),
])
def test_schedule_refuses_what_train_refuses(args, message):
    # Both were "valid" here while `tripod train` refused them.
    require_tripod()
    result = subprocess.run([str(TRIPOD), "schedule", *args], capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and message in result.stderr, result.stdout + result.stderr


def test_interleaved_in_flight_counts_are_chunks():
    # 2 micro-batches on 2 stages of 4 chunks: 8 and 7 activations in flight, each a quarter of a
    # rank's layers; "micro-batches in flight: 8 7" read as more micro-batches than the step has.
    require_tripod()
    result = subprocess.run([str(TRIPOD), "schedule", "--pp", "2", "--microbatches", "2", "--schedule", "interleaved",
                             "--virtual-stages", "4"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "micro-batch chunks in flight per rank (each 1/4 of the rank's layers): 8 7" in result.stdout
