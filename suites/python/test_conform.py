"""`tripod conform` under mpirun: every layout of 8 ranks passes against the single-device reference,
the JSON and JUnit outputs carry one record per layout, and a deliberately broken layout (a skipped
gradient reduction) is reported as failing with a non-zero exit - the suite can fail."""
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tripod_cli import MPI_ENV, TRIPOD, mpirun_command, require_tripod

SOURCE = Path(os.environ.get("TRIPOD_SOURCE_DIR", Path(__file__).parents[2]))


def conform(ranks, *args):
    require_tripod()
    # 8 ranks on CI's 2 cores take about 35 s a run; the limit only catches a hang. It was 200 s
    # until a run beside a build took longer (2026-12-05): a limit is no timing test.
    return subprocess.run(mpirun_command(ranks, "conform", *args, timeout=400), capture_output=True, text=True,
                          timeout=440, env=MPI_ENV)


@pytest.mark.parametrize("dtype", ["fp64", "fp32"])
def test_all_layouts_of_8_ranks_pass(tmp_path, dtype):
    result = conform(8, "--dtype", dtype, "--json", tmp_path / "c.json", "--junit", tmp_path / "c.xml")
    assert result.returncode == 0, result.stdout + result.stderr
    records = json.loads((tmp_path / "c.json").read_text())["layouts"]
    # fp32's parameter bound includes a measured rounding floor, printed with the tensor it comes from
    assert ("rounding floor" in result.stdout) == (dtype == "fp32")
    assert {r["dp"] for r in records} == {1, 2, 4, 8}
    assert {r["pp"] for r in records} == {1, 2, 4}  # the conformance model has 4 layers
    assert {r["schedule"] for r in records} == {"none", "afab", "1f1b", "interleaved"}
    for named in ("tp2-pp2-dp2-z0-mb2-1f1b", "tp2-pp2-dp2-z1-mb2-1f1b", "tp1-pp4-dp2-z0-mb4-1f1b",
                  "tp2-pp4-dp1-z0-mb4-afab", "tp4-pp2-dp1-z0-mb2-1f1b", "tp1-pp2-dp4-z0-mb2-1f1b",
                  "tp2-pp2-dp2-z1-mb4-sp-interleaved-v2"):
        assert named in {r["layout"] for r in records}
    assert {r["tp"] for r in records} == {1, 2, 4}  # the conformance model has 4 heads
    assert {r["sequence_parallel"] for r in records} == {False, True}
    assert {r["zero"] for r in records} == {0, 1, 2, 3}
    # --list-layouts says beforehand, without MPI, what the run checks and with which head.
    listed = subprocess.run([str(TRIPOD), "conform", "--list-layouts", "8", "--dtype", dtype], capture_output=True,
                            text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert [(line.split()[0], line.split()[-1]) for line in lines[:-1]] == [(r["layout"], r["head"]) for r in records]
    tied = sum(r["head"] == "tied" for r in records)
    assert lines[-1] == (f"{len(records)} layouts for 8 ranks ({dtype}, --heads alternate): {tied} tied, "
                         f"{len(records) - tied} untied")
    # Both heads meet every ZeRO stage with and without each of TP, PP, DP and SP (conform/lm_heads.h).
    kinds = {}
    for r in records:
        kinds.setdefault((r["zero"], r["tp"] > 1, r["pp"] > 1, r["dp"] > 1, r["sequence_parallel"]), set()).add(r["head"])
    assert all(heads == {"tied", "untied"} for heads in kinds.values()), kinds
    for r in records:
        assert r["pass"] and r["dtype"] == dtype and 0 <= r["error_over_bound"] <= 1
        assert {"tp", "pp", "schedule", "loss_rel_error", "param_rel_error", "seconds_per_step"} <= set(r)
        if dtype == "fp64":
            assert r["loss_rel_error"] < 1e-12 and r["param_rel_error"] < 1e-10
        assert r["peak_mib"] > 0 and r["accounted_mib"] > 0 and 0 <= r["transient_mib"] < r["accounted_mib"]
    # The operator checks (vocab-parallel loss on huge logits) of every TP size, first.
    checks = json.loads((tmp_path / "c.json").read_text())["operator_checks"]
    assert [c["layout"] for c in checks] == ["op:vocab-parallel-loss-tp2", "op:vocab-parallel-loss-tp4"]
    assert all(c["pass"] for c in checks)
    # Released memory is really returned: the allocator's peak falls with every ZeRO stage.
    peak = {r["layout"]: r["peak_mib"] for r in records}
    stages = [peak[f"tp1-pp1-dp8-z{z}-mb1"] for z in range(4)]
    assert stages == sorted(stages, reverse=True) and stages[3] < 0.6 * stages[0], stages
    suite = ET.parse(tmp_path / "c.xml").getroot().find("testsuite")
    assert int(suite.get("tests")) == len(records) + len(checks) and int(suite.get("failures")) == 0


def test_untied_head_and_a_vocabulary_not_dividing_by_tp(tmp_path):
    # 97 tokens (the default now) over 4 TP ranks: padded to 100, the padding never reaches the loss
    layouts = ["tp4-pp1-dp1-z1-mb1", "tp4-pp1-dp1-z3-mb2-sp", "tp2-pp1-dp2-z2-mb1-sp", "tp2-pp1-dp2-z0-mb2"]
    result = conform(4, "--heads", "untied", "--layouts", *layouts, "--json", tmp_path / "c.json")
    assert result.returncode == 0, result.stdout + result.stderr
    assert all(r["pass"] and r["param_rel_error"] < 1e-10
               for r in json.loads((tmp_path / "c.json").read_text())["layouts"])


def test_a_skipped_gradient_reduction_fails(tmp_path):
    layouts = ["tp1-pp1-dp1-z0-mb1", "tp1-pp1-dp2-z0-mb1", "tp1-pp1-dp2-z1-mb2", "tp1-pp1-dp2-z3-mb1",
               "tp1-pp2-dp2-z1-mb2-1f1b"]
    result = conform(4, "--layouts", *layouts, "--inject-fault", "skip-grad-reduction", "--junit", tmp_path / "c.xml")
    assert result.returncode != 0
    rows = {line.split()[0]: line for line in result.stdout.splitlines() if line.startswith("tp")}
    assert rows["tp1-pp1-dp1-z0-mb1"].endswith("PASS")  # nothing to reduce with one rank
    for name in layouts[1:]:
        assert "FAIL" in rows[name], result.stdout
    failures = ET.parse(tmp_path / "c.xml").getroot().find("testsuite").get("failures")
    assert int(failures) == 4


BF16_LAYOUTS = ["tp1-pp1-dp2-z1-mb2", "tp2-pp1-dp2-z3-mb1-sp", "tp2-pp2-dp1-z0-mb2-1f1b", "tp1-pp2-dp2-z2-mb2-1f1b",
                "tp4-pp1-dp1-z0-mb1"]


def test_bf16_mixed_layouts_pass_within_the_stated_floor(tmp_path):
    # bf16-mixed: fp32 tensors, bf16 GEMM operands; losses, norms and parameters may differ from the
    # single-device reference by twice the reference's own distance from fp64 (printed)
    result = conform(4, "--dtype", "bf16-mixed", "--layouts", *BF16_LAYOUTS, "--json", tmp_path / "c.json")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "rounding floor (largest |bf16-mixed - fp64|" in result.stdout and "losses and norms" in result.stdout
    records = json.loads((tmp_path / "c.json").read_text())["layouts"]
    assert len(records) == len(BF16_LAYOUTS)
    assert all(r["pass"] and r["dtype"] == "bf16-mixed" and r["error_over_bound"] <= 1 for r in records)
    # the policy really changed the arithmetic: the layouts are not bit-identical to the reference
    assert max(r["loss_rel_error"] for r in records) > 0


def test_bf16_mixed_still_catches_a_skipped_gradient_reduction():
    result = conform(4, "--dtype", "bf16-mixed", "--layouts", *BF16_LAYOUTS[:2], "--inject-fault",
                     "skip-grad-reduction")
    assert result.returncode != 0
    rows = {line.split()[0]: line for line in result.stdout.splitlines() if line.startswith("tp")}
    assert all("FAIL" in rows[name] for name in BF16_LAYOUTS[:2]), result.stdout


def test_tf32_is_refused_with_the_reason():
    result = conform(1, "--dtype", "tf32")
    assert result.returncode != 0 and "no justified tolerance for TF32" in result.stderr, result.stderr


def test_unsummed_tied_embedding_gradients_fail():
    # the pipeline's two wte copies must add their gradients; without that only pipelines break
    layouts = ["tp1-pp1-dp2-z0-mb1", "tp1-pp2-dp1-z0-mb2-afab", "tp1-pp2-dp1-z2-mb2-interleaved-v2"]
    result = conform(2, "--heads", "tied", "--layouts", *layouts, "--inject-fault", "skip-tied-embedding-reduction")
    assert result.returncode != 0
    rows = {line.split()[0]: line for line in result.stdout.splitlines() if line.startswith("tp")}
    assert all(line.split()[1] == "tied" for line in rows.values())
    assert rows["tp1-pp1-dp2-z0-mb1"].endswith("PASS")
    assert "FAIL" in rows["tp1-pp2-dp1-z0-mb2-afab"] and "FAIL" in rows["tp1-pp2-dp1-z2-mb2-interleaved-v2"]


def test_a_listing_of_one_layout_for_one_rank_says_so_in_the_singular():
    require_tripod()
    result = subprocess.run([str(TRIPOD), "conform", "--list-layouts", "1", "--layouts", "tp1-pp1-dp1-z0-mb1"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1].startswith("1 layout for 1 rank (fp64, --heads alternate): "), result.stdout


@pytest.mark.parametrize("args, message", [
    (["--list-layouts", "0"], "--list-layouts: Value 0 not in range 1 to 4096"),
    (["--list-layouts", "2", "--layouts", "tp1-pp1-dp4-z0-mb1"], "layout tp1-pp1-dp4-z0-mb1 needs a multiple of 4 ranks"),
    (["--list-layouts", "2", "--heads", "both"], "--heads must be alternate, tied or untied (got 'both')")])
def test_bad_layout_listings_are_refused(args, message):
    require_tripod()
    result = subprocess.run([str(TRIPOD), "conform", *args], capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and message in result.stderr, result.stderr


def test_unknown_layout_is_an_error():
    result = conform(2, "--layouts", "tp1-pp1-dq2")
    assert result.returncode != 0
    assert "unknown part 'dq2'" in result.stderr


def test_a_world_where_no_layout_uses_more_than_one_rank_says_so():
    # 3 ranks: the conformance model (4 heads, batch 8, 4 layers) has no layout of 3 ranks, so
    # every layout runs as 3 one-rank replicas; the output must not pretend otherwise.
    result = conform(3, "--steps", "2", "--layouts", "tp1-pp1-dp1-z0-mb1")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no layout of this model uses more than one rank of 3" in result.stdout
    assert "World sizes with multi-rank layouts: 2, 4, 6, 8" in result.stdout


def test_overrides_start_from_the_conformance_model_and_are_printed():
    result = conform(2, "--steps", "2", "--set", "optim.lr=0.02", "--layouts", "tp1-pp1-dp2-z1-mb1")
    assert result.returncode == 0, result.stdout + result.stderr
    model = json.loads(result.stdout.split("model: ", 1)[1].splitlines()[0])
    assert model["vocab_size"] == 97 and model["n_layer"] == 4  # the conformance model, not the training defaults


def test_one_step_is_refused():
    result = conform(2, "--steps", "1")
    assert result.returncode != 0 and "--steps must be at least 2" in result.stderr



RESHARD_LAYOUTS = ["tp2-pp2-dp1-z0-mb2", "tp1-pp1-dp4-z3-mb1", "tp4-pp1-dp1-z0-mb1", "tp1-pp1-dp1-z0-mb1",
                   "tp1-pp2-dp2-z1-mb2", "tp2-pp1-dp2-z2-mb1"]


def test_reshard_rows_go_through_a_checkpoint_into_the_next_layout(tmp_path):
    # Each layout trains 3 of 6 steps and saves; the next one (the last: the first) loads that
    # checkpoint and finishes. The same reference and tolerance as the straight rows.
    keep = tmp_path / "checkpoints"
    r = conform(4, "--reshard", "--checkpoint-dir", keep, "--steps", 6, "--json", tmp_path / "c.json",
                "--layouts", *RESHARD_LAYOUTS)
    assert r.returncode == 0, r.stdout + r.stderr
    names = [rec["layout"] for rec in json.loads((tmp_path / "c.json").read_text())["layouts"]]
    rows = [n for n in names if n.startswith("ckpt:")]
    assert len(rows) == len(RESHARD_LAYOUTS), names
    for row, saved, loaded in zip(rows, RESHARD_LAYOUTS, RESHARD_LAYOUTS[1:] + RESHARD_LAYOUTS[:1]):
        first, second = row[len("ckpt:"):].split(">")
        assert first.startswith(saved) and second.startswith(loaded), row
    assert "14 rows (6 layouts), 14 passed, 0 failed" in r.stdout, r.stdout  # 2 operator checks, 6 + 6 rows
    # With --checkpoint-dir the checkpoints stay, and are ordinary ones: row 0's verifies.
    step = keep / "row-0" / "replica-0" / "step-00000003"
    verified = subprocess.run([str(TRIPOD), "ckpt", "verify", str(step)], capture_output=True, text=True)
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_reshard_refuses_a_checkpoint_dir_that_holds_something(tmp_path):
    (tmp_path / "mine.txt").write_text("keep")
    r = conform(2, "--reshard", "--checkpoint-dir", tmp_path, "--layouts", "tp2-pp1-dp1-z0-mb1",
                "--junit", tmp_path / "c.xml")
    assert r.returncode != 0 and "exists and is not an empty folder" in r.stderr, r.stdout + r.stderr
    assert (tmp_path / "mine.txt").read_text() == "keep"
    # Refused before any row: it was found after every straight row, and the reports read all-green.
    assert "PASS" not in r.stdout and not (tmp_path / "c.xml").exists(), r.stdout


def test_reshard_rows_run_the_planted_faults_too():
    # The checkpoint rows trained without the fault plan (no faults, released buffers not filled
    # with NaN): both ckpt rows passed while both straight rows failed.
    r = conform(2, "--reshard", "--layouts", "tp1-pp1-dp2-z3-mb1", "tp1-pp1-dp2-z0-mb1",
                "--inject-fault", "skip-grad-reduction")
    rows = [line for line in r.stdout.splitlines() if line.startswith(("tp1-", "ckpt:"))]
    assert len(rows) == 4 and all("FAIL" in row for row in rows), r.stdout


def test_a_row_that_ends_in_an_error_is_infinitely_far_not_zero(tmp_path):
    # A NaN loss (a read after release) ended the row with error_over_bound 0.0, which reads as a
    # pass to a consumer of "error_over_bound <= 1 passes".
    r = conform(2, "--layouts", "tp1-pp1-dp2-z3-mb1", "--inject-fault", "use-after-release",
                "--json", tmp_path / "c.json")
    assert r.returncode != 0, r.stdout + r.stderr
    [row] = [x for x in json.loads((tmp_path / "c.json").read_text())["layouts"] if x["layout"].startswith("tp1-")]
    assert row["pass"] is False and row["error_over_bound"] is None, row  # null: infinite


@pytest.mark.parametrize("args, message", [
    (["--timeout", "1e20", "--comm-timeout", "0"], "--timeout: 1e+20 s is out of range"),  # it spun forever
    (["--timeout", "1e30"], "--timeout: 1e+30 s is out of range"),  # refused under --comm-timeout's name
    (["--checkpoint-dir", "somewhere"], "--checkpoint-dir is where --reshard's checkpoints go"),  # ignored
    (["--json", "out", "--junit", "./out"], "--json and --junit name the same file"),  # the XML replaced the JSON
])
def test_timeouts_and_checkpoint_dirs_that_cannot_work_are_refused(args, message):
    r = subprocess.run([str(TRIPOD), "conform", "--layouts", "tp1-pp1-dp1-z0-mb1", *args], capture_output=True,
                       text=True, timeout=60, env=MPI_ENV)
    assert r.returncode != 0 and message in r.stderr, r.stdout + r.stderr


def test_an_oversubscribed_run_needs_no_environment_variables():
    # 8 ranks on this machine's cores, as a user types it (no OMP_NUM_THREADS, no wait policy): each
    # rank takes its share of the CPUs. Before, every rank ran all cores' threads, and this command
    # took 70 s on 2 cores instead of under 1 s (mpirun's own --timeout ends a crawl).
    require_tripod()
    env = {k: v for k, v in MPI_ENV.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")}
    r = subprocess.run(mpirun_command(8, "conform", "--layouts", "tp2-pp2-dp2-z1-mb4-1f1b", "tp1-pp1-dp2-z3-mb2",
                                      timeout=30), capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    share = re.search(r"threads: 8 ranks on this machine, (\d+) CPUs between them, (\d+) for this rank: "
                      r"(\d+) threads? per rank\n", r.stdout)
    assert share, r.stdout
    machine, own, threads = map(int, share.groups())
    assert threads == max(1, min(own, machine // 8))
    # OMP_NUM_THREADS, where set, is the user's choice and is kept.
    r = conform(2, "--layouts", "tp2-pp1-dp1-z0-mb1")
    assert r.returncode == 0 and "1 thread per rank (OMP_NUM_THREADS)" in r.stdout, r.stdout + r.stderr


def test_bf16_operand_gathers_give_the_bits_of_fp32_gathers(tmp_path):
    # Under bf16-mixed ZeRO 1-3 gather the GEMM weights as bf16 (ZeRO-3 before use, ZeRO-1/2 after
    # the update); -gfp32 gathers them in fp32. The model only reads their bf16 rounding, so the
    # trajectories must be bit-identical.
    layouts = ["tp1-pp1-dp2-z3-mb2", "tp1-pp1-dp2-z3-mb2-gfp32", "tp1-pp1-dp2-z3-mb1-pf0",
               "tp1-pp1-dp2-z3-mb1-pf0-gfp32", "tp1-pp1-dp2-z1-mb2", "tp1-pp1-dp2-z1-mb2-gfp32",
               "tp1-pp1-dp2-z2-mb1", "tp1-pp1-dp2-z2-mb1-gfp32"]
    check = [sys.executable, "-m", "reports.same_fingerprints"]
    for heads in ("tied", "untied"):
        out = tmp_path / f"{heads}.json"
        result = conform(2, "--dtype", "bf16-mixed", "--heads", heads, "--json", out, "--layouts", *layouts)
        assert result.returncode == 0, result.stdout + result.stderr
        same = subprocess.run(check + [out, "--suffix=-gfp32"], capture_output=True, text=True, cwd=SOURCE)
        assert same.returncode == 0 and "4/4 pairs with the same fingerprint" in same.stdout, same.stdout + same.stderr
    # The check can fail: a pair that differs, no pair at all, a file that is not conform's.
    record = json.loads((tmp_path / "tied.json").read_text())
    record["layouts"][1]["fingerprint"] = "0" * 16
    (tmp_path / "differs.json").write_text(json.dumps(record))
    differs = subprocess.run(check + [tmp_path / "differs.json", "--suffix=-gfp32"], capture_output=True, text=True,
                             cwd=SOURCE)
    assert differs.returncode == 1 and "tp1-pp1-dp2-z3-mb2 and tp1-pp1-dp2-z3-mb2-gfp32 differ" in differs.stderr
    # The twin's canonical name may put the option before later ones (-gfp32 before -pad16): paired
    # all the same (they were once left out silently).
    record = json.loads((tmp_path / "tied.json").read_text())
    for row in record["layouts"]:
        row["layout"] += "-pad16"
    record["layouts"][1]["layout"] = "tp1-pp1-dp2-z3-mb2-gfp32-pad16"
    record["layouts"][1]["fingerprint"] = "0" * 16
    (tmp_path / "padded.json").write_text(json.dumps(record))
    padded = subprocess.run(check + [tmp_path / "padded.json", "--suffix=-gfp32"], capture_output=True, text=True,
                            cwd=SOURCE)
    assert padded.returncode == 1 and "3/4 pairs" in padded.stdout, padded.stdout + padded.stderr
    assert "tp1-pp1-dp2-z3-mb2-pad16 and tp1-pp1-dp2-z3-mb2-gfp32-pad16 differ" in padded.stderr
    none = subprocess.run(check + [tmp_path / "tied.json", "--suffix=-pf2"], capture_output=True, text=True, cwd=SOURCE)
    assert none.returncode == 1 and "0/0 pairs" in none.stdout and "no layout" in none.stderr
    (tmp_path / "bad.json").write_text("{")
    bad = subprocess.run(check + [tmp_path / "bad.json", "--suffix=-gfp32"], capture_output=True, text=True, cwd=SOURCE)
    assert bad.returncode == 2 and "cannot read" in bad.stderr
