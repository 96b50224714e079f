"""Reports inline in Jupyter and VS Code notebooks (a report's `_repr_html_`, data/document.py).

A report with a page shows the very page `--save x.html` writes (render/figures.html_page: head picker,
all-heads grid, hover), offline, inside its own `<iframe srcdoc=…>`. The frame is why several displays in
one notebook never clash: each page keeps its own ids (#app, #layer, …), its own style (page.css styles
body and h1) and its own script globals, and its Content Security Policy still forbids any request. The
frame fits its page's height once loaded, and again when the page grows; where the notebook does not run
the output's own script (its onload), it keeps a fixed height and scrolls.

A corpus store (attn.open_store) shows its dashboard page, as `attn heads show DIR --save x.html` writes it.
A report with no page (attn models' catalog, a report type newer than its figure) shows its JSON document
as plain tables instead, never nothing.
"""

from __future__ import annotations

import json
from html import escape

from attn_cli.data.registry import analysis_for
from attn_cli.render.figures import html_page

FRAME_HEIGHT = 640  # px, before the page is measured (and for good where scripts do not run)
TABLE_ROWS = 50  # rows of a list shown in the fallback table; the rest are counted
# The frame's onload: fit its height to the page's, now and whenever the page's size changes. srcdoc frames
# share the notebook's origin, so the notebook may read the page's height (the page cannot reach out).
FIT = (
    "var f=this,d=f.contentDocument;if(!d)return;"
    "var fit=function(){f.style.height=Math.ceil(d.documentElement.getBoundingClientRect().height)+'px'};"
    "fit();if(window.ResizeObserver)new ResizeObserver(fit).observe(d.documentElement)"
)


def notebook_html(report) -> str:
    """The report's inline display, as its analysis registered it (data/registry.py): its own notebook drawing
    (a batch: one frame per text; a corpus store: its dashboard), else its page in a frame, else tables."""
    spec = analysis_for(report)
    if spec is not None and spec.notebook is not None:
        return spec.notebook(report)
    if spec is None or spec.figure is None:
        return document_tables(report.to_json_dict())
    return frame(html_page(report))


def frame(page: str) -> str:
    """A whole HTML page as one notebook output: an iframe whose srcdoc is the page, attribute-escaped."""
    return (
        f'<iframe class="attn-page" srcdoc="{escape(page, quote=True)}" onload="{escape(FIT, quote=True)}" '
        f'style="width:100%;height:{FRAME_HEIGHT}px;border:0" title="attn"></iframe>'
    )


def document_tables(document: dict) -> str:
    """A JSON document as HTML: its plain fields as one table, each list of records as a table of its own."""
    command = document.get("command", "report")
    fields = {key: value for key, value in document.items() if not _is_records(value)}
    parts = [
        f"<p><b>attn {escape(str(command))}</b></p>",
        _table(["field", "value"], [[key, value] for key, value in fields.items()]),
    ]
    for key, value in document.items():
        if _is_records(value):
            columns = list(dict.fromkeys(name for record in value for name in record))
            rows = [[record.get(name) for name in columns] for record in value[:TABLE_ROWS]]
            more = f"<p>… {len(value) - TABLE_ROWS:,} more</p>" if len(value) > TABLE_ROWS else ""
            parts.append(f"<p>{escape(key)} ({len(value):,})</p>" + _table(columns, rows) + more)
    return '<div class="attn-document">' + "\n".join(parts) + "</div>"


def _is_records(value) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(item, dict) for item in value)


def _table(columns: list[str], rows: list[list]) -> str:
    head = "".join(f"<th>{escape(str(name))}</th>" for name in columns)
    body = "".join("<tr>" + "".join(f"<td>{escape(_cell(value))}</td>" for value in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)
