"""reports/importers: nccl-tests tables, Megatron-LM and torchtitan logs and Tripod's own metrics.jsonl
read into the "tripod-results" schema (reports/FORMATS.md section 3). Every fixture (written by hand
in its tool's format, see its first line) parses to asserted values; a malformed line fails with
"FILE:LINE: message"; columns the importer does not know are kept, never read as others."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from reports.importers import ImportFormatError, import_file
from reports.importers.common import TRAIN_FIELDS
from tripod_cli import TRIPOD, require_tripod

FIXTURES = Path(__file__).parent / "fixtures" / "importers"
# The keys of a row of `tripod bench comm` in bench.json.
BENCH_COMM_ROW_KEYS = {"collective", "size", "count", "type", "redop", "root", "in_place", "time_us", "algbw",
                       "busbw", "wrong", "group_size"}


def comm(name, **options):
    document = import_file("nccl-tests", FIXTURES / name, **options).document
    assert document["schema"] == "tripod-results" and document["version"] == 1 and document["kind"] == "comm"
    for row in document["comm"]["results"]:
        assert BENCH_COMM_ROW_KEYS <= set(row), row
    return document


def train(kind, name):
    document = import_file(kind, FIXTURES / name).document
    assert document["schema"] == "tripod-results" and document["kind"] == "train"
    for row in document["steps"]:
        assert {"step", *TRAIN_FIELDS} <= set(row), row
    return document


def by_step(document):
    return {row["step"]: row for row in document["steps"]}


def fixture_with(tmp_path, name, old, new):
    """A copy of a fixture with one line changed, and that line's number."""
    lines = (FIXTURES / name).read_text().split("\n")
    number = next(i for i, line in enumerate(lines, start=1) if old in line)
    lines[number - 1] = lines[number - 1].replace(old, new)
    path = tmp_path / name
    path.write_text("\n".join(lines))
    return path, number


def expect_error(kind, path, line, contains, **options):
    with pytest.raises(ImportFormatError) as caught:
        import_file(kind, path, **options)
    text = str(caught.value)
    assert text.startswith(f"{path}:{line}: "), text
    assert contains in text, text


def test_every_fixture_says_it_was_written_by_hand():
    fixtures = sorted(FIXTURES.iterdir())
    assert len(fixtures) >= 12
    for fixture in fixtures:
        first = fixture.read_text().split("\n", 1)[0]
        assert first.startswith("# Written by hand") and "format of" in first, fixture.name


# ----- nccl-tests ---------------------------------------------------------------------------------

def test_nccl_tests_2_19_all_reduce():
    document = comm("nccl_all_reduce_2.19.txt")
    assert document["source"] == {"tool": "nccl-tests", "file": str(FIXTURES / "nccl_all_reduce_2.19.txt"),
                                  "version": "2.19.6"}
    rows = document["comm"]["results"]
    assert len(rows) == 10  # 5 sizes, out-of-place then in-place; the NCCL WARN line between rows skipped
    assert rows[0] == {"collective": "all_reduce", "size": 1024, "count": 256, "type": "float", "redop": "sum",
                       "root": -1, "in_place": False, "time_us": 21.35, "algbw": 0.05, "busbw": 0.08, "wrong": 0,
                       "group_size": 8}
    assert rows[1]["in_place"] is True and rows[1]["time_us"] == 20.98 and rows[1]["busbw"] == 0.09
    assert [row["size"] for row in rows[::2]] == [1024, 16384, 262144, 4194304, 67108864]
    assert rows[-1]["time_us"] == 1001.8 and rows[-1]["algbw"] == 66.99 and rows[-1]["busbw"] == 117.23
    assert document["comm"]["summaries"] == [{"collective": "all_reduce", "avg_busbw": 40.4183, "out_of_bounds": 0}]


def test_nccl_tests_check_off_gives_null_wrong_and_tag_output_prefixes_are_removed():
    document = comm("nccl_alltoall_check_off_2.13.txt")
    rows = document["comm"]["results"]
    assert document["source"]["version"] is None
    assert len(rows) == 6 and {row["collective"] for row in rows} == {"alltoall"}  # from the file name
    assert all(row["wrong"] is None for row in rows)  # "N/A": no data check
    assert rows[4] == {"collective": "alltoall", "size": 16777216, "count": 1048576, "type": "float",
                       "redop": "none", "root": -1, "in_place": False, "time_us": 350.2, "algbw": 47.91,
                       "busbw": 35.93, "wrong": None, "group_size": 4}
    assert document["comm"]["summaries"] == [{"collective": "alltoall", "avg_busbw": 30.163, "out_of_bounds": 0}]


def test_nccl_tests_2019_error_column_and_root_in_place_of_redop(tmp_path):
    name = "nccl_2019_root_column.txt"
    expect_error("nccl-tests", FIXTURES / name, 11, "pass --collective")  # neither output nor file name says
    rows = comm(name, collective="broadcast")["comm"]["results"]
    assert len(rows) == 6
    big = rows[4]
    assert (big["size"], big["count"], big["root"], big["redop"]) == (67108864, 16777216, 0, None)
    assert (big["time_us"], big["algbw"], big["busbw"]) == (2301.4, 29.16, 29.16)
    # "error" is the largest deviation, not a count of wrong elements: never read as wrong.
    assert big["wrong"] is None and big["extra"] == {"max_error": 2e-07}
    assert rows[5]["extra"] == {"max_error": 0.0}
    assert rows[0]["group_size"] == 2


def test_rccl_tests_deviation_past_its_threshold_marked_with_an_asterisk():
    # rccl-tests prints "*" right after a deviation past the data check's threshold ("2e-02*"); the
    # row was refused ("column error (out-of-place): expected a number, found '2e-02*'").
    document = comm("rccl_all_reduce_2022.txt")
    rows = document["comm"]["results"]
    assert len(rows) == 10 and rows[0]["collective"] == "all_reduce" and rows[0]["group_size"] == 8
    flagged = rows[6]
    assert (flagged["size"], flagged["in_place"], flagged["time_us"], flagged["busbw"], flagged["wrong"]) == \
        (4194304, False, 190.2, 38.59, None)
    assert flagged["extra"] == {"max_error": 0.02, "max_error_over_threshold": True}
    assert rows[7]["extra"] == {"max_error": 0.0}
    assert document["comm"]["summaries"] == [{"collective": "all_reduce", "avg_busbw": 28.169, "out_of_bounds": 1}]


def test_nccl_tests_2017_milliseconds_and_footer_without_hash():
    document = comm("nccl_all_reduce_2017.txt")
    rows = document["comm"]["results"]
    assert len(rows) == 6 and rows[0]["collective"] == "all_reduce"
    assert rows[0]["time_us"] == pytest.approx(45.0) and rows[1]["time_us"] == pytest.approx(44.0)  # 0.045 ms
    assert (rows[4]["size"], rows[4]["count"], rows[4]["redop"], rows[4]["busbw"]) == (4194304, 1048576, "sum", 48.29)
    assert rows[0]["root"] is None and rows[0]["group_size"] == 8
    assert document["comm"]["summaries"] == [{"collective": "all_reduce", "avg_busbw": 45.0967, "out_of_bounds": 0}]


def test_nccl_tests_per_iteration_columns_timestamps_and_two_tests_in_one_file():
    document = comm("nccl_per_iteration_and_timestamps_2.19.txt")
    rows = document["comm"]["results"]
    assert [row["collective"] for row in rows] == ["reduce_scatter"] * 4 + ["sendrecv"] * 4
    first = rows[0]
    assert (first["size"], first["count"], first["time_us"], first["algbw"], first["busbw"], first["wrong"]) == \
        (1048576, 32768, 30.52, 34.36, 30.06, 0)
    assert first["extra"] == {"i_min": 29.8, "i_max": 33.1, "i_p99": 33.1, "i_cv%": 2.41}
    assert rows[1]["extra"]["i_cv%"] == 1.87 and rows[1]["busbw"] == 30.47
    assert rows[-1]["busbw"] == 120.01 and rows[-1]["extra"] == {"timestamp": "2025-11-03 14:02:12"}
    assert document["comm"]["summaries"] == [
        {"collective": "reduce_scatter", "avg_busbw": 47.36, "out_of_bounds": 0},
        {"collective": "sendrecv", "avg_busbw": 102.355, "out_of_bounds": 0}]


def test_nccl_tests_unknown_columns_are_kept_not_misread():
    rows = comm("nccl_hypothetical_extra_columns.txt")["comm"]["results"]
    out_of_place, in_place = rows
    # A reader going by position would take "lat" (3.10) for algbw and algbw for busbw.
    assert (out_of_place["time_us"], out_of_place["algbw"], out_of_place["busbw"]) == (40.0, 26.21, 22.94)
    assert out_of_place["extra"] == {"nodes": 2, "lat": 3.1}
    assert (in_place["algbw"], in_place["busbw"], in_place["extra"]["lat"]) == (26.55, 23.23, 3.05)


@pytest.mark.parametrize("old, new, contains", [
    ("  4194304       1048576     float     sum      -1   101.50", "  4194304       1048576     float     sum      -1",
     "expected 13 columns"),  # a row cut off mid-line
    ("41.32   72.31", "41.32   7x.31", "column busbw (out-of-place): expected a number, found '7x.31'"),
    ("     0    41.02", "   two    41.02", "column #wrong (out-of-place): expected a number"),
    ("# Out of bounds values : 0 OK", "# Out of bounds values : many", "out of bounds values: expected a number"),
    # Imported as a time of -101.5 us before.
    ("-1   101.50   41.32", "-1  -101.50   41.32", "column time (out-of-place): -101.50 is negative"),
])
def test_nccl_tests_malformed_line_names_file_and_line(tmp_path, old, new, contains):
    path, line = fixture_with(tmp_path, "nccl_all_reduce_2.19.txt", old, new)
    expect_error("nccl-tests", path, line, contains)


def test_nccl_tests_row_before_column_header_and_file_without_rows(tmp_path):
    path = tmp_path / "all_reduce.txt"
    path.write_text("# nThread 1 nGpus 1\n        1024           256     float     sum      -1    21.35\n")
    expect_error("nccl-tests", path, 2, "before any column header")
    with pytest.raises(ImportFormatError, match="no nccl-tests result rows"):
        import_file("nccl-tests", FIXTURES / "megatron_core_2025.log")


@pytest.mark.parametrize("given, collective", [("all_reduce", "all_reduce"), ("allreduce", "all_reduce"),
                                               ("All-Reduce", "all_reduce"), ("all_reduce_perf", "all_reduce"),
                                               ("bcast", "broadcast"), ("reducescatter", "reduce_scatter"),
                                               ("gather", "gather")])
def test_nccl_tests_collective_option_is_spelled_as_the_rows_name_it(given, collective):
    # "allreduce" was kept as given: the peer got a panel of its own beside Tripod's all_reduce.
    rows = comm("nccl_2019_root_column.txt", collective=given)["comm"]["results"]
    assert {row["collective"] for row in rows} == {collective}


def test_nccl_tests_unknown_collective_option_is_refused_listing_the_known_ones(tmp_path):
    # "banana" was imported as a collective of that name, exit status 0.
    result = run_module("nccl-tests", FIXTURES / "nccl_2019_root_column.txt", "--collective", "banana",
                        "--out", tmp_path / "x.json")
    assert result.returncode == 2, result.stderr
    assert "--collective banana: not a collective nccl-tests measures; one of: reduce_scatter, all_reduce, " \
           "all_gather, alltoallv, alltoall, sendrecv, broadcast, reduce" in result.stderr, result.stderr
    assert not (tmp_path / "x.json").exists()
    with pytest.raises(ValueError, match="--collective banana: not a collective"):
        import_file("nccl-tests", FIXTURES / "nccl_2019_root_column.txt", collective="banana")


# ----- Megatron-LM --------------------------------------------------------------------------------

def test_megatron_2025_with_throughput_memory_and_validation():
    document = train("megatron", "megatron_core_2025.log")
    assert document["source"]["tool"] == "megatron-lm"
    steps = by_step(document)
    assert list(steps) == [10, 20, 30, 40]
    ten = steps[10]
    assert (ten["loss"], ten["lr"], ten["grad_norm"], ten["step_seconds"], ten["tflops_per_gpu"]) == \
        (10.51234, 3e-05, 12.345, 1.8503, 212.4)
    assert ten["memory_gib"] == 40.0  # rank 2's max reserved 40960 MB, the larger of the two reports
    assert ten["mfu"] is None and ten["tokens_per_second"] is None  # Megatron prints neither
    assert ten["extra"]["load_balancing_loss"] == 1.012 and ten["extra"]["global batch size"] == 64
    assert ten["extra"]["consumed samples"] == 640 and ten["extra"]["number of nan iterations"] == 0
    # The colour-coded line parses like the others; the validation loss lands on its iteration.
    assert steps[30]["loss"] == 8.101234 and steps[30]["lr"] == 9e-05 and steps[30]["extra"]["val_loss"] == 8.012345
    assert steps[40]["step_seconds"] == 1.7864 and steps[40]["memory_gib"] is None


def test_megatron_2021_without_throughput_and_with_a_skipped_iteration():
    steps = by_step(train("megatron", "megatron_legacy_2021.log"))
    assert list(steps) == [10, 20, 30]
    assert (steps[10]["loss"], steps[10]["lr"], steps[10]["grad_norm"], steps[10]["memory_gib"]) == \
        (10.9375, 1.5e-4, 7.891, 10.0)
    assert steps[10]["tflops_per_gpu"] is None and steps[10]["extra"]["params norm"] == 254.123
    skipped = steps[20]  # loss-scale overflow: Megatron printed no loss and no grad norm
    assert skipped["loss"] is None and skipped["grad_norm"] is None and skipped["lr"] == 3e-4
    assert skipped["extra"]["number of skipped iterations"] == 1 and skipped["extra"]["loss scale"] == 32768.0
    assert steps[30]["loss"] == 8.765432 and steps[30]["step_seconds"] == 0.851


def test_megatron_deepspeed_tflops_are_per_gpu(tmp_path):
    # Megatron-DeepSpeed's "TFLOPs: X |" is per GPU (its throughput_calculator divides the
    # iteration's FLOPs by the world size); it was kept in extra and tflops_per_gpu stayed null.
    steps = by_step(train("megatron", "megatron_deepspeed_2023.log"))
    assert list(steps) == [10, 20]
    assert (steps[10]["tflops_per_gpu"], steps[20]["tflops_per_gpu"]) == (35.63, 35.94)
    assert "TFLOPs" not in steps[10]["extra"]
    # and its tokens per GPU per second (tgs) fill tokens_per_second_per_gpu (they stayed in extra)
    assert steps[10]["tokens_per_second_per_gpu"] == 3994.928
    assert "tokens per gpu per second (tgs)" not in steps[10]["extra"]
    assert (steps[10]["loss"], steps[10]["memory_gib"]) == (10.51234, 26.0)
    assert steps[10]["step_seconds"] == pytest.approx(4.1012)
    # A line that also prints Megatron-LM's own per-GPU figure keeps that one; the other stays in extra.
    path, _ = fixture_with(tmp_path, "megatron_core_2025.log", "grad norm: 4.567 |",
                           "grad norm: 4.567 | TFLOPs: 99.0 |")
    twenty = by_step(import_file("megatron", path).document)[20]
    assert twenty["tflops_per_gpu"] == 219.5 and twenty["extra"]["TFLOPs"] == 99.0


@pytest.mark.parametrize("old, new, contains", [
    ("lm loss: 9.234567E+00", "lm loss: 9.23x567E+00", "lm loss: expected a number, found '9.23x567E+00'"),
    # Cut inside its last field: "grad norm: 4.5" of 4.567 was imported as 4.5.
    ("grad norm: 4.567 | number of skipped iterations:   0 | number of nan iterations:   0 |", "grad norm: 4.5",
     "does not end with '|'"),
    ("| loss scale: 1.0 | grad norm: 1.876 | number of skipped iterations:   0 | number of nan iterations:   0 |",
     "| loss sca", "field 'loss sca' is not 'name: value'"),
    ("max reserved: 40960.0", "max reserved: lots", "max reserved: expected a number"),
])
def test_megatron_malformed_line_names_file_and_line(tmp_path, old, new, contains):
    path, line = fixture_with(tmp_path, "megatron_core_2025.log", old, new)
    expect_error("megatron", path, line, contains)


# ----- torchtitan ---------------------------------------------------------------------------------

def test_torchtitan_2025_colour_codes_two_logging_ranks_and_validation():
    document = train("torchtitan", "torchtitan_2025_colour.log")
    assert document["source"]["version"] == "0.1.0"
    steps = by_step(document)
    assert list(steps) == [1, 10, 20, 30]
    ten = steps[10]
    assert (ten["loss"], ten["grad_norm"], ten["memory_gib"], ten["tokens_per_second_per_gpu"],
            ten["tflops_per_gpu"], ten["mfu"]) == (9.8765, 3.2109, 48.91, 21734, 143.44, 0.145)
    assert ten["extra"] == {"memory_percent": 61.77}
    assert ten["lr"] is None and ten["step_seconds"] is None and ten["tokens_per_second"] is None
    assert steps[1]["memory_gib"] == 41.27  # rank 0's line; rank 1's (41.90) is ignored
    assert steps[1]["mfu"] == 0.0068
    assert steps[20]["extra"]["val_loss"] == 8.7012 and steps[20]["loss"] == 8.5432


def test_torchtitan_2024_wps_and_a_resumed_run():
    steps = by_step(train("torchtitan", "torchtitan_2024_wps_resumed.log"))
    assert list(steps) == [1, 10, 20, 30]
    assert (steps[1]["loss"], steps[1]["memory_gib"], steps[1]["tokens_per_second_per_gpu"], steps[1]["mfu"]) == \
        (10.9123, 12.34, 2345, 0.0112)
    assert steps[1]["grad_norm"] is None and steps[1]["tflops_per_gpu"] is None
    # Step 20 was printed before the crash and again after the resume: the resumed run's line counts.
    assert (steps[20]["loss"], steps[20]["tokens_per_second_per_gpu"]) == (7.9988, 21402)


@pytest.mark.parametrize("old, new, contains", [
    ("memory: 14.05GiB(17.75%)  wps: 21,345  mfu: 10.19%", "memory: 14.0", "memory: expected like"),
    ("step: 10  loss:  9.1234", "step: ten  loss:  9.1234", "step: expected a number, found 'ten'"),
    ("loss:  7.5544", "loss:  7.55.44", "loss: expected a number"),
    ("mfu: 10.22%", "mfu: high", "mfu (percent): expected a number"),
])
def test_torchtitan_malformed_line_names_file_and_line(tmp_path, old, new, contains):
    path, line = fixture_with(tmp_path, "torchtitan_2024_wps_resumed.log", old, new)
    expect_error("torchtitan", path, line, contains)


# ----- Tripod's metrics.jsonl ---------------------------------------------------------------------

def test_tripod_metrics_steps_count_from_one_with_per_gpu_rates():
    document = train("tripod-metrics", "tripod_metrics_4ranks.jsonl")
    assert document["source"]["tool"] == "tripod"
    steps = by_step(document)
    assert list(steps) == [1, 2, 3, 4, 5]  # Tripod's steps 0..4
    one = steps[1]
    assert (one["loss"], one["lr"], one["grad_norm"], one["step_seconds"], one["tokens_per_second"], one["mfu"]) == \
        (8.3125, 0.0001, 2.5, 0.0512, 80000.0, 0.0144)
    assert one["tokens_per_second_per_gpu"] == 20000.0  # 4 ranks
    assert one["tflops_per_gpu"] == pytest.approx(0.0144)  # 7.2e5 FLOPs/token x 80000 tokens/s / 4 / 1e12
    assert one["memory_gib"] is None and one["extra"] == {"tokens": 4096}
    assert steps[5]["extra"]["val_loss"] == 7.125 and steps[5]["lr"] == 0.00025


def test_tripod_metrics_after_a_rollback_keep_the_retrained_steps():
    steps = by_step(train("tripod-metrics", "tripod_metrics_rollback.jsonl"))
    assert list(steps) == [1, 2, 3, 4, 5, 6]
    assert [steps[k]["loss"] for k in range(1, 7)] == [4.0, 3.75, 3.5, 3.2, 2.9, 2.6]  # not the 9.5 spike
    assert steps[1]["tflops_per_gpu"] == pytest.approx(0.0512)


def test_tripod_metrics_of_a_run_with_a_skipped_step_import(tmp_path):
    # A real run whose step 2 is skipped as an anomaly: its record's "anomaly" text and "update" were
    # refused ("expected a number"), so no run with an anomaly could be imported.
    require_tripod()
    from tripod_cli import make_markov_corpus
    corpus, metrics = make_markov_corpus(tmp_path / "markov"), tmp_path / "m.jsonl"
    run = subprocess.run([str(TRIPOD), "train", "--config", "tiny", "--set", f"data.dir={corpus}", "--set",
                          "train.steps=3", "--set", "anomaly.policy=skip", "--set", f"train.metrics={metrics}"],
                         capture_output=True, text=True, timeout=120, env={**os.environ, "TRIPOD_FAULT": "nan-loss:2"})
    assert run.returncode == 0, run.stderr
    steps = by_step(import_file("tripod-metrics", metrics).document)
    assert list(steps) == [1, 2, 3]
    assert steps[2]["extra"]["update"] == "skipped" and "NaN" in steps[2]["extra"]["anomaly"].replace("nan", "NaN")
    assert "update" not in steps[3]["extra"]


def test_tripod_metrics_of_a_gpu_run_keep_its_readings(tmp_path):
    # A GPU run's step records carry {"gpu": {...}} (NVML); an object was "expected a number".
    gpu = '"gpu":{"temperature_c":41,"power_w":312.5,"sm_clock_mhz":1980,"memory_used_mib":20480},'
    path, line = fixture_with(tmp_path, "tripod_metrics_4ranks.jsonl", '"loss":7.5,', '"loss":7.5,' + gpu)
    row = next(r for r in import_file("tripod-metrics", path).document["steps"] if r["loss"] == 7.5)
    assert row["memory_gib"] == 20.0
    assert row["extra"]["gpu.temperature_c"] == 41 and row["extra"]["gpu.power_w"] == 312.5
    path, line = fixture_with(tmp_path, "tripod_metrics_4ranks.jsonl", '"loss":7.5,', '"loss":7.5,"gpu":[1],')
    expect_error("tripod-metrics", path, line, "gpu: expected an object of numbers")


@pytest.mark.parametrize("old, new, contains", [
    ('"loss":7.5,', '"loss":"7.5",', "loss: expected a number, found '7.5'"),
    ('"loss":7.5,', '"loss":7.5,"tokens_seen":[1],', "tokens_seen: expected a number, found [1]"),
    ('{"grad_norm":0.875', '{"grad_norm":0.8', "not a JSON object"),  # made unterminated below
    ('"step":1,', '"step":1.5,', "without a whole step number"),
])
def test_tripod_metrics_malformed_line_names_file_and_line(tmp_path, old, new, contains):
    path, line = fixture_with(tmp_path, "tripod_metrics_4ranks.jsonl", old, new)
    if "not a JSON" in contains:  # a line cut off inside the file (a cut-off last line is left out)
        lines = path.read_text().split("\n")
        lines[line - 1] = lines[line - 1][:40]
        path.write_text("\n".join(lines))
    expect_error("tripod-metrics", path, line, contains)


@pytest.mark.parametrize("kind, name, cut_at, steps", [
    # "elapsed time per iteration (ms): 17" of 1786.4: step_seconds 0.017, exit status 0.
    ("megatron", "megatron_core_2025.log", "elapsed time per iteration (ms): 1786.4", [10, 20, 30]),
    # "tps: 22,1" of 22,134: imported as 221.
    ("torchtitan", "torchtitan_2024_wps_resumed.log", "wps: 21,402", [1, 10, 20]),
    ("tripod-metrics", "tripod_metrics_4ranks.jsonl", '"val_loss":7.125', [1, 2, 3, 4]),
    ("nccl-tests", "nccl_all_reduce_2.19.txt", "  4194304       1048576     float     sum      -1   101.50", None),
])
def test_a_cut_off_last_line_is_left_out_with_a_warning(tmp_path, capsys, kind, name, cut_at, steps):
    """A log still being written (or a truncated copy) ends inside a line with no newline after it."""
    lines = (FIXTURES / name).read_text().split("\n")
    number = next(i for i, line in enumerate(lines, start=1) if cut_at in line)
    cut = lines[number - 1]
    cut = cut[:cut.index(cut_at) + len(cut_at) - 2]
    path = tmp_path / name
    path.write_text("\n".join(lines[:number - 1] + [cut]))
    document = import_file(kind, path).document
    assert f"{path}:{number}: cut off: no newline at its end; left out" in capsys.readouterr().err
    if steps is not None:
        assert [row["step"] for row in document["steps"]] == steps
    else:
        assert 4194304 not in [row["size"] for row in document["comm"]["results"]]
    capsys.readouterr()
    import_file(kind, FIXTURES / name)  # a whole file ends with a newline: no warning
    assert capsys.readouterr().err == ""


def ending_without_newline(tmp_path, name, last, end=None):
    """A copy of a fixture that ends with its first line holding LAST, cut right after END in it if
    given, and no newline after it; and that line's number."""
    lines = (FIXTURES / name).read_text().split("\n")
    number = next(i for i, line in enumerate(lines, start=1) if last in line)
    if end is not None:
        lines[number - 1] = lines[number - 1][:lines[number - 1].index(end) + len(end)]
    path = tmp_path / name
    path.write_text("\n".join(lines[:number]))
    return path, number


@pytest.mark.parametrize("kind, name, last, kept", [
    ("tripod-metrics", "tripod_metrics_4ranks.jsonl", '"val_loss":7.125', lambda doc: doc["steps"][-1]["step"] == 5),
    ("megatron", "megatron_core_2025.log", "iteration       40/", lambda doc: doc["steps"][-1]["step"] == 40),
    ("megatron", "megatron_deepspeed_2023.log", "iteration       20/", lambda doc: doc["steps"][-1]["step"] == 20),
    ("megatron", "megatron_core_2025.log", "validation loss at iteration 30",
     lambda doc: doc["steps"][-1]["extra"]["val_loss"] == 8.012345),
    ("torchtitan", "torchtitan_2024_wps_resumed.log", "step: 30", lambda doc: doc["steps"][-1]["step"] == 30),
    ("nccl-tests", "nccl_all_reduce_2.19.txt", "# Collective test concluded",
     lambda doc: len(doc["comm"]["results"]) == 10),
    ("nccl-tests", "nccl_all_reduce_2.19.txt", "# Avg bus bandwidth",
     lambda doc: doc["comm"]["summaries"][0]["avg_busbw"] == 40.4183),
    ("nccl-tests", "nccl_all_reduce_2.19.txt", "    67108864",
     lambda doc: doc["comm"]["results"][-1]["time_us"] == 1001.8),
    ("nccl-tests", "nccl_alltoall_check_off_2.13.txt", "    16777216", lambda doc: len(doc["comm"]["results"]) == 6),
    ("nccl-tests", "nccl_all_reduce_2017.txt", "     4194304", lambda doc: len(doc["comm"]["results"]) == 6),
])
def test_a_whole_last_line_without_a_newline_is_kept(tmp_path, capsys, kind, name, last, kept):
    # A complete file whose last line only lacks its newline (an edited copy) lost that line, with a
    # "cut off" warning: Megatron's last step, nccl-tests' average bus bandwidth.
    path, _ = ending_without_newline(tmp_path, name, last)
    assert kept(import_file(kind, path).document)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("kind, name, last, end, dropped", [
    # Cut right after a "|": the fields after it (grad norm, ...) would have been null.
    ("megatron", "megatron_core_2025.log", "iteration       40/", "loss scale: 1.0 |",
     lambda doc: doc["steps"][-1]["step"] == 30),
    ("megatron", "megatron_core_2025.log", "[Rank 2] (after 10", "max reserved: 4096",
     lambda doc: doc["steps"][0]["memory_gib"] == 38.0),
    ("torchtitan", "torchtitan_2025_colour.log", "step: 30", "mfu: 14.8", lambda doc: doc["steps"][-1]["step"] == 20),
    ("nccl-tests", "nccl_all_reduce_2.19.txt", "# Avg bus bandwidth", ": 40.41",
     lambda doc: doc["comm"]["summaries"][0]["avg_busbw"] is None),
    # Every column is there, the last one cut (as "2e-0" of "2e-07", which reads as 2).
    ("nccl-tests", "nccl_2019_root_column.txt", "    67108864", "29.18  0e+0",
     lambda doc: len(doc["comm"]["results"]) == 4),
    ("nccl-tests", "nccl_per_iteration_and_timestamps_2.19.txt", "2025-11-03 14:02:12", "14:02:1",
     lambda doc: len(doc["comm"]["results"]) == 6),
    # Cut after the out-of-place half's check: it read as an out-of-place-only row, the in-place lost.
    ("nccl-tests", "nccl_all_reduce_2.19.txt", "    67108864", "117.07       0",
     lambda doc: len(doc["comm"]["results"]) == 8),  # the 4 whole sizes, out of and in place
    # Cut after the nan count, a field Megatron-LM ends with, before the TFLOPs this log's lines end with.
    ("megatron", "megatron_deepspeed_2023.log", "iteration       20/", "number of nan iterations:   0 |",
     lambda doc: doc["steps"][-1]["step"] == 10),
])
def test_a_last_line_that_may_be_cut_off_is_left_out(tmp_path, capsys, kind, name, last, end, dropped):
    path, number = ending_without_newline(tmp_path, name, last, end)
    options = {"collective": "broadcast"} if "2019" in name else {}
    assert dropped(import_file(kind, path, **options).document)
    assert f"{path}:{number}: cut off: no newline at its end; left out" in capsys.readouterr().err


@pytest.mark.parametrize("kind, other_tools_file, contains", [
    ("megatron", "torchtitan_2025_colour.log", "no Megatron-LM training lines found"),
    ("torchtitan", "megatron_core_2025.log", "no torchtitan step lines found"),
    ("tripod-metrics", "tripod_metrics_4ranks.jsonl", None),
])
def test_a_file_of_another_tool_is_an_error_not_an_empty_result(kind, other_tools_file, contains):
    if contains is None:  # and Tripod's importer refuses a text log at its first line
        expect_error(kind, FIXTURES / "megatron_legacy_2021.log", 2, "not a JSON object")
        return
    with pytest.raises(ImportFormatError, match=contains):
        import_file(kind, FIXTURES / other_tools_file)


# ----- the command lines --------------------------------------------------------------------------

def run_module(*args):
    return subprocess.run([sys.executable, "-m", "reports.importers", *map(str, args)], capture_output=True,
                          text=True, timeout=60, cwd=Path(__file__).resolve().parents[2])


def test_module_command_writes_the_document_and_a_summary(tmp_path):
    out = tmp_path / "titan.json"
    result = run_module("torchtitan", FIXTURES / "torchtitan_2025_colour.log", "--out", out)
    assert result.returncode == 0, result.stderr
    assert "4 steps imported" in result.stdout and "lines skipped" in result.stdout
    assert "2 step lines of other ranks ignored" in result.stdout
    assert json.loads(out.read_text())["steps"][1]["memory_gib"] == 48.91


def test_module_command_exits_1_with_file_and_line(tmp_path):
    path, line = fixture_with(tmp_path, "megatron_legacy_2021.log", "lm loss: 8.765432E+00", "lm loss: ?")
    result = run_module("megatron", path, "--out", tmp_path / "x.json")
    assert result.returncode == 1
    assert result.stderr.strip() == f"{path}:{line}: lm loss: expected a number, found '?'"
    assert not (tmp_path / "x.json").exists()


@pytest.mark.parametrize("spelling", ["same", "dot", "link"])
def test_module_command_refuses_to_write_over_the_file_it_imports(tmp_path, spelling):
    # `--out same.log` replaced the user's only copy of the log with the JSON document.
    log = tmp_path / "train.log"
    log.write_bytes((FIXTURES / "megatron_legacy_2021.log").read_bytes())
    out = {"same": log, "dot": tmp_path / "." / "train.log", "link": tmp_path / "link.log"}[spelling]
    if spelling == "link":
        out.symlink_to(log)
    result = run_module("megatron", log, "--out", out)
    assert result.returncode == 2, result.stderr
    assert f"--out {out} is {log}, the file to import" in result.stderr, result.stderr
    assert log.read_bytes() == (FIXTURES / "megatron_legacy_2021.log").read_bytes()


def test_tripod_import_command(tmp_path):
    require_tripod()
    out = tmp_path / "comm.json"
    good = subprocess.run([str(TRIPOD), "import", "nccl-tests", str(FIXTURES / "nccl_2019_root_column.txt"),
                           "--collective", "broadcast", "--out", str(out)], capture_output=True, text=True,
                          timeout=60)
    assert good.returncode == 0, good.stderr
    assert "6 rows imported" in good.stdout
    assert json.loads(out.read_text())["comm"]["results"][4]["extra"]["max_error"] == 2e-07

    path, line = fixture_with(tmp_path, "nccl_all_reduce_2.19.txt", "41.32   72.31", "41.32   7x.31")
    bad = subprocess.run([str(TRIPOD), "import", "nccl-tests", str(path), "--out", str(tmp_path / "bad.json")],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1, bad.stderr
    assert f"{path}:{line}: column busbw (out-of-place): expected a number" in bad.stderr
    assert "tripod: error: import nccl-tests" in bad.stderr

    # An interpreter that exits 0 without importing: the earlier file stayed and the import looked done.
    stale = subprocess.run([str(TRIPOD), "import", "nccl-tests", str(FIXTURES / "nccl_2019_root_column.txt"),
                            "--collective", "broadcast", "--out", str(out), "--python", "/bin/true"],
                           capture_output=True, text=True, timeout=60)
    assert stale.returncode == 1, stale.stderr
    assert f"/bin/true exited 0 without writing {out}" in stale.stderr, stale.stderr


def test_whole_numbers_are_read_exactly_not_through_a_float():
    # A 20-digit size came out as 99999999999999991433150857216 (read through a float).
    from reports.importers.common import parse_int
    assert parse_int("99999999999999999999", "f.txt", 3, "size") == 99999999999999999999
    assert parse_int("1,024", "f.txt", 3, "size") == 1024 and parse_int("1e3", "f.txt", 3, "size") == 1000
    with pytest.raises(Exception, match="size: expected a whole number, found '1.5'"):
        parse_int("1.5", "f.txt", 3, "size")
