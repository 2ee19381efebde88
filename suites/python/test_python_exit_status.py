"""The commands whose work is a Python module (golden check, report, scale fit and advise, import)
never take its exit status of 0 alone as a result: a --python that is no Python with Tripod's
modules (/bin/true here), or one that exits 0 without its verdict, must fail the command, naming
the interpreter and the file it did not write. Before, `tripod golden check --python /bin/true`
printed nothing and exited 0, which reads as a MATCH."""
import subprocess

import pytest

from tripod_cli import TRIPOD, require_tripod


def tripod(*args):
    require_tripod()
    return subprocess.run([str(TRIPOD), *map(str, args)], capture_output=True, text=True, timeout=60)


def test_golden_check_with_an_interpreter_that_does_nothing_fails(tmp_path):
    r = tripod("golden", "check", tmp_path, tmp_path / "RESULTS.json", "--python", "/bin/true")
    assert r.returncode != 0 and "/bin/true exited 0 without writing" in r.stderr, r.stdout + r.stderr
    verdict = tmp_path / "verdict.json"
    r = tripod("golden", "check", tmp_path, tmp_path / "RESULTS.json", "--python", "/bin/true", "--json", verdict)
    assert r.returncode != 0 and f"/bin/true exited 0 without writing {verdict}" in r.stderr, r.stderr


def test_golden_check_exit_0_must_come_with_a_match(tmp_path):
    # a "python" that writes a DIFFERS verdict where --json points and exits 0
    fake = tmp_path / "fake-python"
    fake.write_text('#!/bin/sh\nwhile [ "$1" != "--json" ]; do shift; done\n'
                    'printf \'{"verdict": "differs"}\\n\' > "$2"\nexit 0\n')
    fake.chmod(0o755)
    r = tripod("golden", "check", tmp_path, tmp_path / "RESULTS.json", "--python", fake)
    assert r.returncode != 0 and "does not say match" in r.stderr, r.stdout + r.stderr


def test_report_with_an_interpreter_that_does_nothing_fails(tmp_path):
    r = tripod("report", tmp_path, "--python", "/bin/true")
    assert r.returncode != 0 and f"/bin/true exited 0 without writing {tmp_path / 'report.html'}" in r.stderr, r.stderr


def test_scale_fit_and_advise_with_an_interpreter_that_does_nothing_fail(tmp_path):
    (tmp_path / "runs.jsonl").write_text("")
    r = tripod("scale", "fit", tmp_path, "--python", "/bin/true")
    assert r.returncode != 0 and f"/bin/true exited 0 without writing {tmp_path / 'fit.json'}" in r.stderr, r.stderr
    advice = tmp_path / "advice.json"
    r = tripod("scale", "advise", "chinchilla", "--threshold", "0.01", "--python", "/bin/true", "--json", advice)
    assert r.returncode != 0 and f"/bin/true exited 0 without writing {advice}" in r.stderr, r.stderr


@pytest.mark.parametrize("command", [["golden", "check"], ["report"], ["scale", "fit"]])
def test_a_missing_interpreter_is_named(tmp_path, command):
    (tmp_path / "runs.jsonl").write_text("")
    args = [*command, tmp_path] + ([tmp_path / "RESULTS.json"] if command[0] == "golden" else [])
    r = tripod(*args, "--python", tmp_path / "no-such-python")
    assert r.returncode != 0 and "no-such-python" in r.stderr, r.stderr


def test_the_source_trees_module_runs_whatever_the_working_directory_holds(tmp_path):
    # `python -m` puts the working directory first on the path: started in a folder with a
    # `scaling/` of its own (a user's project), `tripod scale advise` ran that one.
    impostor = tmp_path / "scaling"
    impostor.mkdir()
    (impostor / "__init__.py").write_text("")
    (impostor / "advise.py").write_text("print('the working directory\'s scaling/advise.py')\n")
    advice = tmp_path / "advice.json"
    require_tripod()
    r = subprocess.run([str(TRIPOD), "scale", "advise", "chinchilla", "--threshold", "0.01", "--json", str(advice)],
                       capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert r.returncode == 0 and "working directory" not in r.stdout, r.stdout + r.stderr
    assert advice.exists()
