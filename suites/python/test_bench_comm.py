"""`tripod bench comm` under mpirun (2 and 3 ranks): its output parses as nccl-tests output does
(header, device lines, column header, rows, footer), sizes and bus bandwidths follow nccl-tests'
rules (re-derived here independently), every result is checked, and the check can fail: with
--inject-error the #wrong column is positive and the program exits non-zero."""
import json
import os
import re
import shutil
import subprocess

import pytest

from tripod_cli import BINARY_DIR, MPIRUN, TRIPOD
from tripod_cli import MPI_ENV as ENV

COLLECTIVES = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "alltoall", "sendrecv"]
SMALL = ["-b", "8", "-e", "64K", "-f", "4", "-n", "5"]

# nccl-tests' result-table lines (src/common.cu), rebuilt from its format strings.
COLUMN_HEADER = [
    "#",
    "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          " % (("",) * 5),
    "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s" % (
        "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
        "#wrong"),
    "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s" % (
        "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", ""),
]
SETTINGS = re.compile(r"^# nThread (\d+) nGpus (\d+) minBytes (\d+) maxBytes (\d+) step: (\d+)\((factor|bytes)\) "
                      r"warmup iters: (\d+) iters: (\d+) agg iters: (\d+) validation: (\d+) graph: (\d+)$")
DEVICE = re.compile(r"^#  Rank +(\d+) Group +(\d+) Pid +(\d+) on +(\S+) device +(\d+) \[([^\]]+)\] (.*)$")
OUT_OF_BOUNDS = re.compile(r"^# Out of bounds values : (\d+) (OK|FAILED)$")
AVG_BUSBW = re.compile(r"^# Avg bus bandwidth    : (\S+) $")


def mpirun(ranks, *args, timeout=60):
    if not TRIPOD.exists():
        if BINARY_DIR:
            pytest.fail(f"{TRIPOD} is missing: build the project first")
        pytest.skip(f"{TRIPOD} not built")
    if MPIRUN is None:
        pytest.fail("mpirun not found (install openmpi-bin)")
    return subprocess.run([MPIRUN, "--oversubscribe", "--mca", "btl", "self,vader", "--timeout", "50", "-np",
                           str(ranks), str(TRIPOD), "bench", "comm", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, env=ENV)


def parse_block(text):
    """One nccl-tests output (from '# Collective test starting' to '... concluded'), as a parser of
    nccl-tests output reads it."""
    lines = text.splitlines()
    assert lines[0].startswith("# Collective test starting: ") and lines[0].endswith("_perf")
    settings = SETTINGS.match(lines[1])
    assert settings, lines[1]
    devices_at = lines.index("# Using devices")
    assert lines[devices_at - 1] == "#" and all(l.startswith("# ") for l in lines[2:devices_at - 1])
    devices = [DEVICE.match(l) for l in lines[devices_at + 1:] if l.startswith("#  Rank")]
    assert all(devices)
    table_at = devices_at + 1 + len(devices)
    assert lines[table_at:table_at + 4] == COLUMN_HEADER
    rows = []
    for line in lines[table_at + 4:]:
        if line.startswith("#"):
            break
        f = line.split()
        assert len(f) == 13, line
        wrong = [None if w == "N/A" else int(float(w)) for w in (f[8], f[12])]
        rows.append({"size": int(f[0]), "count": int(f[1]), "type": f[2], "redop": f[3], "root": int(f[4]),
                     "time": [float(f[5]), float(f[9])], "algbw": [float(f[6]), float(f[10])],
                     "busbw": [float(f[7]), float(f[11])], "wrong": wrong})
    footer = lines[table_at + 4 + len(rows):]
    bounds, busbw = OUT_OF_BOUNDS.match(footer[0]), AVG_BUSBW.match(footer[1])
    assert bounds and busbw, footer
    assert footer[2] == "#" and footer[3] == lines[0].replace("starting", "concluded")
    return {"name": lines[0].split()[-1], "settings": settings.groups(), "devices": devices, "rows": rows,
            "out_of_bounds": int(bounds.group(1)), "status": bounds.group(2), "avg_busbw": float(busbw.group(1))}


def parse_output(stdout):
    blocks = stdout.split("# Collective test starting: ")[1:]
    return [parse_block("# Collective test starting: " + b) for b in blocks]


def expected_counts(collective, nbytes, elem, n):
    """nccl-tests' GetCollByteCount: (printed size, printed count)."""
    count = nbytes // elem
    if collective in ("all_gather", "reduce_scatter", "alltoall"):
        block = (count // n) & ~(16 // elem - 1)
        return block * n * elem, block
    return count * elem, count


def bus_factor(collective, n):
    return {"all_reduce": 2 * (n - 1) / n, "all_gather": (n - 1) / n, "reduce_scatter": (n - 1) / n,
            "alltoall": (n - 1) / n}.get(collective, 1.0)


@pytest.mark.parametrize("ranks", [2, 3])
def test_every_collective_parses_like_nccl_tests_and_checks_clean(ranks, tmp_path):
    out = tmp_path / "comm.json"
    result = mpirun(ranks, "all", *SMALL, "-d", "all", "-r", "all", "--json", out)
    assert result.returncode == 0, result.stdout + result.stderr
    blocks = parse_output(result.stdout)
    assert [b["name"] for b in blocks] == [c + "_perf" for c in COLLECTIVES]
    requested = [8 * 4 ** i for i in range(7)]  # -b 8 -e 64K -f 4: 8, 32, ..., 32768
    for collective, block in zip(COLLECTIVES, blocks):
        assert block["settings"][:6] == ("1", "1", "8", "65536", "4", "factor")
        assert [int(d.group(1)) for d in block["devices"]] == list(range(ranks))
        assert block["status"] == "OK" and block["out_of_bounds"] == 0
        roots = list(range(ranks)) if collective in ("broadcast", "reduce") else [-1]
        types = {"int32": 4, "float": 4, "double": 8, "bfloat16": 2}
        assert len(block["rows"]) == len(types) * len(roots) * len(requested)
        rows = iter(block["rows"])  # nccl-tests' loop order: type, (op,) root, size
        for type_name, elem in types.items():
            for root in roots:
                for nbytes in requested:
                    row = next(rows)
                    assert (row["type"], row["root"]) == (type_name, root)
                    assert (row["size"], row["count"]) == expected_counts(collective, nbytes, elem, ranks)
                    assert row["wrong"] == [0, 0], row
        mean = sum(sum(r["busbw"]) for r in block["rows"]) / (2 * len(block["rows"]))
        assert abs(block["avg_busbw"] - mean) <= 0.006  # printed busbw are rounded to 0.01
    records = json.loads(out.read_text())
    assert records["world_size"] == ranks and records["settings"]["datatype"] == "all"
    assert len(records["results"]) == 2 * sum(len(b["rows"]) for b in blocks)
    for r in records["results"]:
        assert r["wrong"] == 0
        if r["size"] > 0:
            assert r["algbw"] == pytest.approx(r["size"] / (r["time_us"] * 1e3), rel=1e-9)
            assert r["busbw"] == pytest.approx(r["algbw"] * bus_factor(r["collective"], ranks), rel=1e-9)


@pytest.mark.parametrize("ranks", [2, 3])
def test_injected_error_is_counted_and_fails_the_run(ranks):
    result = mpirun(ranks, "all", "-b", "64", "-e", "1K", "-f", "4", "-n", "2", "--inject-error")
    assert result.returncode != 0
    assert "results had wrong values" in result.stderr
    blocks = parse_output(result.stdout)
    assert len(blocks) == len(COLLECTIVES)
    for block in blocks:
        assert block["status"] == "FAILED" and block["out_of_bounds"] > 0
        for row in block["rows"]:
            assert row["wrong"][0] > 0 and row["wrong"][1] > 0, (block["name"], row)


def test_ranks_sharing_a_core_are_reported_and_the_output_stays_nccl_tests(tmp_path):
    # Two busy-waiting ranks confined to one core get about half of it each, as ranks do on a
    # machine whose cores other processes take: the main job's all_reduce read 2.1 GB/s one minute
    # and 19.5 the next with nothing saying why. Each result records its ranks' least share of a
    # CPU (on_cpu), and the run warns on stderr; stdout stays nccl-tests' format.
    if shutil.which("taskset") is None:
        pytest.fail("taskset not found (install util-linux)")
    out = tmp_path / "comm.json"
    core = str(min(os.sched_getaffinity(0)))  # one of the cores this process may use (a cpuset may exclude 0)
    shared = subprocess.run(["taskset", "-c", core, MPIRUN, "--oversubscribe", "--bind-to", "none", "--mca", "btl",
                             "self,vader", "--timeout", "50", "-np", "2", str(TRIPOD), "bench", "comm",
                             "all_reduce", "-b", "1M", "-e", "1M", "-n", "20", "--json", str(out)],
                            capture_output=True, text=True, timeout=60, env=ENV)
    assert shared.returncode == 0, shared.stdout + shared.stderr
    assert parse_output(shared.stdout)[0]["out_of_bounds"] == 0
    records = json.loads(out.read_text())
    assert [r["on_cpu"] < 0.9 for r in records["results"]] == [True, True], records["results"]
    assert records["summaries"][0]["least_on_cpu"] < 0.9
    assert "a rank was on a CPU for only" in shared.stderr and "at 1048576 bytes" in shared.stderr
    # Ranks free to run: the share is measured (a number), and nothing is said where it is not low.
    free = mpirun(2, "all_reduce", "-b", "1M", "-e", "1M", "-n", "20", "--json", out)
    assert free.returncode == 0, free.stderr
    shares = [r["on_cpu"] for r in json.loads(out.read_text())["results"]]
    # A share of a CPU: the calling thread's CPU time, read inside the timed interval. The process's
    # time (its other threads too, and read outside the interval) gave 1.002 and 1.003.
    assert all(0 < share <= 1 for share in shares), shares
    if min(shares) >= 0.9:
        assert "a rank was on a CPU for only" not in free.stderr


def test_bfloat16_reduces_in_fp32_and_rounds_once():
    # Five ranks: sums reach 305, past bf16's exact integers (256), so the check holds only if the
    # sum is formed in fp32 and rounded once; an injected error is still caught in bf16.
    result = mpirun(5, "all", "-b", "8", "-e", "4K", "-f", "8", "-n", "2", "-d", "bfloat16", "-o", "all")
    assert result.returncode == 0, result.stdout + result.stderr
    assert all(b["out_of_bounds"] == 0 and b["rows"] for b in parse_output(result.stdout))
    bad = mpirun(2, "all_reduce", "-b", "64", "-e", "1K", "-f", "4", "-n", "2", "-d", "bfloat16", "--inject-error")
    assert bad.returncode != 0 and "results had wrong values" in bad.stderr


def test_a_list_of_collectives_runs_in_one_launch_in_its_order():
    # ci/gpu-check.sh's nccl-1 step: one communicator start-up for six collectives
    result = mpirun(2, "alltoall,all_reduce,broadcast", *SMALL, "-d", "float")
    assert result.returncode == 0, result.stdout + result.stderr
    blocks = parse_output(result.stdout)
    assert [b["name"] for b in blocks] == ["alltoall_perf", "all_reduce_perf", "broadcast_perf"]
    assert all(b["out_of_bounds"] == 0 and b["rows"] for b in blocks)


def test_ops_and_no_check(tmp_path):
    result = mpirun(2, "all_reduce", *SMALL, "-o", "all", "-d", "double", "-c", "0", "-a", "2")
    assert result.returncode == 0, result.stderr
    (block,) = parse_output(result.stdout)
    assert [r["redop"] for r in block["rows"]][::len(block["rows"]) // 4] == ["sum", "max", "min", "avg"]
    assert all(r["wrong"] == [None, None] for r in block["rows"])  # -c 0 prints N/A
    assert block["settings"][9] == "0"


def test_groups_of_a_3d_layout_run_concurrently():
    result = mpirun(4, "all_reduce", "-b", "1K", "-e", "16K", "-f", "4", "-n", "3", "--tp", "2", "--dp", "2",
                    "--group", "tp", "--inject-error")
    assert result.returncode != 0
    (block,) = parse_output(result.stdout)
    assert "# Groups: 2 tp groups of 2 ranks (layout tp=2 pp=1 dp=2" in result.stdout
    assert [int(d.group(2)) for d in block["devices"]] == [0, 0, 1, 1]  # ranks 0,1 form TP group 0
    # Only group 0's last rank corrupts: one wrong element per result, summed over all groups.
    assert all(r["wrong"] == [1, 1] for r in block["rows"])
    # Bandwidth is per group: all_reduce on groups of n = 2 has factor 2(n-1)/n = 1.
    assert all(r["busbw"] == r["algbw"] for r in block["rows"])


@pytest.mark.parametrize("args, message", [
    (["-o", "prod"], "-o prod is not supported"),
    (["-d", "half"], "unsupported datatype 'half'"),
    (["reduce", "-r", "2"], "-r 2 is not a rank of a group of 2"),
    (["--tp", "4"], "needs 4 ranks but the world has 2"),
    (["bogus"], "unknown collective 'bogus'"),
    (["all_reduce,bogus"], "unknown collective 'bogus'"),
    (["all_reduce,"], "unknown collective ''"),
])
def test_bad_flags_fail_on_every_rank(args, message):
    result = mpirun(2, *args, "-b", "8", "-e", "8")
    assert result.returncode != 0
    assert result.stderr.count(message) == 2, result.stderr
