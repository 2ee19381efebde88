"""The conformance suite's mutation score: every fault of the catalogue (`tripod conform
--list-faults`), planted alone in an 8-rank fp64 run over one layout of every kind, must be caught
- by exactly the layouts that exercise the broken code, the others still passing - and a rank that
hangs must end in a timeout row, written reports and a non-zero exit, never a hung CI job; a rank
that fails alone ends the job within its grace, not at the timeout."""
import json
import subprocess
import time
import xml.etree.ElementTree as ET

import pytest

from tripod_cli import MPI_ENV, TRIPOD, mpirun_command, require_tripod

# One layout of every kind on 8 ranks: DP alone, ZeRO-3, TP with SP, TP=4, pipelines with every
# schedule, tied and untied heads (conform/lm_heads.h), 3D, ZeRO-2's gathers overlapped (-opg).
LAYOUTS = ["tp1-pp1-dp8-z0-mb1", "tp1-pp1-dp4-z3-mb2", "tp2-pp1-dp4-z2-mb1-sp", "tp4-pp1-dp2-z1-mb2",
           "tp1-pp2-dp4-z0-mb2-afab", "tp2-pp2-dp2-z1-mb4-1f1b", "tp2-pp2-dp2-z3-mb4-sp-interleaved-v2",
           "tp1-pp4-dp2-z2-mb4-1f1b", "tp1-pp2-dp2-z2-mb4-interleaved-v2-opg"]


def tied(l):
    return l["head"] == "tied"


# Which layouts each fault must break (the others must pass); operator checks: whether they fail.
EXPECTED = {
    "skip-grad-reduction": (lambda l: l["dp"] > 1, False),
    "skip-tied-embedding-reduction": (lambda l: l["pp"] > 1 and tied(l), False),
    "local-token-count": (lambda l: l["dp"] > 1, False),
    "second-dp-average": (lambda l: l["dp"] > 1, False),
    "row-parallel-bias-every-rank": (lambda l: l["tp"] > 1, False),
    "norm-counts-replicated": (lambda l: l["tp"] > 1, False),
    "norm-skips-data-parallel": (lambda l: l["dp"] > 1, False),
    "sp-skip-grad-allreduce": (lambda l: l["sequence_parallel"], False),
    "padded-vocab-softmax": (lambda l: l["tp"] > 1, True),  # 97 divides by neither 2 nor 4
    "max-to-sum-shift": (lambda l: False, True),  # exact in real arithmetic: only huge logits break it
    "stale-zero3-params": (lambda l: l["zero"] == 3, False),
    "use-after-release": (lambda l: l["zero"] == 3, False),  # caught because released buffers are poisoned
    "stale-zero12-params": (lambda l: l["zero"] in (1, 2) and l["dp"] > 1, False),
    "pipeline-slot-mixup": (lambda l: l["pp"] > 1, False),
    "unwaited-param-gather": (lambda l: l["layout"].endswith("-opg"), False),
}


# Faults of the bf16-mixed policy alone, with the layouts they are run on and those that must catch
# them. rounded-masters moves results by less than bf16's rounding floor, within the tolerance: only
# the bit twins catch it (ZeRO-1 at one micro-batch a step against ZeRO-3, conform/bit_twins.h), and
# both twins of each pair fail, since either could be the wrong one.
BF16_LAYOUTS = ["tp1-pp1-dp2-z0-mb1", "tp1-pp1-dp2-z1-mb1", "tp1-pp1-dp2-z3-mb1", "tp2-pp1-dp2-z1-mb1-sp",
                "tp2-pp1-dp2-z3-mb1-sp", "tp1-pp1-dp2-z2-mb2"]
BF16_EXPECTED = {
    "rounded-masters": {"tp1-pp1-dp2-z1-mb1", "tp1-pp1-dp2-z3-mb1", "tp2-pp1-dp2-z1-mb1-sp", "tp2-pp1-dp2-z3-mb1-sp"},
}


def conform(*args, timeout=200, dtype="fp64"):
    require_tripod()
    return subprocess.run(mpirun_command(8, "conform", "--dtype", dtype, *args, timeout=timeout),
                          capture_output=True, text=True, timeout=timeout + 40, env=MPI_ENV)


def test_the_catalogue_is_listed_and_covered():
    result = subprocess.run([str(TRIPOD), "conform", "--list-faults"], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0
    listed = [line.split()[0] for line in result.stdout.splitlines()[1:]]
    assert len(listed) >= 10
    assert set(listed) == set(EXPECTED) | set(BF16_EXPECTED) | {"hang-one-rank", "fail-one-rank"}


@pytest.mark.parametrize("fault", sorted(EXPECTED))
def test_every_fault_is_caught_by_the_layouts_it_breaks(tmp_path, fault):
    must_fail, checks_fail = EXPECTED[fault]
    result = conform("--layouts", *LAYOUTS, "--inject-fault", fault, "--timeout", "60", "--json", tmp_path / "c.json")
    assert result.returncode != 0, f"{fault} was not caught:\n{result.stdout}"
    report = json.loads((tmp_path / "c.json").read_text())
    # Caught by the comparison in every layout, not by a rank failing alone: that ends the job at
    # the layout's timeout and leaves the later layouts unrun (pipeline-slot-mixup did: one minute
    # of CI, and its 1F1B, interleaved and pp4 rows were never checked).
    assert [r["layout"] for r in report["layouts"]] == LAYOUTS, result.stdout + result.stderr
    assert not any(r.get("timed_out") for r in report["layouts"]), result.stderr
    failed = {r["layout"] for r in report["layouts"] if not r["pass"]}
    expected = {r["layout"] for r in report["layouts"] if must_fail(r)}
    assert failed == expected, f"{fault}: failed {sorted(failed)}, expected {sorted(expected)}\n{result.stdout}"
    assert all(c["pass"] != checks_fail for c in report["operator_checks"]), report["operator_checks"]


@pytest.mark.parametrize("fault", sorted(BF16_EXPECTED))
def test_every_bf16_fault_is_caught_by_the_layouts_it_breaks(tmp_path, fault):
    clean = conform("--layouts", *BF16_LAYOUTS, "--timeout", "60", dtype="bf16-mixed")
    assert clean.returncode == 0 and "bit twins: 2 of 2 groups agree" in clean.stdout, clean.stdout + clean.stderr
    result = conform("--layouts", *BF16_LAYOUTS, "--inject-fault", fault, "--timeout", "60", "--json", tmp_path / "c.json",
                     dtype="bf16-mixed")
    assert result.returncode != 0, f"{fault} was not caught:\n{result.stdout}"
    report = json.loads((tmp_path / "c.json").read_text())
    failed = {r["layout"] for r in report["layouts"] if not r["pass"]}
    assert failed == BF16_EXPECTED[fault], f"{fault}: failed {sorted(failed)}\n{result.stdout}"
    assert all("bit twins differ" in r["failure"] for r in report["layouts"] if not r["pass"])
    assert "bit twins: 0 of 2 groups agree" in result.stdout, result.stdout


def test_the_default_bf16_list_gives_every_layout_a_twin_so_rounded_masters_is_caught_everywhere(tmp_path):
    """Under bf16-mixed conform's default list adds the -gfp32 twin of each layout that has no bit
    twin with its head (conform/bit_twins.h with_gather_twins). Without them rounded-masters passed
    every ZeRO-1 layout of more than one micro-batch and, while the heads alternated by ZeRO stage
    (ZeRO-2 tied, ZeRO-3 untied), every ZeRO-2 layout: 8 ranks caught it in 18 of the 137 ZeRO-1/2
    layouts with DP > 1; now in 137 of 137 under every --heads. Two ranks here (3 s)."""
    require_tripod()

    def run(*args):
        return subprocess.run(mpirun_command(2, "conform", "--dtype", "bf16-mixed", "--timeout", "60", *args,
                                             timeout=120), capture_output=True, text=True, timeout=160, env=MPI_ENV)

    clean = run("--json", tmp_path / "clean.json")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    names = [r["layout"] for r in json.loads((tmp_path / "clean.json").read_text())["layouts"]]
    for twin in ("tp1-pp1-dp2-z1-mb2-gfp32", "tp1-pp1-dp2-z2-mb1-gfp32-pad16", "tp1-pp1-dp2-z3-mb1-rfull-pf2-gfp32"):
        assert twin in names, names  # ZeRO-1 at two micro-batches, the padded and recomputing variants
    for has_a_twin in ("tp1-pp1-dp2-z1-mb1", "tp1-pp1-dp2-z2-mb1", "tp1-pp1-dp2-z2-mb2"):
        assert has_a_twin + "-gfp32" not in names  # ZeRO-3 of the same head (conform/lm_heads.h)
    result = run("--inject-fault", "rounded-masters", "--json", tmp_path / "c.json")
    assert result.returncode != 0
    rows = json.loads((tmp_path / "c.json").read_text())["layouts"]
    failed = {r["layout"] for r in rows if not r["pass"]}
    broken = {r["layout"] for r in rows if r["zero"] in (1, 2) and r["dp"] > 1}
    assert broken and broken <= failed, sorted(broken - failed)
    # ZeRO-3 where ZeRO-1 or -2 is its twin: either could be the wrong one
    assert failed - broken == {"tp1-pp1-dp2-z3-mb1", "tp1-pp1-dp2-z3-mb2"}


def test_a_hanging_rank_ends_in_a_timeout_row_and_a_report(tmp_path):
    layouts = ["tp1-pp1-dp1-z0-mb1", "tp1-pp1-dp8-z0-mb1", "tp1-pp1-dp8-z1-mb1"]
    start = time.monotonic()
    result = conform("--layouts", *layouts, "--inject-fault", "hang-one-rank", "--timeout", "8",
                     "--json", tmp_path / "c.json", "--junit", tmp_path / "c.xml", timeout=100)
    elapsed = time.monotonic() - start
    assert result.returncode != 0
    assert elapsed < 8 + 25, f"took {elapsed:.0f} s"  # start-up, the first layout, the timeout, the teardown
    assert "tp1-pp1-dp8-z0-mb1 did not finish within 8 s" in result.stderr
    report = json.loads((tmp_path / "c.json").read_text())
    rows = {r["layout"]: r for r in report["layouts"]}
    assert rows["tp1-pp1-dp1-z0-mb1"]["pass"]
    assert not rows["tp1-pp1-dp8-z0-mb1"]["pass"] and rows["tp1-pp1-dp8-z0-mb1"]["timed_out"]
    assert rows["tp1-pp1-dp8-z0-mb1"]["failure"] == "timeout after 8 s"
    # the abandoned row keeps its layout's fields (they were a default layout's: dp 1, head "")
    hung = rows["tp1-pp1-dp8-z0-mb1"]
    assert (hung["tp"], hung["pp"], hung["dp"], hung["zero"], hung["micro_batches"]) == (1, 1, 8, 0, 1), hung
    assert hung["head"] in ("tied", "untied"), hung
    suite = ET.parse(tmp_path / "c.xml").getroot().find("testsuite")
    assert int(suite.get("failures")) == 1


def test_a_rank_failing_alone_ends_the_job_with_its_error_within_the_grace(tmp_path):
    """DP rank 1 fails where the others go on into the loss reduction and wait for it there: it
    waits 10 s for them at the row's end, then ends the job with its own error and writes the
    reports itself (rank 0 is stuck), instead of the job waiting out the 100 s --timeout."""
    layouts = ["tp1-pp1-dp1-z0-mb1", "tp1-pp1-dp8-z0-mb1", "tp1-pp1-dp8-z1-mb1"]
    start = time.monotonic()
    result = conform("--layouts", *layouts, "--inject-fault", "fail-one-rank", "--timeout", "100",
                     "--json", tmp_path / "c.json", "--junit", tmp_path / "c.xml", timeout=150)
    elapsed = time.monotonic() - start
    assert result.returncode == 3, result.stderr
    assert elapsed < 10 + 25, f"took {elapsed:.0f} s"  # start-up, the first layout, the grace, the teardown
    assert ("rank 1: tp1-pp1-dp8-z0-mb1 failed on this rank alone: planted fault fail-one-rank: data-parallel "
            "rank 1's loss check failed") in result.stderr
    assert "did not finish within" not in result.stderr  # not the watchdog's timeout
    report = json.loads((tmp_path / "c.json").read_text())
    assert report["running"] is None
    rows = {r["layout"]: r for r in report["layouts"]}
    assert list(rows) == layouts[:2]  # the row before it, then the failed one: the job ended there
    assert rows["tp1-pp1-dp1-z0-mb1"]["pass"]
    failed = rows["tp1-pp1-dp8-z0-mb1"]
    assert not failed["pass"] and failed["failed_alone"] and not failed["timed_out"], failed
    assert failed["failure"].startswith("rank 1: planted fault fail-one-rank"), failed["failure"]
    assert (failed["dp"], failed["head"]) == (8, "untied"), failed
    suite = ET.parse(tmp_path / "c.xml").getroot().find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("2", "1", "0")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.json", "c.xml"]  # no temporary file left



def test_a_report_that_cannot_be_written_ends_the_job_at_once_naming_it(tmp_path):
    """Rank 0 writes the reports before and after every row. A write that fails there (a full disk:
    /dev/full) was rank 0's error alone: it left the suite while the others went into the row's
    collectives, and the job waited out --timeout (300 s by default). It now ends at once."""
    start = time.monotonic()
    result = conform("--layouts", "tp1-pp1-dp8-z0-mb1", "--json", "/dev/full", timeout=100)
    elapsed = time.monotonic() - start
    assert result.returncode != 0
    assert "rank 0 of 8: writing JSON report /dev/full failed: No space left on device" in result.stderr, \
        result.stderr
    assert elapsed < 30, f"took {elapsed:.0f} s"
    assert "did not finish within" not in result.stderr
