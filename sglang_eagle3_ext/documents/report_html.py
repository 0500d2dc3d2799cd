"""The report page's HTML: one self-contained document (inline CSS, pictures as base64 data URIs,
no script, no external asset), so the file can be mailed or attached and opened anywhere.

Every text that came from a file (labels, notes, paths) is escaped: a label is input.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Iterable, Sequence
from typing import Any

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 2em auto;
       max-width: 1200px; padding: 0 1em; color: #222; line-height: 1.4; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; } h2 { font-size: 1.2em; margin-top: 2em;
     border-bottom: 1px solid #ddd; padding-bottom: 0.2em; }
p.sub { color: #666; margin-top: 0; } p.note { color: #555; font-size: 0.9em; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; white-space: nowrap; }
th { background: #f3f3f3; } td.l, th.l { text-align: left; }
tr.base td { background: #f7f7f7; font-style: italic; } tr.best td { font-weight: bold; }
caption { text-align: left; color: #555; padding-bottom: 0.3em; }
figure { margin: 1em 0; } figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { color: #555; font-size: 0.85em; }
dl { display: grid; grid-template-columns: max-content auto; gap: 0.15em 1em; font-size: 0.9em; }
dt { color: #666; } dd { margin: 0; }
"""


def esc(x: Any) -> str:
    return html.escape("" if x is None else str(x), quote=True)


def table(head: Sequence[str], rows: Iterable[Sequence[Any]], caption: str | None = None,
          left: Sequence[int] = (0,), row_class: Sequence[str] | None = None) -> str:
    """A table; ``left``: the columns aligned left (names); ``row_class``: one CSS class a row
    (``base``, ``best``, or empty)."""
    def cls(i: int) -> str:
        return ' class="l"' if i in left else ""

    out = ["<table>"]
    if caption:
        out.append(f"<caption>{esc(caption)}</caption>")
    out.append("<thead><tr>" + "".join(f"<th{cls(i)}>{esc(h)}</th>" for i, h in enumerate(head)) + "</tr></thead>")
    out.append("<tbody>")
    for n, r in enumerate(rows):
        rc = row_class[n] if row_class and n < len(row_class) and row_class[n] else ""
        tr = f'<tr class="{esc(rc)}">' if rc else "<tr>"
        out.append(tr + "".join(f"<td{cls(i)}>{esc(c)}</td>" for i, c in enumerate(r)) + "</tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


def picture(data: bytes, alt: str, caption: str | None = None, mime: str = "image/png") -> str:
    """An image inline (a data URI: no file beside the page)."""
    src = f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"
    cap = f"<figcaption>{esc(caption)}</figcaption>" if caption else ""
    return f'<figure><img src="{src}" alt="{esc(alt)}">{cap}</figure>'


def note(text: str) -> str:
    return f'<p class="note">{esc(text)}</p>'


def facts(pairs: Iterable[tuple[str, Any]]) -> str:
    """A short list of what was measured where (model, version, levels, ...); empty values left out."""
    items = [f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in pairs if v not in (None, "", [], {})]
    return "<dl>" + "".join(items) + "</dl>" if items else ""


def section(title: str, parts: Iterable[str]) -> str:
    return f"<section><h2>{esc(title)}</h2>\n" + "\n".join(p for p in parts if p) + "\n</section>"


def page(title: str, subtitle: str, sections: Iterable[str]) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{esc(title)}</title><style>{CSS}</style></head>\n<body>\n"
            f"<h1>{esc(title)}</h1>\n<p class=\"sub\">{esc(subtitle)}</p>\n"
            + "\n".join(sections) + "\n</body></html>\n")
