"""`tripod report` end to end: a results directory made by `tripod bench --quick`, `tripod conform`
(2 ranks, a few layouts) and the quick scaling preset (run and fit), plus hand-made imported peers
(nccl-tests, Megatron-LM: reports/FORMATS.md section 3) and a golden-check result, becomes one
self-contained page holding every expected figure, which renders cleanly in headless Chromium to
a non-blank PNG of the expected size. And the render check can fail: a broken image, a console
error (console.error or an uncaught exception) and a blank page are each caught.

Chromium is required (ci/setup.sh installs it): without it these tests fail, they do not skip.
About 4 minutes on 2 cores, most of it the quick sweep (~150 s) and the bench, run once for the
module; under CTest the sweep is the fixture's, already trained (tripod_cli.quick_sweep)."""
import base64
import io
import json
import os
import re
import shutil
import subprocess
from html import escape

import pytest
from matplotlib import image as mpimg
from matplotlib.figure import Figure

from tripod_cli import MPI_ENV, TRIPOD, mpirun_command, quick_sweep, require_tripod

PYTHON = "/usr/bin/python3"  # Debian's, with matplotlib: what `tripod report` runs
CONFORM_LAYOUTS = ["tp1-pp1-dp1-z0-mb1", "tp1-pp1-dp2-z1-mb2", "tp2-pp1-dp1-z0-mb1", "tp1-pp2-dp1-z0-mb2-1f1b"]
SCALE_PLOTS = ("loss-vs-compute", "isoflop-curves", "optimal-allocation", "approach3-residuals")


def require_chromium():
    if not shutil.which("chromium"):
        pytest.fail("chromium is not installed: run ci/setup.sh (it installs Debian's chromium for the report's "
                    "render check)")


def run(cmd, timeout, env=None):
    result = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, env=env)
    assert result.returncode == 0, f"{cmd}\n{result.stdout}\n{result.stderr}"
    return result


def python_module(module, *args, timeout=120):
    return subprocess.run([PYTHON, "-m", module, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": os.environ.get("TRIPOD_SOURCE_DIR", os.getcwd())})


def imported_nccl_tests():
    """A hand-made nccl-tests import (kind "comm"): all_reduce and all_gather, 8 B to 4 MiB."""
    rows = []
    for collective, factor in (("all_reduce", 1.0), ("all_gather", 1.3)):
        for exponent in range(3, 23, 2):
            size = 2 ** exponent
            busbw = factor * 40.0 * size / (size + 2 ** 16)
            rows.append({"collective": collective, "size": size, "count": size // 4, "type": "float", "redop": "sum",
                         "root": -1, "in_place": False, "time_us": size / busbw / 1e3, "algbw": busbw / factor,
                         "busbw": busbw, "wrong": 0})
    return {"schema": "tripod-results", "version": 1, "kind": "comm",
            "source": {"tool": "nccl-tests", "file": "all_reduce_perf.log", "version": "2.13.8"},
            "comm": {"results": rows,
                     "summaries": [{"collective": "all_reduce", "avg_busbw": 20.0, "out_of_bounds": 0}]}}


def imported_megatron():
    """A hand-made Megatron-LM import (kind "train"): a falling loss, steps counted from 1."""
    steps = [{"step": s, "loss": 4.2 - 1.2 * (1 - 0.97 ** s), "lr": 1e-3, "grad_norm": 1.0, "step_seconds": 0.5,
              "tokens_per_second": 32768.0, "tflops_per_gpu": 120.0, "mfu": 0.38, "memory_gib": None}
             for s in range(1, 201, 10)]
    return {"schema": "tripod-results", "version": 1, "kind": "train",
            "source": {"tool": "megatron", "file": "train.log", "version": None}, "steps": steps}


def golden_check():
    """What `tripod golden check BUNDLE RESULTS --json OUT` writes, for a peer that matches."""
    steps = [{"step": s, "ref_loss": 6.3 - 0.2 * s, "loss": (6.3 - 0.2 * s) * (1 + 3e-7), "loss_rel_error": 3e-7,
              "grad_norm": 2.0 / s, "ref_grad_norm": 2.0 / s, "grad_norm_rel_error": 1e-6 * s, "ok": True}
             for s in range(1, 9)]
    tensors = [{"step": step, "name": name, "max_abs_error": 2e-7, "allowed": 1e-5, "ok": True}
               for step in (1, 8) for name in ("wte.weight", "h.0.attn.c_attn.weight")]
    return {"bundle": "runs/golden/bundle", "framework": "pytorch 1.13.1 (single process)", "precision": "fp32",
            "verdict": "match", "steps": steps, "tensors": tensors}


@pytest.fixture(scope="module")
def results_dir(tmp_path_factory):
    """One results directory for the module: the quick bench, a small conform, the quick sweep
    (run and fitted), imported peers and a golden check (the slow part)."""
    require_tripod()
    require_chromium()
    out = tmp_path_factory.mktemp("results")
    # `tripod bench` launches mpirun itself and refuses to run inside one
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_COMM_WORLD", "PMIX_"))}
    run([TRIPOD, "bench", "--quick", "--out", out / "bench"], timeout=300, env=env)
    run(mpirun_command(2, "conform", "--layouts", *CONFORM_LAYOUTS, "--json", out / "conform.json", timeout=120),
        timeout=150, env=MPI_ENV)
    quick_sweep(out / "scale")
    run([TRIPOD, "scale", "fit", out / "scale", "--bootstrap", "0", "--small-grid"], timeout=300)
    (out / "imported").mkdir()
    (out / "imported" / "nccl.json").write_text(json.dumps(imported_nccl_tests()))
    (out / "golden").mkdir()
    (out / "golden" / "pytorch-fp32.json").write_text(json.dumps(golden_check()))
    return out


@pytest.fixture(scope="module")
def report(results_dir, tmp_path_factory):
    """`tripod report DIR --extra ... --check`: the page, its screenshot and the command's output.
    The extras come from elsewhere: a Megatron-LM import and one quick-sweep run's real metrics.jsonl."""
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    (elsewhere / "megatron.json").write_text(json.dumps(imported_megatron()))
    metrics = sorted((results_dir / "scale" / "runs").glob("*/metrics.jsonl"))[-1]
    page = results_dir / "report.html"
    result = run([TRIPOD, "report", results_dir, "--out", page, "--extra", elsewhere / "megatron.json", metrics,
                  "--check"], timeout=180)
    return page, results_dir / "report.png", result.stdout


def expected_figures():
    ids = ["fig-bench-busbw", "fig-bench-gemm", "fig-bench-gemm-layers", "fig-bench-mfu", "fig-bench-bubble",
           "fig-conform-conform-json", "fig-timeline-bench-bench-json-pipeline-timeline", "fig-train-loss",
           "fig-golden-golden-pytorch-fp32-json"]
    return ids + [f"fig-scale-scale-{name}" for name in SCALE_PLOTS]


def test_report_holds_every_figure_and_renders_in_chromium(report):
    page, png, stdout = report
    assert "render check ok" in stdout, stdout
    html = page.read_text()
    ids = re.findall(r"<img id='([^']+)'", html)
    assert set(expected_figures()) <= set(ids), sorted(set(expected_figures()) - set(ids))
    assert len(ids) == len(set(ids))
    # self-contained: every image inline, nothing fetched from elsewhere
    assert html.count("src='data:image/png;base64,") == len(ids)
    assert not re.search(r"(src|href)=['\"](https?:|//|file:)", html)
    # the imported peers are drawn with Tripod: nccl-tests on the busbw panels, Megatron-LM on the loss curves
    assert "dashed: imported" in html and "nccl-tests (nccl)" in html and "megatron (megatron)" in html
    assert "Tripod (scale/runs/" in html  # the real Tripod metrics.jsonl, labelled by its run
    assert ">match<" in html  # the golden verdict table
    assert "No imported" not in html and "No golden" not in html  # no section fell back to a note
    assert png.read_bytes().startswith(b"\x89PNG")


def test_rendered_png_is_full_size_and_every_figure_is_visible(report, tmp_path):
    page, _, _ = report
    findings = tmp_path / "findings.json"
    result = python_module("reports.report.render_check", page, "--png", tmp_path / "shot.png", "--json", findings)
    assert result.returncode == 0, result.stdout + result.stderr
    found = json.loads(findings.read_text())
    width, height = found["size"]
    assert found["ok"] and not found["failures"] and not found["console_errors"]
    assert found["render_check"] == f"images ok: {len(expected_figures())}/{len(expected_figures())}"
    # the whole page in one screenshot, at the window's width
    assert width == 1280 and height == found["page_height"] and 4000 < height < 16000, (width, height)
    assert found["background_fraction"] < 0.9  # figures, not an empty page
    images = {img["id"]: img for img in found["images"]}
    for fig_id in expected_figures():
        img = images[fig_id]
        assert img["naturalWidth"] > 300 and img["width"] > 300 and img["y"] + img["height"] <= height, img
    assert mpimg.imread(tmp_path / "shot.png").shape[:2] == (height, width)


def test_missing_sections_are_noted_not_fatal(tmp_path):
    require_chromium()
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "unrelated.json").write_text('{"hello": 1}')
    result = python_module("reports.report", tmp_path / "results")
    assert result.returncode == 0, result.stderr
    html = (tmp_path / "results" / "report.html").read_text()
    for note in ("No bench.json found", "No conform JSON found", "No training metrics", "No sweep directory",
                 "No golden-check results"):
        assert note in html, note
    result = python_module("reports.report.render_check", tmp_path / "results" / "report.html")
    assert result.returncode == 0, result.stdout + result.stderr


def tripod_report(*args):
    """`tripod report ARGS`: (exit status, stderr, stdout)."""
    require_tripod()
    result = subprocess.run([str(TRIPOD), "report", *map(str, args)], capture_output=True, text=True, timeout=120)
    return result.returncode, result.stderr, result.stdout


def write_metrics(path, steps=6):
    """A metrics.jsonl as `tripod train` writes it: a start event, then one record per step."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"event": "start", "config": {"train": {"steps": steps}}})]
    lines += [json.dumps({"step": s, "loss": 7.0 - 0.1 * s, "tokens": 1024 * (s + 1), "tokens_per_second": 9000.0,
                          "step_seconds": 0.1, "mfu": 0.27}) for s in range(steps)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_cut_off_last_metrics_line_is_skipped_with_a_warning(tmp_path):
    """What a crashed run leaves: the steps before the torn line are drawn, the line is named."""
    metrics = write_metrics(tmp_path / "results" / "metrics.jsonl")
    with metrics.open("a") as f:
        f.write('{"grad_norm":0.66,"loss":5.57,"lr":0.0003,"mf')
    status, stderr, stdout = tripod_report(tmp_path / "results")
    assert status == 0, stderr
    warning = f"{metrics}:8: the last line is cut off"
    assert warning in stderr and "Traceback" not in stderr, stderr
    assert re.search(r"Training: Tripod vs peers +1 figures", stdout), stdout
    html = (tmp_path / "results" / "report.html").read_text()
    assert "id='fig-train-loss'" in html and warning in html


def test_damaged_inputs_are_named_on_stderr_and_the_page(tmp_path):
    """Garbage in a walked input is not fatal (every section is optional), but never silent."""
    results = tmp_path / "results"
    metrics = write_metrics(results / "train" / "metrics.jsonl")
    lines = metrics.read_text().splitlines()
    metrics.write_text("\n".join(lines[:3] + ["garbage"] + lines[3:]) + "\n")
    (results / "conform.json").write_text("garbage")
    (results / "sweep").mkdir()
    (results / "sweep" / "runs.jsonl").write_text('garbage\n{"N": 1e5, "D": 2e6, "C": 1.2e12, "loss": 3.1}\n')
    (results / "sweep" / "fit.json").write_text("[]")
    status, stderr, _ = tripod_report(results)
    assert status == 0 and "Traceback" not in stderr, stderr
    html = (results / "report.html").read_text()
    for named in (f"{metrics}:4: not a JSON object; the file is skipped", f"{results / 'conform.json'}: not readable",
                  f"{results / 'sweep' / 'runs.jsonl'}:1: not a JSON object", f"{results / 'sweep' / 'fit.json'}: not a"):
        assert f"warning: {named}" in stderr, (named, stderr)
        assert named in html, named


def train_lines(results, root):
    """(label, steps, losses) of every line of the loss figure, and the run table's rows."""
    from reports.report.collect import collect
    from reports.report.figures_train import loss_figure, runs_of, train_section
    collected = collect(root)
    lines = [(line.get_label(), list(line.get_xdata()), list(line.get_ydata()))
             for line in loss_figure(runs_of(collected, root)).axes[0].get_lines()]
    rows = re.findall(r"<tr><td>(.*?)</td></tr>", train_section(collected, root).tables[0])
    return lines, [row.split("</td><td>") for row in rows]


def test_steps_a_rollback_re_ran_are_drawn_once_with_their_last_record(tmp_path):
    """A rollback re-runs steps in the same metrics.jsonl: x was [1, 2, 3, 4, 4, 5, 5, 6] and the table
    said "steps logged 8" for 6 steps. The retrained record counts, as in `tripod import`."""
    metrics = write_metrics(tmp_path / "results" / "run" / "metrics.jsonl", steps=5)
    with metrics.open("a") as f:
        f.write(json.dumps({"event": "rollback", "step": 4, "to_step": 2}) + "\n")
        for step in (3, 4, 5):
            f.write(json.dumps({"step": step, "loss": 5.0 - 0.1 * step, "tokens_per_second": 9000.0}) + "\n")
    lines, table = train_lines(tmp_path, tmp_path / "results")
    assert [(steps, losses) for _, steps, losses in lines] == [([1, 2, 3, 4, 5, 6], [7.0, 6.9, 6.8, 4.7, 4.6, 4.5])]
    assert table[0][1:4] == ["6", "6", "4.5000"]  # steps logged, last step, last loss


def test_an_imported_runs_validation_loss_is_drawn(tmp_path):
    """The importers keep a validation loss under extra.val_loss (FORMATS.md section 3); the figure
    read only a val_loss key, so no imported validation loss was ever drawn."""
    document = imported_megatron()
    document["steps"][3]["extra"] = {"val_loss": 3.5}
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "megatron.json").write_text(json.dumps(document))
    lines, _ = train_lines(tmp_path, tmp_path / "results")
    assert ("megatron (megatron), validation", [31], [3.5]) in lines, lines


def report_module(*args):
    """The report as `tripod report ARGS` runs it, from this source tree: (exit status, stderr, stdout)."""
    result = python_module("reports.report", *args)
    return result.returncode, result.stderr, result.stdout


@pytest.mark.parametrize("damage, problem", [
    (lambda d: [row.pop("step") for row in d["steps"]], "steps[0] has no whole step number (step=None)"),
    (lambda d: d.update(steps={"1": 4.2}), "'steps' is not a list (got dict)"),
    (lambda d: d["steps"][2].update(loss="4.1"), "steps[2].loss is not a number (got '4.1')"),
    (lambda d: d.update(kind="comm"), "'comm' is not an object with a 'results' list"),
    (lambda d: d.update(kind="comm", comm={"results": [{"collective": "all_reduce", "size": 8}]}),
     "comm.results[0] has no busbw"),
    (lambda d: d.update(kind="loss"), "kind 'loss' is neither 'comm' nor 'train'"),
])
def test_a_damaged_imported_document_is_a_note_naming_it(tmp_path, damage, problem):
    """README: a damaged input is a note naming the file. A train document whose steps had no "step"
    stopped the whole report with a bare KeyError; named with --extra, it is an error."""
    results = tmp_path / "results"
    write_metrics(results / "metrics.jsonl")
    document = imported_megatron()
    damage(document)
    bad = tmp_path / "peers" / "bad.json"
    bad.parent.mkdir()
    bad.write_text(json.dumps(document))
    shutil.copy(bad, results / "bad.json")
    status, stderr, _ = report_module(results)
    assert status == 0 and "Traceback" not in stderr, stderr
    named = f"{results / 'bad.json'}: not a usable tripod-results document: {problem}"
    assert f"warning: {named}" in stderr, stderr
    assert escape(named) in (results / "report.html").read_text()
    status, stderr, _ = report_module(results, "--out", tmp_path / "extra.html", "--extra", bad)
    assert status == 1 and f"tripod report: --extra {bad}: not a usable tripod-results document: {problem}" \
        in stderr, stderr


@pytest.mark.parametrize("content", [{}, {"unknown.json": '{"hello": 1}'}])
def test_an_extra_folder_of_nothing_usable_is_an_error(tmp_path, content):
    """README: an --extra path "that is missing or not a usable result is an error"; a folder holding
    nothing the report knows gave a page without it and exit status 0."""
    write_metrics(tmp_path / "results" / "metrics.jsonl")
    extra = tmp_path / "peers"
    extra.mkdir()
    for name, text in content.items():
        (extra / name).write_text(text)
    status, stderr, _ = report_module(tmp_path / "results", "--extra", extra)
    assert status == 1, stderr
    assert f"tripod report: --extra {extra}: no result the report knows under it" in stderr, stderr
    assert not (tmp_path / "results" / "report.html").exists()
    (extra / "megatron.json").write_text(json.dumps(imported_megatron()))
    status, stderr, _ = report_module(tmp_path / "results", "--extra", extra)
    assert status == 0, stderr


@pytest.mark.parametrize("entry, message", [
    ({"value": "NaN", "ci": None}, "'E' has no number as its value (got 'NaN')"),
    ({"value": [1.7], "ci": None}, "'E' has no number as its value (got [1.7])"),
    ({"value": 1.7, "ci": 5}, "'E' has no [lo, hi] as its ci (got 5)"),
    ({"value": 1.7, "ci": [1.6]}, "'E' has no [lo, hi] as its ci (got [1.6])"),
    ("1.7", "'E' is not an estimate {value, ci} (got '1.7')")])
def test_a_damaged_fit_estimate_is_named_not_a_traceback(tmp_path, entry, message):
    """A fit.json whose fitted parameter cannot be shown is, like any walked input, a warning naming
    the file and the key: the page is still written, without that fit's row."""
    results = tmp_path / "results"
    (results / "sweep").mkdir(parents=True)
    fit = results / "sweep" / "fit.json"
    fit.write_text(json.dumps({"n_runs": 9, "E": entry, "alpha": {"value": 0.34, "ci": [0.3, 0.4]}}))
    status, stderr, _ = tripod_report(results)
    assert status == 0 and "Traceback" not in stderr, stderr
    assert f"warning: {fit}: {message}; the fit is left out of the table" in stderr, stderr
    assert escape(f"{fit}: {message}") in (results / "report.html").read_text()


@pytest.mark.parametrize("extra", ["absent.json", "garbage.json", "unknown.json", "notes.txt"])
def test_an_unusable_extra_is_an_error_naming_it(tmp_path, extra):
    write_metrics(tmp_path / "results" / "metrics.jsonl")
    (tmp_path / "garbage.json").write_text("garbage")
    (tmp_path / "unknown.json").write_text('{"hello": 1}')
    (tmp_path / "notes.txt").write_text("hello")
    status, stderr, _ = tripod_report(tmp_path / "results", "--extra", tmp_path / extra)
    assert status == 1, stderr
    assert f"tripod report: --extra {tmp_path / extra}: " in stderr and "Traceback" not in stderr, stderr
    assert not (tmp_path / "results" / "report.html").exists()


def test_out_in_a_missing_folder_is_an_error(tmp_path):
    # The folder was made, unlike every other --out/--json of tripod (README: a results file's
    # folder must exist).
    write_metrics(tmp_path / "results" / "metrics.jsonl")
    status, stderr, _ = tripod_report(tmp_path / "results", "--out", tmp_path / "nope" / "r.html")
    assert status == 1, stderr
    assert f"tripod report: --out {tmp_path / 'nope' / 'r.html'}: the folder {tmp_path / 'nope'} does not exist" \
        in stderr, stderr
    assert not (tmp_path / "nope").exists()


def test_out_naming_a_directory_is_an_error(tmp_path):
    write_metrics(tmp_path / "results" / "metrics.jsonl")
    (tmp_path / "somedir").mkdir()
    status, stderr, _ = tripod_report(tmp_path / "results", "--out", tmp_path / "somedir")
    assert status == 1, stderr
    assert f"tripod report: --out {tmp_path / 'somedir'} is a directory" in stderr, stderr
    assert "Traceback" not in stderr, stderr


def a_figure_png():
    fig = Figure(figsize=(4, 3))
    fig.add_subplot().plot([1, 3, 2, 4])
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    return base64.b64encode(buffer.getvalue()).decode()


def check_page(tmp_path, body):
    """The render check of a hand-written page: (exit status, its messages)."""
    require_chromium()
    page = tmp_path / "page.html"
    page.write_text(f"<!doctype html><html><head><meta charset='utf-8'><title>t</title></head>"
                    f"<body>{body}</body></html>")
    result = python_module("reports.report.render_check", page, timeout=120)
    return result.returncode, result.stdout + result.stderr


def good_content():
    return f"<h1>A page</h1><p>Some text.</p><img id='good' alt='a plot' src='data:image/png;base64,{a_figure_png()}'>"


def test_checker_passes_a_good_page(tmp_path):
    status, output = check_page(tmp_path, good_content())
    assert status == 0, output


@pytest.mark.parametrize("damage", ["truncated", "corrupt"])
def test_checker_fails_on_a_broken_image(tmp_path, damage):
    png = a_figure_png()
    # truncated: Chromium draws what there is and calls it decoded; corrupt: it does not decode at all
    broken = png[:len(png) // 2] if damage == "truncated" else png[:100] + "A" * 40
    status, output = check_page(tmp_path,
                                good_content() + f"<img id='broken' alt='x' src='data:image/png;base64,{broken}'>")
    assert status == 1 and "broken image: broken" in output, output
    assert "broken image: good" not in output


def test_checker_fails_on_a_missing_image_file(tmp_path):
    status, output = check_page(tmp_path, good_content() + "<img id='absent' alt='x' src='absent.png'>")
    assert status == 1 and "broken image: absent" in output, output
    assert "ERR_FILE_NOT_FOUND" in output, output  # the failed load, from the browser's error log


@pytest.mark.parametrize("script, message", [("console.error('deliberate error')", "console.error: deliberate error"),
                                             ("throw new Error('deliberate throw')", "deliberate throw")])
def test_checker_fails_on_a_console_error(tmp_path, script, message):
    status, output = check_page(tmp_path, good_content() + f"<script>console.log('fine'); {script}</script>")
    assert status == 1 and message in output, output
    assert "broken image" not in output and "blank" not in output  # the console error alone fails it


def test_checker_fails_on_a_blank_page(tmp_path):
    status, output = check_page(tmp_path, "")
    assert status == 1 and "blank render" in output, output


def test_checker_without_chromium_says_to_run_setup(tmp_path):
    (tmp_path / "p.html").write_text("<p>x</p>")
    result = python_module("reports.report.render_check", tmp_path / "p.html", "--chromium", tmp_path / "no-chromium")
    assert result.returncode == 2 and "run ci/setup.sh" in result.stderr


