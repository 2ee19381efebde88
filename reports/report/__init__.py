"""`tripod report DIR`: one self-contained HTML page (every figure a PNG embedded as a data: URI)
from a results directory. Run as /usr/bin/python3 -m reports.report DIR [--out FILE.html]
[--extra PATH ...]; check it in headless Chromium with -m reports.report.render_check FILE.html.

What it reads: DIR and every --extra path (a file or a directory) are walked, and each input is
recognised by its content, not its name, so any layout of folders works. Every section is
optional: one whose inputs are absent is shown as a visible note, never an error.

  bench        bench.json of `tripod bench` (normally DIR/bench/bench.json); the other JSON files
               beside it (comm.json, pipeline_timeline.json, ...) are its parts and are skipped
  conform      the --json of `tripod conform` (a "layouts" list with loss_rel_error, and
               "operator_checks"), e.g. DIR/conform.json
  scaling      a sweep directory: any folder holding fit.json and/or runs.jsonl (`tripod scale run`
               / `scale fit`); its PNGs (plots/*.png, or *.png beside fit.json) are embedded as they
               are; with none, loss against compute is redrawn from runs.jsonl. A sweep's own run
               folders (metrics.jsonl of every run) are not walked.
  training     Tripod's metrics.jsonl (`tripod train`, train.metrics in the config)
  imported     any *.json with "schema": "tripod-results" (reports/FORMATS.md section 3, written by
               `tripod import`, e.g. DIR/imported/nccl.json): kind "comm" is drawn on the busbw
               panels, kind "train" on the loss curves and the MFU bars; one without what its kind
               needs (steps with whole step numbers and numbers or nulls; comm rows with collective,
               size and busbw) is a note naming it
  golden       the --json of `tripod golden check` (a "verdict" and "steps"), e.g. DIR/golden/*.json
  timelines    pipeline timelines (`tripod bench pipeline --trace`, `tripod train --pipeline-trace`):
               JSON with "schedule" and per-rank "ranks" events, and bench.json's pipeline_timeline

The page's id="render-check" element is filled in by an inline script once the page has loaded:
"images ok: N/N" when every <img> decoded, which render_check.py reads back from the browser.
"""
