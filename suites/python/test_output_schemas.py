"""The JSON outputs of the `tripod` CLI against their schemas (reports/schemas/*.schema.json, JSON
Schema draft 2020-12): each test produces one output for real, with the smallest arguments that
still write every kind of record, and validates it. The schemas close their fixed objects
(additionalProperties: false), so a field added, renamed or retyped without updating its schema
fails here. Also: every schema is a valid schema, and every schema is used by a test of this file
(or, for the suite's bench.json, of test_bench_suite.py, which already runs the suite).

Needs python3-jsonschema (ci/setup.sh installs it). ~15 s on 2 cores."""
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tripod_cli import BINARY_DIR, MPI_ENV, TRIPOD, fixture_library, make_markov_corpus, mpirun_command, require_tripod

try:
    import jsonschema
except ImportError:  # a declared dependency: missing under CTest is a failure, by hand a skip
    if BINARY_DIR:
        raise ImportError("python3-jsonschema is missing: run ci/setup.sh (or apt-get install python3-jsonschema)")
    pytest.skip("python3-jsonschema not installed", allow_module_level=True)

SOURCE = Path(os.environ.get("TRIPOD_SOURCE_DIR") or Path(__file__).resolve().parents[2])
SCHEMAS = SOURCE / "reports" / "schemas"
Validator = jsonschema.Draft202012Validator
# The model every training-like test uses: one small layer, 16-token contexts.
MODEL = ["--set", "model.n_layer=1", "--set", "model.d_model=32", "--set", "model.n_head=2", "--set", "model.d_ff=64",
         "--set", "model.context=16", "--set", "train.seq_len=16", "--set", "train.batch_size=4"]


def schema(name):
    return json.loads((SCHEMAS / f"{name}.schema.json").read_text())


def explain(error):
    """A violation in words; for a record that fits no kind of a oneOf, what is wrong with the kind
    it comes closest to (fewest violations), not the whole record."""
    where = "/".join(map(str, error.absolute_path)) or "(top)"
    if error.validator != "oneOf" or not error.context:
        return f"at {where}: {error.message}"
    by_kind = {}
    for e in error.context:
        by_kind.setdefault(e.relative_schema_path[0], []).append(e)
    kind, closest = min(by_kind.items(), key=lambda item: len(item[1]))
    ref = error.validator_value[kind].get("$ref", f"branch {kind}")
    return f"at {where}: fits no kind; as {ref}: " + "; ".join(
        f"{'/'.join(map(str, e.relative_path)) or '(top)'}: {e.message}" for e in closest)


def validate_with(name, document):
    """Every violation of schema NAME by DOCUMENT, in one assertion message."""
    # "$ref": "build.schema.json" resolves beside the schema's own file, as for any script that
    # loads the schemas from reports/schemas/.
    resolver = jsonschema.RefResolver(base_uri=(SCHEMAS / f"{name}.schema.json").as_uri(), referrer=schema(name))
    errors = sorted(Validator(schema(name), resolver=resolver).iter_errors(document),
                    key=lambda e: list(e.absolute_path))
    assert not errors, f"{name}.schema.json: " + "\n".join(explain(e) for e in errors[:10])


def validate_lines_with(name, path):
    """A JSONL file: every line against schema NAME; returns the records."""
    records = [json.loads(line) for line in Path(path).read_text().splitlines()]
    assert records, f"{path} is empty"
    for i, record in enumerate(records):
        try:
            validate_with(name, record)
        except AssertionError as e:
            raise AssertionError(f"{path} line {i + 1}: {e}") from None
    return records


def run(args, timeout=120, env=None):
    require_tripod()
    result = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout,
                            env={**MPI_ENV, **(env or {})})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def tripod(*args, **kw):
    return run([TRIPOD, *args], **kw)


def mpirun(ranks, *args, **kw):
    require_tripod()
    return run(mpirun_command(ranks, *args, timeout=100), **kw)


def load(path):
    text = Path(path).read_text()
    return json.loads(text)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return make_markov_corpus(tmp_path_factory.mktemp("corpus") / "data", tokens=20000)


# ------------------------------------------------------------------------------------ the schemas

def test_every_schema_is_a_valid_draft_2020_12_schema():
    files = sorted(SCHEMAS.glob("*.schema.json"))
    assert files, f"no schemas in {SCHEMAS}"
    for f in files:
        s = json.loads(f.read_text())
        assert s.get("$schema") == "https://json-schema.org/draft/2020-12/schema", f.name
        Validator.check_schema(s)
        assert s.get("title") and s.get("description"), f"{f.name}: say what it describes (title, description)"


def test_every_schema_is_used_by_a_test_here():
    names = {f.name[:-len(".schema.json")] for f in SCHEMAS.glob("*.schema.json")}
    # The suite's bench.json is validated where the suite already runs (test_bench_suite.py).
    sources = Path(__file__).read_text() + (Path(__file__).parent / "test_bench_suite.py").read_text()
    used = set(re.findall(r'validate(?:_lines)?_with\("([\w-]+)"', sources))
    assert names - used == set(), f"schemas no test validates an output against: {sorted(names - used)}"
    assert used - names == set(), f"tests name schemas that do not exist: {sorted(used - names)}"


def test_a_field_the_schema_does_not_name_fails(tmp_path):
    """The point of additionalProperties: false: an undocumented field is caught (here in a real
    schedule timeline and one of its actions)."""
    tripod("schedule", "--pp", 2, "--microbatches", 2, "--json", tmp_path / "s.json")
    timeline = load(tmp_path / "s.json")
    validate_with("schedule", timeline)
    for where in (timeline, timeline["ranks"][0][0]):
        where["undocumented"] = 1
        with pytest.raises(AssertionError, match="undocumented"):
            validate_with("schedule", timeline)
        del where["undocumented"]


# ------------------------------------------------------------------------------------ the outputs

def test_conform_json(tmp_path):
    # 2 ranks: an operator check (TP 2) and two layouts with both heads; then the --reshard row.
    out = tmp_path / "conform.json"
    mpirun(2, "conform", "--steps", 2, "--layouts", "tp2-pp1-dp1-z0-mb1", "tp1-pp2-dp1-z1-mb4-1f1b", "--reshard",
           "--json", out)
    report = load(out)
    validate_with("conform", report)
    assert [r["layout"] for r in report["operator_checks"]] == ["op:vocab-parallel-loss-tp2"]
    assert {r["head"] for r in report["layouts"]} == {"tied", "untied"}
    assert any(r["layout"].startswith("ckpt:") for r in report["layouts"]) and report["running"] is None


def test_bench_comm_json(tmp_path):
    # Every collective, checked, and one size with -c 0 (wrong: null).
    out, unchecked = tmp_path / "comm.json", tmp_path / "unchecked.json"
    mpirun(2, "bench", "comm", "all", "-b", 8, "-e", 64, "-f", 8, "-n", 2, "-w", 0, "-J", out)
    mpirun(2, "bench", "comm", "broadcast", "-b", 64, "-e", 64, "-n", 1, "-c", 0, "-r", "all", "-J", unchecked)
    comm = load(out)
    validate_with("bench-comm", comm)
    assert {r["collective"] for r in comm["results"]} == {s["collective"] for s in comm["summaries"]}
    assert len(comm["summaries"]) == 7
    rows = load(unchecked)
    validate_with("bench-comm", rows)
    assert {r["wrong"] for r in rows["results"]} == {None} and {r["root"] for r in rows["results"]} == {0, 1}


def test_schedule_json(tmp_path):
    out = tmp_path / "s.json"
    tripod("schedule", "--pp", 2, "--microbatches", 4, "--schedule", "interleaved", "--virtual-stages", 2,
           "--json", out)
    timeline = load(out)
    validate_with("schedule", timeline)
    assert timeline["time_unit"] == "stage forwards" and len(timeline["ranks"]) == 2


def test_check_backend_json(tmp_path):
    out = tmp_path / "kernels.json"
    tripod("check-backend", "--only", "fill", "matmul", "--json", out)
    checked = load(out)
    validate_with("check-backend", checked)
    assert {r["dtype"] for r in checked["results"]} >= {"fp64", "fp32"}
    # backends named as in every JSON output: the option's value, and the description beside it
    assert (checked["backend"], checked["reference"]) == ("emulated", "cpu")
    assert checked["backend_name"].startswith("emulated (") and checked["reference_name"].startswith("cpu (")


def test_train_metrics_every_record_kind(tmp_path, corpus):
    """2 ranks with a rollback (start, steps, an anomalous step, rollback, ranks), then one process
    whose diverging run skips a step with a NaN gradient norm (written as null)."""
    base = ["train", "--config", "tiny", "--set", f"data.dir={corpus}", *MODEL, "--set", "train.dtype=fp64",
            "--set", "train.eval_batches=1", "--set", "optim.warmup_steps=1"]
    mpirun(2, *base, "--dp", 2, "--set", "train.steps=6", "--set", "train.save_every=2",
           "--set", "anomaly.policy=rollback", "--set", "train.rank_stats_every=2", "--save", tmp_path / "ck",
           "--set", f"train.metrics={tmp_path / 'rollback.jsonl'}", env={"TRIPOD_FAULT": "nan-loss:3"})
    records = validate_lines_with("metrics-record", tmp_path / "rollback.jsonl")
    assert {r.get("event") for r in records} == {None, "start", "ranks", "rollback"}
    assert any(r.get("update") == "rolled back" for r in records) and "val_loss" in records[-2]
    tripod(*base, "--set", "train.steps=4", "--set", "anomaly.policy=skip", "--set", "optim.lr=1e30",
           "--set", "optim.min_lr=1e30", "--set", "optim.warmup_steps=0", "--set", "optim.grad_clip=0",
           "--set", f"train.metrics={tmp_path / 'skip.jsonl'}")
    records = validate_lines_with("metrics-record", tmp_path / "skip.jsonl")
    skipped = [r for r in records if r.get("update") == "skipped"]
    assert skipped and any(r["grad_norm"] is None or r["loss"] is None for r in skipped)


def test_a_results_file_names_the_build_that_wrote_it(tmp_path, corpus):
    """The metrics' start record (as conform, bench comm and bench layouts) carries `build`: the same
    commit as `tripod --version` (results files could not say which build made their figures)."""
    tripod("train", "--config", "tiny", "--set", f"data.dir={corpus}", *MODEL, "--set", "train.steps=1",
           "--set", f"train.metrics={tmp_path / 'm.jsonl'}")
    start = json.loads((tmp_path / "m.jsonl").read_text().splitlines()[0])
    validate_with("build", start["build"])
    version = tripod("--version").stdout.splitlines()[0]
    state = "+modified" if start["build"]["commit_state"] == "modified" else ""
    assert f"tripod {start['build']['version']} (commit {start['build']['commit']}{state};" in version, version


def test_launch_events(tmp_path):
    events = tmp_path / "launch.jsonl"
    failing = "echo 'step 3/10 | loss 1.0'; echo 'tripod: error: planted' >&2; exit 3"
    require_tripod()
    result = subprocess.run([str(TRIPOD), "launch", "--max-restarts", "1", "--restart-delay", "0", "--events",
                             str(events), "--", "sh", "-c", failing], capture_output=True, text=True, timeout=60)
    assert result.returncode == 3, result.stderr
    tripod("launch", "--events", events, "--", "true")
    records = validate_lines_with("launch-events", events)
    assert [r["event"] for r in records] == ["start", "failure", "restart", "failure", "finish", "start", "finish"]
    assert records[1]["last_step"] == 3 and records[1]["signal"] is None


def test_bench_gemm_and_kernels_json(tmp_path):
    out = tmp_path / "micro.json"
    quick = ["-c", "tiny", "--quick", "--json", out, "--benchmark_min_time=0.01"]
    tripod("bench", "gemm", *quick, "--benchmark_filter=sgemm/square/256|dgemm/square|attn_proj.fwd")
    validate_with("bench-gemm", load(out))
    tripod("bench", "kernels", *quick, "--stream-mib", 1, "--benchmark_filter=stream|layernorm_fwd|attention_fwd")
    micro = load(out)
    validate_with("bench-gemm", micro)
    assert micro["gemm"]["sgemm"] and micro["gemm"]["dgemm"] and micro["gemm"]["layer_gemms"]
    assert micro["kernels"]["kernels"] and "triad_gbps" in micro["kernels"]["stream"]


def test_bench_overlap_json(tmp_path):
    out = tmp_path / "overlap.json"
    mpirun(2, "bench", "overlap", "--config", "tiny", "--set", "model.n_layer=1", "--batch", 1, "--seq-len", 8,
           "--vocab", 64, "--bucket-mb", 0.05, "--repeats", 1, "--progress-us", 100, "--json", out)
    overlap = load(out)
    validate_with("bench-overlap", overlap)
    assert "bucketed_progress" in overlap["seconds"]


def test_bench_layouts_json(tmp_path):
    out = tmp_path / "layouts.json"
    mpirun(2, "bench", "layouts", "--config", "tiny", "--set", "model.n_layer=2", "--batch", 1, "--seq-len", 8,
           "--vocab", 64, "--steps", 1, "--layouts", "tp1-pp2-dp1-z0-mb2-1f1b", "tp1-pp1-dp2-z1-mb1",
           "--recompute", "none", "selective", "--rounds", 2, "--json", out)
    layouts = load(out)
    validate_with("bench-layouts", layouts)
    assert len(layouts["layouts"]) == 4 and layouts["rounds"] == 2
    for row in layouts["layouts"]:  # the median of two rounds
        assert len(row["round_step_seconds"]) == 2
        assert row["step_seconds"] == pytest.approx(sum(row["round_step_seconds"]) / 2)


def test_bench_pipeline_json_and_trace(tmp_path):
    out, trace = tmp_path / "pipeline.json", tmp_path / "trace.json"
    mpirun(2, "bench", "pipeline", "--microbatches", 2, "--forward-ms", 1, "--repeats", 1, "--json", out,
           "--trace", trace)
    pipeline = load(out)
    validate_with("bench-pipeline", pipeline)
    assert [r["schedule"] for r in pipeline["results"]] == ["afab", "1f1b", "interleaved"]
    validate_with("schedule", load(trace))  # the measured timeline: the same format, in seconds


def test_bench_ckpt_json(tmp_path):
    out = tmp_path / "ckpt.json"
    (tmp_path / "disk").mkdir()
    tripod("bench", "ckpt", "--config", "tiny", "--set", "model.n_layer=1", "--batch", 1, "--seq-len", 8,
           "--repeats", 1, "--dir", tmp_path / "disk", "--json", out)
    validate_with("bench-ckpt", load(out))
    assert load(out)["backend"] == "cpu" and load(out)["backend_name"].startswith("cpu (")


def test_scaling_fit_json(tmp_path):
    """A synthetic IsoFLOP sweep with training curves (every approach fits) and one excluded run."""
    sys.path.insert(0, str(SOURCE))
    from scaling.laws import CHINCHILLA
    from scaling.synthetic_runs import synthetic_records, write_jsonl
    records = synthetic_records(CHINCHILLA, noise=0.01, seed=1, curve_points=5)
    records.append({"name": "diverged", "N": 1e6, "D": 1e8, "C": 6e14, "loss": math.nan})
    write_jsonl(records, tmp_path / "runs.jsonl")
    out = tmp_path / "fit.json"
    run([sys.executable, "-m", "scaling.fit", tmp_path / "runs.jsonl", "--json", out, "--bootstrap", 3, "--small-grid"],
        env={"PYTHONPATH": str(SOURCE)})
    fit = load(out)
    validate_with("scaling-fit", fit)
    assert fit["excluded"][0]["name"] == "diverged" and fit["approach1"]["a"]["value"] is not None


def test_golden_check_json(tmp_path, corpus):
    tripod("golden", "--config", "tiny", "--set", f"data.dir={corpus}", *MODEL, "--steps", 2, "--out", tmp_path / "bundle")
    (tmp_path / "peer").mkdir()
    tripod("golden", "run", tmp_path / "bundle", "--precision", "fp32", "--out", tmp_path / "peer" / "results.json")
    out = tmp_path / "verdict.json"
    tripod("golden", "check", tmp_path / "bundle", tmp_path / "peer" / "results.json", "--json", out,
           env={"PYTHONPATH": str(SOURCE)})
    verdict = load(out)
    validate_with("golden-check", verdict)
    assert verdict["verdict"] == "match" and verdict["tensors"]


def test_bench_train_json(tmp_path):
    """The plain trainer, then a padded vocabulary (the distributed trainer on a group of one) under
    bf16-mixed; each well under a second on the tiny preset."""
    small = ["-c", "tiny", "--batch", 1, "--seq-len", 8, "--steps", 1, "--gemm-size", 64]
    tripod("bench", "train", *small, "--set", "model.vocab_size=64", "--json", tmp_path / "plain.json")
    plain = load(tmp_path / "plain.json")
    validate_with("bench-train", plain)
    assert plain["padded_vocab"] == 64 and plain["dtype"] == "fp32" and plain["mfu"] is not None
    # the BLAS and its kernel set, which halve or double the figures, as --version names them
    version = subprocess.run([str(TRIPOD), "--version"], capture_output=True, text=True, timeout=30).stdout
    assert plain["blas"].startswith("OpenBLAS ") and f"cpu, emulated: {plain['blas']}" in version, (plain["blas"], version)
    tripod("bench", "train", *small, "--set", "model.vocab_size=60", "--set", "train.dtype=bf16-mixed",
           "--make-vocab-size-divisible-by", 16, "--json", tmp_path / "padded.json")
    padded = load(tmp_path / "padded.json")
    validate_with("bench-train", padded)
    assert (padded["vocab_multiple"], padded["padded_vocab"], padded["dtype"]) == (16, 64, "bf16-mixed")
    assert plain["attention_declined"] is None and padded["attention_declined"] is None
    assert plain["library_declined"] is None and padded["library_declined"] is None  # the CPU declines nothing
    # flash attention asked of the emulated device at a head size its kernels lack (tiny's 128 over 16
    # heads: 8): the GEMM attention runs, and the results and the output say so
    flash = tripod("bench", "train", *small, "--backend", "emulated", "--set", "model.vocab_size=64", "--set",
                   "train.dtype=bf16-mixed", "--set", "model.n_head=16", "--json", tmp_path / "flash.json",
                   env={"TRIPOD_CUDA_ATTENTION": "flash-mma"})
    declined = load(tmp_path / "flash.json")
    validate_with("bench-train", declined)
    assert "flash-mma does not take head size 8" in declined["attention_declined"], declined["attention_declined"]
    assert "note: TRIPOD_CUDA_ATTENTION=flash-mma does not take head size 8" in flash.stdout, flash.stdout


def test_bench_health_json(tmp_path):
    """Only where NVML loads (a GPU node); elsewhere the command exits 1 and writes no file, which is
    checked before the skip."""
    require_tripod()
    out = tmp_path / "health.json"
    result = subprocess.run([str(TRIPOD), "bench", "health", "--samples", "2", "--interval-ms", "10", "--json", str(out)],
                            capture_output=True, text=True, timeout=60)
    if result.returncode != 0 and "NVML" in result.stderr:  # not loaded, or it sees no GPU
        assert result.returncode == 1 and not out.exists(), result.stderr
        pytest.skip("no NVML here: bench health writes no JSON without a GPU")
    assert result.returncode == 0, result.stderr
    health = load(out)
    validate_with("bench-health", health)
    assert len(health["readings"]) == 2 * health["gpus"]


def stand_in_nvml(tmp_path):
    return fixture_library("fake_nvml", tmp_path)


def test_bench_health_json_through_a_stand_in_nvml(tmp_path):
    """The whole health path here, without a GPU: NVML loaded from a stand-in library (fixtures/
    fake_nvml.c: two GPUs, the second without an energy counter), read, printed and written."""
    require_tripod()
    library = stand_in_nvml(tmp_path)
    out = tmp_path / "health.json"
    tripod("bench", "health", "--library", library, "--samples", 2, "--interval-ms", 1, "--json", out)
    health = load(out)
    validate_with("bench-health", health)
    assert health["gpus"] == 2 and len(health["readings"]) == 4
    first, second = health["readings"][0], health["readings"][1]
    assert (first["name"], first["temperature_c"], first["power_w"], first["energy_joules"]) == ("Fake GPU 0", 40, 123.456, 5000)
    assert second["energy_joules"] is None  # no counter: null (it was -1)
    assert first["memory_total_mib"] == 144 * 1024 and first["memory_used_mib"] == 3 * 1024
    assert first["refused"] == []


def test_bench_health_keeps_the_readings_a_gpu_gives_when_it_refuses_others(tmp_path):
    """A MIG slice or a container refuses some queries (NOT_SUPPORTED): those readings are null and
    named, the others still read; it used to end the command at the first refused query."""
    library = stand_in_nvml(tmp_path)
    out = tmp_path / "health.json"
    result = tripod("bench", "health", "--library", library, "--samples", 1, "--interval-ms", 0, "--json", out,
                    env={"FAKE_NVML_REFUSE": "temperature,power"})
    health = load(out)
    validate_with("bench-health", health)
    first = health["readings"][0]
    assert first["temperature_c"] is None and first["power_w"] is None, first
    assert (first["name"], first["sm_clock_mhz"], first["energy_joules"]) == ("Fake GPU 0", 1980, 5000), first
    assert first["refused"] == ["nvmlDeviceGetTemperature: Not Supported", "nvmlDeviceGetPowerUsage: Not Supported"]
    assert "# gpu 0 refuses nvmlDeviceGetPowerUsage: Not Supported" in result.stdout, result.stdout
    assert result.stdout.count("refuses nvmlDeviceGetTemperature") == 2  # once per GPU, not per sample


def test_bench_health_fails_naming_the_query_when_nvml_loses_the_gpu(tmp_path):
    """Only a refusal is tolerated: any other NVML failure (the GPU lost) still ends the command, named."""
    library = stand_in_nvml(tmp_path)
    out = tmp_path / "health.json"
    require_tripod()
    result = subprocess.run([str(TRIPOD), "bench", "health", "--library", str(library), "--json", str(out)],
                            capture_output=True, text=True, timeout=60, env={**MPI_ENV, "FAKE_NVML_LOST": "1"})
    assert result.returncode == 1 and not out.exists(), result.stdout + result.stderr
    assert "nvmlDeviceGetPowerUsage: GPU is lost" in result.stderr, result.stderr
