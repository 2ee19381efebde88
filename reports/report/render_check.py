"""Renders an HTML page (the report) in headless Chromium and fails on what a reader would see
broken: an image that did not decode (in the browser; an inline PNG's bytes are checked whole
too), a console error (console.error, an uncaught exception, a failed or blocked load), a blank
render, or a screenshot of unexpected size.

Usage: /usr/bin/python3 -m reports.report.render_check PAGE.html [--png OUT.png] [--json OUT.json]
       [--width 1280] [--max-height 16000] [--chromium PATH] [--timeout 60]

The screenshot is the whole page at --width pixels (the viewport is resized to the page's height,
up to --max-height), so every figure is in it: each <img>'s box in the screenshot must show more
than one colour, as must the screenshot as a whole. Where the page has an id="render-check"
element (the report fills it in after load) its text must start with "images ok". How Chromium
is driven, and why the DevTools pipe: chromium_cdp.py. Exit status: 0 ok, 1 a check failed, 2 no
chromium (ci/setup.sh installs Debian's)."""
import argparse
import base64
import io
import json
import sys
import time
from pathlib import Path

import numpy as np
from matplotlib import image as mpimg

from reports.report.chromium_cdp import Browser, BrowserError, find_chromium

# A render is blank when one colour covers more than this share of the screenshot: a page showing
# nothing but its background (the report is ~60-85% background; one short line of text in a
# 1280 x 900 window is 99.91%, ~1000 pixels of ink, and still counts as rendered).
BLANK_PAGE_FRACTION = 0.9995
# A figure's box is blank when one colour covers more than this share of it (a sparse line plot
# is still well under 97% white: axes, ticks, labels and lines).
BLANK_FIGURE_FRACTION = 0.995
# The first viewport's height, before it is resized to the page's.
START_HEIGHT = 900

PNG_URI = "data:image/png;base64,"
IMAGES_JS = """var PNG_URI = '""" + PNG_URI + """';
Array.prototype.map.call(document.images, function (img) {
  var box = img.getBoundingClientRect();
  return {id: img.id, alt: img.alt, complete: img.complete, naturalWidth: img.naturalWidth,
          naturalHeight: img.naturalHeight, x: box.left + window.scrollX, y: box.top + window.scrollY,
          width: box.width, height: box.height, dataPng: img.src.indexOf(PNG_URI) === 0 ? img.src : null};
})"""
RENDER_CHECK_JS = ("(function () { var e = document.getElementById('render-check'); "
                   "return e ? e.textContent : null; })()")
HEIGHT_JS = "Math.ceil(Math.max(document.documentElement.scrollHeight, document.body ? document.body.scrollHeight : 0))"
DECLARED_JS = "document.body && document.body.getAttribute('data-figures')"


def decode_png(data):
    """The screenshot as uint8 [height, width, 3]."""
    pixels = mpimg.imread(io.BytesIO(data), format="png")
    if pixels.dtype != np.uint8:
        pixels = np.round(pixels * 255).astype(np.uint8)
    return pixels[..., :3]


def dominant_fraction(pixels):
    """The share of pixels having the most common colour."""
    if pixels.size == 0:
        return 1.0
    flat = pixels.reshape(-1, 3).astype(np.uint32)
    keys = (flat[:, 0] << 16) | (flat[:, 1] << 8) | flat[:, 2]
    return np.bincount(np.unique(keys, return_inverse=True)[1]).max() / len(keys)


def render(page, chromium, width, max_height, timeout):
    """Loads the page; returns what the checks need (screenshot bytes, images, console errors...)."""
    with Browser(chromium, width, START_HEIGHT, timeout) as browser:
        session = browser.open_page(page.resolve().as_uri(), width, START_HEIGHT)
        deadline = time.monotonic() + 10
        check_text = browser.evaluate(session, RENDER_CHECK_JS)
        while check_text is not None and check_text.startswith("pending") and time.monotonic() < deadline:
            time.sleep(0.1)
            check_text = browser.evaluate(session, RENDER_CHECK_JS)
        page_height = browser.evaluate(session, HEIGHT_JS) or START_HEIGHT
        shot_height = max(1, min(page_height, max_height))
        browser.resize(session, width, shot_height)
        browser.evaluate(session, "new Promise(function (done) { requestAnimationFrame(function () { done(1); }); })")
        images = browser.evaluate(session, IMAGES_JS)
        declared = browser.evaluate(session, DECLARED_JS)
        png = browser.screenshot(session)
        return {"png": png, "page_height": page_height, "expected_size": [width, shot_height], "images": images,
                "declared_figures": None if declared is None else int(declared), "render_check": check_text,
                "console_errors": browser.console_errors()}


def png_problem(uri, natural_size):
    """Why an inline PNG is broken, or None. Chromium shows a truncated PNG as far as it goes and
    reports it decoded (naturalWidth from the header), so the bytes are checked here too."""
    try:
        data = base64.b64decode(uri[len(PNG_URI):], validate=True)
    except ValueError as e:
        return f"its base64 does not decode ({e})"
    if not data.rstrip(b"\0").endswith(b"IEND\xaeB`\x82"):
        return "its PNG is truncated (no IEND chunk)"
    try:
        shape = mpimg.imread(io.BytesIO(data), format="png").shape
    except (ValueError, SyntaxError, OSError) as e:
        return f"its PNG does not decode ({e})"
    if (shape[1], shape[0]) != natural_size:
        return f"its PNG is {shape[1]}x{shape[0]} but the browser decoded {natural_size[0]}x{natural_size[1]}"
    return None


def find_failures(rendered, pixels):
    failures = list(rendered["console_errors"])
    width, height = rendered["expected_size"]
    if pixels.shape[:2] != (height, width):
        failures.append(f"screenshot is {pixels.shape[1]}x{pixels.shape[0]}, expected {width}x{height}")
    background = dominant_fraction(pixels)
    if background > BLANK_PAGE_FRACTION:
        failures.append(f"blank render: one colour covers {100 * background:.1f}% of the screenshot")
    text = rendered["render_check"]
    if text is not None and not text.startswith("images ok"):
        failures.append(f"the page's render check says: {text}")
    images = rendered["images"]
    declared = rendered["declared_figures"]
    if declared is not None and declared != len(images):
        failures.append(f"the page declares {declared} figures but holds {len(images)} images")
    for img in images:
        name = img["id"] or img["alt"] or "an image without id"
        if not (img["complete"] and img["naturalWidth"] > 0):
            failures.append(f"broken image: {name} did not decode")
            continue
        problem = img["dataPng"] and png_problem(img["dataPng"], (img["naturalWidth"], img["naturalHeight"]))
        if problem:
            failures.append(f"broken image: {name}: {problem}")
            continue
        x0, y0 = int(img["x"]), int(img["y"])
        x1, y1 = int(img["x"] + img["width"]), int(img["y"] + img["height"])
        if img["width"] < 2 or img["height"] < 2:
            failures.append(f"image {name} is not displayed ({img['width']:.0f}x{img['height']:.0f} px)")
        elif y1 > pixels.shape[0] or x1 > pixels.shape[1]:
            failures.append(f"image {name} lies outside the screenshot (the page is taller than --max-height?)")
        elif dominant_fraction(pixels[y0:y1, x0:x1]) > BLANK_FIGURE_FRACTION:
            failures.append(f"image {name} renders blank")
    return failures, background


def main(argv=None):
    parser = argparse.ArgumentParser(prog="render_check", description=__doc__.splitlines()[0])
    parser.add_argument("page", type=Path)
    parser.add_argument("--png", type=Path, help="where the screenshot goes (default: PAGE with .png)")
    parser.add_argument("--json", type=Path, help="also write the findings as JSON here")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--max-height", type=int, default=16000)
    parser.add_argument("--chromium", help="the browser (default: $TRIPOD_CHROMIUM, chromium on PATH)")
    parser.add_argument("--timeout", type=float, default=60, help="seconds to wait for any browser reply")
    args = parser.parse_args(argv)
    chromium = find_chromium(args.chromium)
    if not chromium:
        print("render check: chromium not found: run ci/setup.sh (it installs Debian's chromium package)",
              file=sys.stderr)
        return 2
    if not args.page.is_file():
        print(f"render check: {args.page} does not exist", file=sys.stderr)
        return 1
    started = time.monotonic()
    try:
        rendered = render(args.page, chromium, args.width, args.max_height, args.timeout)
    except BrowserError as e:
        print(f"render check FAILED: {args.page}: chromium: {e}", file=sys.stderr)
        return 1
    png_path = args.png or args.page.with_suffix(".png")
    png_path.write_bytes(rendered["png"])
    pixels = decode_png(rendered["png"])
    failures, background = find_failures(rendered, pixels)
    if args.json:
        findings = {key: value for key, value in rendered.items() if key != "png"}
        findings["images"] = [{k: v for k, v in img.items() if k != "dataPng"} for img in rendered["images"]]
        args.json.write_text(json.dumps({"page": str(args.page), "png": str(png_path), "ok": not failures,
                                         "failures": failures, "size": [pixels.shape[1], pixels.shape[0]],
                                         "background_fraction": background, **findings}, indent=1))
    good = sum(1 for img in rendered["images"] if img["naturalWidth"] > 0)
    summary = (f"{good}/{len(rendered['images'])} images decoded, {len(rendered['console_errors'])} console errors, "
               f"screenshot {pixels.shape[1]}x{pixels.shape[0]} -> {png_path} ({100 * background:.0f}% background), "
               f"{time.monotonic() - started:.1f} s")
    if failures:
        print(f"render check FAILED: {args.page}: {summary}", file=sys.stderr)
        for failure in failures:
            print(f"  - {failure}", file=sys.stderr)
        return 1
    print(f"render check ok: {args.page}: {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
