"""`tripod bench ckpt`: the checkpoints it times are real ones (they verify), the JSON holds every
figure the text reports, and bad input is refused before anything is written. No timing
thresholds: only what the output must say, however fast the machine is."""
import json
import subprocess

from tripod_cli import TRIPOD, require_tripod

TINY = ["--config", "tiny", "--batch", "2", "--seq-len", "32"]


def run(*args, timeout=120):
    require_tripod()
    return subprocess.run([str(TRIPOD), *map(str, args)], capture_output=True, text=True, timeout=timeout)


def test_bench_ckpt_reports_rates_and_the_async_stall(tmp_path):
    result = run("bench", "ckpt", *TINY, "--repeats", 2, "--dir", tmp_path, "--keep", "--json", tmp_path / "ckpt.json")
    assert result.returncode == 0, result.stdout + result.stderr
    for line in ("disk sequential write", "synchronous save:", "asynchronous save: written in", "training stalled",
                 "stall / synchronous save"):
        assert line in result.stdout, result.stdout
    j = json.loads((tmp_path / "ckpt.json").read_text())
    assert j["benchmark"] == "checkpoint" and j["repeats"] == 2 and j["bytes"] > 0
    for key in ("disk_write_seconds", "sync_save_seconds", "async_write_seconds", "async_snapshot_seconds",
                "async_publish_seconds", "median_step_seconds"):
        assert j[key] > 0, key
    assert j["async_stall_fraction_of_sync"] == j["async_stall_seconds"] / j["sync_save_seconds"]
    # Two repeats of one synchronous and one asynchronous save: steps 1-4, the newest two kept.
    root = tmp_path / "ckpt"
    assert sorted(p.name for p in root.glob("step-*")) == ["step-00000003", "step-00000004"]
    assert (root / "latest").read_text().strip() == "step-00000004"
    for step in ("step-00000003", "step-00000004"):
        verified = run("ckpt", "verify", root / step)
        assert verified.returncode == 0, verified.stdout + verified.stderr


def test_bench_ckpt_removes_what_it_wrote_unless_kept(tmp_path):
    # It left DIR/ckpt behind, so that the same command run again refused to start.
    for _ in range(2):
        result = run("bench", "ckpt", *TINY, "--repeats", 1, "--dir", tmp_path)
        assert result.returncode == 0, result.stdout + result.stderr
        assert list(tmp_path.iterdir()) == []


def test_bench_ckpt_refuses_a_folder_that_holds_checkpoints_and_zero_repeats(tmp_path):
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "keep-me").write_text("x")
    result = run("bench", "ckpt", *TINY, "--repeats", 1, "--dir", tmp_path)
    assert result.returncode != 0 and "give --dir an empty or new folder" in result.stderr, result.stderr
    assert (tmp_path / "ckpt" / "keep-me").read_text() == "x"
    result = run("bench", "ckpt", *TINY, "--repeats", 0)
    assert result.returncode != 0 and "--repeats: 0 is not a finite number > 0" in result.stderr, result.stderr
    # A --dir that is a file: "filesystem error: cannot create directories: Not a directory [FILE]".
    (tmp_path / "a-file").write_text("mine")
    result = run("bench", "ckpt", *TINY, "--repeats", 1, "--dir", tmp_path / "a-file")
    assert result.returncode == 1 and f"bench ckpt --dir {tmp_path / 'a-file'}: cannot make the folder: Not a " \
        "directory" in result.stderr, result.stderr
    assert (tmp_path / "a-file").read_text() == "mine"
