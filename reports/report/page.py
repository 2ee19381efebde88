"""The report's HTML: one self-contained file. Every figure is an <img> with an id and alt text whose
src is the PNG as a base64 data: URI; a Content-Security-Policy forbids anything else (a stray
external resource is blocked and shows as a console error, which the render check fails on).
An inline script fills id="render-check" after load with "images ok: N/N" (every image decoded,
naturalWidth > 0, and as many as the page declares in <body data-figures>)."""
import base64
import html
import time

from reports.report.sections import label_of, table_html

STYLE = """
body{font-family:sans-serif;margin:0 auto;max-width:1240px;padding:0 20px;color:#222;background:#fff}
h1{margin-bottom:0.2em} h2{border-bottom:1px solid #ccc;padding-bottom:0.2em;margin-top:1.6em}
table{border-collapse:collapse;margin:0.6em 0;font-size:0.85em} caption{text-align:left;font-weight:bold}
td,th{border:1px solid #ccc;padding:2px 8px;text-align:left} th{background:#f0f0f0}
.note{background:#fff6d8;border-left:4px solid #e0b000;padding:4px 10px;margin:0.4em 0;font-size:0.9em}
.figures{display:flex;flex-wrap:wrap;gap:16px;align-items:flex-start}
figure{margin:0;width:calc(50% - 8px)} figure.wide{width:100%}
figure img{max-width:100%;height:auto;display:block;border:1px solid #eee}
figcaption{font-size:0.8em;color:#555;max-width:600px}
#render-check{font-family:monospace} #render-check.ok{color:#070} #render-check.bad{color:#b00}
nav a{margin-right:1em}
"""

# Runs after load: every <img> must have decoded (a corrupt or missing PNG has naturalWidth 0).
CHECK_SCRIPT = """
window.addEventListener("load", function () {
  var images = Array.prototype.slice.call(document.images);
  var broken = images.filter(function (img) { return !(img.complete && img.naturalWidth > 0); });
  var expected = Number(document.body.getAttribute("data-figures"));
  var ok = broken.length === 0 && images.length === expected;
  var check = document.getElementById("render-check");
  check.textContent = (ok ? "images ok: " : "images FAILED: ") + (images.length - broken.length) + "/" + expected +
    (broken.length ? " (broken: " + broken.map(function (img) { return img.id; }).join(", ") + ")" : "");
  check.className = ok ? "ok" : "bad";
});
"""

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'"


# Figures at least this wide (PNG pixels) take a whole row; the others go two to a row.
WIDE_PX = 950


def png_width(png):
    """The width in a PNG's IHDR chunk (bytes 16-19, big-endian)."""
    return int.from_bytes(png[16:20], "big")


def figure_html(figure):
    data = base64.b64encode(figure.png).decode("ascii")
    title = html.escape(figure.title)
    wide = " class='wide'" if png_width(figure.png) >= WIDE_PX else ""
    return (f"<figure{wide}><img id='{html.escape(figure.id)}' alt='{title}' src='data:image/png;base64,{data}'>"
            f"<figcaption>{title}</figcaption></figure>")


def section_html(section):
    parts = [f"<section id='{section.id}'><h2>{html.escape(section.title)}</h2>"]
    parts += [f"<p class='note'>{html.escape(note)}</p>" for note in section.notes]
    parts += section.tables
    if section.figures:
        parts.append("<div class='figures'>" + "".join(figure_html(f) for f in section.figures) + "</div>")
    parts.append("</section>")
    return "\n".join(parts)


def inputs_html(results, root):
    rows = [(kind, label_of(path, root)) for kind, path in results.inputs()]
    parts = [table_html(["kind", "input"], rows, caption="Inputs found") if rows
             else "<p class='note'>No results found in this directory.</p>"]
    parts += [f"<p class='note'>{html.escape(note)}</p>" for note in results.notes]
    return "\n".join(parts)


def render_page(sections, results, root):
    """The whole page as a string."""
    n_figures = sum(len(s.figures) for s in sections)
    nav = " ".join(f"<a href='#{s.id}'>{html.escape(s.title)}</a>" for s in sections)
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        f"<meta http-equiv='Content-Security-Policy' content=\"{CSP}\">",
        f"<title>Tripod report: {html.escape(str(root))}</title><style>{STYLE}</style></head>",
        f"<body data-figures='{n_figures}'>",
        "<h1>Tripod report</h1>",
        f"<p>{html.escape(str(root))} &middot; {time.strftime('%Y-%m-%d %H:%M:%S')} &middot; {n_figures} figures</p>",
        "<p id='render-check'>pending: the page's images are checked after load</p>",
        f"<nav>{nav}</nav>",
        inputs_html(results, root),
    ]
    parts += [section_html(s) for s in sections]
    parts.append(f"<script>{CHECK_SCRIPT}</script></body></html>")
    return "\n".join(parts)
