"""One self-contained HTML page for a lab report: inline style, tables, figures as data URIs; it opens offline."""

from __future__ import annotations

import base64
import html
import io
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; color: #222; max-width: 1200px; margin: 1.5em auto; padding: 0 1em; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.8em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: .6em 0; font-variant-numeric: tabular-nums; }
th, td { text-align: left; padding: .2em .8em .2em 0; border-bottom: 1px solid #eee; vertical-align: top; }
th { color: #555; } td.error { color: #b71c1c; white-space: pre-wrap; } .quiet { color: #777; }
figure { margin: 1em 0; } figure img { max-width: 100%; } figcaption { color: #555; font-size: .9em; }
pre { background: #f6f7f9; padding: .8em; overflow-x: auto; font-size: .85em; }
"""


def page(title: str, parts: Iterable[str]) -> str:
    """The whole document: `title` as its heading, then `parts` (HTML fragments, as made below)."""
    body = "\n".join(parts)
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>{html.escape(title)}</title>\n'
            f"<style>{STYLE}</style>\n</head>\n<body>\n<h1>{html.escape(title)}</h1>\n{body}\n</body>\n</html>\n")


def heading(text: str) -> str:
    return f"<h2>{html.escape(text)}</h2>"


def paragraph(text: str, quiet: bool = False) -> str:
    return f'<p{" class=quiet" if quiet else ""}>{html.escape(text)}</p>'


def cell(value: Any, digits: int = 3) -> str:
    """A value as table text: floats to `digits` decimals (trailing zeros kept), none as `-`."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, default=str)
    return str(value)


def table(header: Sequence[str], rows: Iterable[Sequence[Any]], error_column: str | None = None) -> str:
    """A table of `rows` (values through `cell`, escaped); cells of `error_column` are marked as errors."""
    marked = header.index(error_column) if error_column in header else None
    head = "".join(f"<th>{html.escape(name)}</th>" for name in header)
    lines = []
    for row in rows:
        cells = [f'<td{" class=error" if i == marked and value not in (None, "-") else ""}>{html.escape(cell(value))}'
                 "</td>" for i, value in enumerate(row)]
        lines.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>\n" + "\n".join(lines) + "\n</tbody></table>"


def key_values(mapping: Mapping[str, Any]) -> str:
    """A two-column table of a mapping (nested values as JSON)."""
    return table(("key", "value"), mapping.items())


def preformatted(text: str) -> str:
    return f"<pre>{html.escape(text)}</pre>"


def png_figure(png: bytes, caption: str) -> str:
    """An image embedded as a data URI, with its caption."""
    encoded = base64.b64encode(png).decode("ascii")
    return (f'<figure><img alt="{html.escape(caption)}" src="data:image/png;base64,{encoded}">'
            f"<figcaption>{html.escape(caption)}</figcaption></figure>")


def matplotlib_figure(figure: Figure, caption: str) -> str:
    """A matplotlib figure drawn to PNG and embedded."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110)
    return png_figure(buffer.getvalue(), caption)
