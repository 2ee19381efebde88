"""reports/output_file.py: the results files the Python side writes (`tripod import --out`, `report`,
`golden check --json`, `scale fit` and `scale advise`) are replaced whole, as the binary's own are
(core/output_file.h). Each was opened with "w", truncating the previous file before the first byte
of the new one: a failure midway left half a file where the previous results were."""
import json
import subprocess
from pathlib import Path

import pytest

from reports.output_file import write_text_replacing
from tripod_cli import TRIPOD, file_size_limit, require_tripod

FIXTURES = Path(__file__).parent / "fixtures" / "importers"


def test_a_file_is_replaced_whole_and_no_staging_file_is_left(tmp_path):
    target = tmp_path / "results.json"
    target.write_text("previous\n")
    write_text_replacing(target, "new\n")
    assert target.read_text() == "new\n" and [p.name for p in tmp_path.iterdir()] == ["results.json"]


def test_a_write_that_fails_midway_leaves_the_previous_file_whole(tmp_path):
    target = tmp_path / "results.json"
    target.write_text("previous\n")
    with pytest.raises(UnicodeEncodeError):
        write_text_replacing(target, "a" * 100000 + "\udc80")  # fails after the first 100 kB are written
    assert target.read_text() == "previous\n" and [p.name for p in tmp_path.iterdir()] == ["results.json"]
    with open(target, "w") as handle:  # what the writers did: the previous file is gone before the failure
        with pytest.raises(UnicodeEncodeError):
            handle.write("a" * 100000 + "\udc80")
    assert target.read_text() != "previous\n"


def test_a_device_or_a_link_is_written_in_place(tmp_path):
    write_text_replacing("/dev/null", "discarded\n")  # no staging file in /dev
    real = tmp_path / "real.json"
    real.write_text("previous\n")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    write_text_replacing(link, "through the link\n")
    assert link.is_symlink() and real.read_text() == "through the link\n"


def test_an_import_that_fails_while_writing_keeps_the_previous_results(tmp_path):
    # `tripod import` (reports/importers) under a file-size limit smaller than its JSON: EFBIG.
    require_tripod()
    out = tmp_path / "nccl.json"
    out.write_text('{"previous": true}\n')

    command = [str(TRIPOD), "import", "nccl-tests", str(FIXTURES / "nccl_all_reduce_2.19.txt"), "--out", str(out)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, preexec_fn=file_size_limit(1024))
    assert result.returncode != 0 and "File too large" in result.stderr, result.stdout + result.stderr
    assert out.read_text() == '{"previous": true}\n' and [p.name for p in tmp_path.iterdir()] == ["nccl.json"]
    assert subprocess.run(command, capture_output=True, text=True, timeout=60).returncode == 0
    assert json.loads(out.read_text())["kind"] == "comm"
