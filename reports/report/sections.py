"""What the figures_*.py modules hand to the page: sections of figures (PNG bytes), tables and
notes. Figures are drawn with matplotlib's Agg canvas and never touch the disk."""
import html
import io
from dataclasses import dataclass, field

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# 100 dpi: a 7 x 4.5 in figure is 700 x 450 px, two side by side fit a 1280 px window.
DPI = 100


@dataclass
class Figure:
    id: str        # the <img> id, e.g. "fig-bench-busbw": stable, the tests and the checker name it
    title: str     # the caption, and the <img> alt text
    png: bytes


@dataclass
class Section:
    id: str
    title: str
    figures: list = field(default_factory=list)
    tables: list = field(default_factory=list)  # HTML fragments (table_html)
    notes: list = field(default_factory=list)   # plain text, shown in a note box

    def add(self, fig_id, title, fig):
        """Appends a matplotlib figure (closing it); a None figure is skipped."""
        if fig is not None:
            self.figures.append(Figure(fig_id, title, png_of(fig)))

    def empty(self):
        return not (self.figures or self.tables)


def png_of(fig):
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI)
    plt.close(fig)
    return buffer.getvalue()


def is_png(data):
    return data.startswith(b"\x89PNG\r\n\x1a\n")


def table_html(headers, rows, caption=None):
    """A plain HTML table; cells are escaped text (numbers formatted by the caller)."""
    parts = ["<table>"]
    if caption:
        parts.append(f"<caption>{html.escape(caption)}</caption>")
    parts.append("<tr>" + "".join(f"<th>{html.escape(str(h))}</th>" for h in headers) + "</tr>")
    for row in rows:
        parts.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>")
    parts.append("</table>")
    return "".join(parts)


def slug(text):
    """A piece of an HTML id from a path or a name: letters, digits and dashes."""
    out = "".join(c if c.isalnum() else "-" for c in str(text).lower())
    return "-".join(filter(None, out.split("-"))) or "x"


def label_of(path, root):
    """A short label for an input file: its path relative to the results directory when inside it."""
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def fmt(x, spec=".3g"):
    return "-" if x is None else format(x, spec)
