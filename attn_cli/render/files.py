"""Write reports to streams and files: JSON documents, SVG and HTML figures, tensors."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Callable, TextIO

from attn_cli.plumbing.errors import AttnError, BadInput

SNAPSHOT_FORMATS = (".svg", ".html", ".htm")


def write_json(document, stream: TextIO, before_last: Callable[[], None] | None = None) -> None:
    """The one JSON writer: a report's document (its json_chunks, streamed as they are made), then a newline.

    Every report type (inspect, a batch, compare, steps, the model catalog) writes through here;
    an inspect report's layers are analysed one at a time as their text is written.
    before_last(): runs after the last chunk is made and before it is written (the document is not
    complete on the stream until then).
    """
    last = None
    for chunk in document.json_chunks():
        if last is not None:
            stream.write(last)
        last = chunk
    if before_last is not None:
        before_last()
    stream.write((last or "") + "\n")


def check_snapshot_path(path: Path) -> None:
    """Fail before the model runs, not after, when --save names a format we cannot write."""
    if path.suffix.lower() in (".png", ".pdf", ".jpg", ".jpeg"):
        raise BadInput(f"--save {path}: attn writes vector .svg figures, not {path.suffix}",
                       "use FILE.svg (any browser prints it to PDF or PNG) or FILE.html")
    if path.suffix.lower() not in SNAPSHOT_FORMATS:
        raise BadInput(f"--save {path}: unknown format {path.suffix or '(none)'!r}", "use a .svg or .html file")
    from attn_cli.plumbing.atomic import check_writable

    check_writable(path, "--save")


def save_figure(report, path: Path, panels=None) -> None:
    """--save for a report: a vector SVG figure, or a self-contained interactive HTML page (render/figures.py)."""
    from attn_cli.render.figures import html_page, svg_figure

    from attn_cli.plumbing.atomic import atomic_path

    text = svg_figure(report, panels) if path.suffix.lower() == ".svg" else html_page(report)
    with atomic_path(path, "--save") as temp:  # an OSError becomes one AttnError there
        write_text(temp, text)


def write_text(path: Path, text: str) -> None:
    Path(path).write_text(text, encoding="utf-8")


def save_tensors(report, path: Path) -> None:
    """The selected heads' tensors as safetensors, named layers.L.heads.H.{q,k,v,output,scores,weights}.

    Masked scores are NaN. Metadata (strings, as safetensors requires): text, tokens and
    model as JSON, and per head its kv head, scale and window.
    """
    import torch
    from safetensors.torch import save_file

    from attn_cli.data.document import dumps

    tensors, heads = {}, {}
    for layer, head in report.heads():
        prefix = f"layers.{layer}.heads.{head.head}"
        for name, rows in (*head.tensors.items(), ("scores", head.scores), ("weights", head.weights)):
            if rows is not None:
                tensors[f"{prefix}.{name}"] = torch.from_numpy(rows).float().contiguous()
        window = head.window
        heads[prefix] = {"kv_head": head.kv_head, "scale": head.scale,
                         "window": [list(window.rows), list(window.cols)] if window.is_partial else None}
    metadata = {
        "text": report.text,
        "tokens": dumps([token.text for token in report.tokens]),
        "model": dumps(asdict(report.model)),
        "heads": dumps(heads),
        "attn_schema_version": "1",
    }
    from attn_cli.plumbing.atomic import atomic_path

    try:
        with atomic_path(path, "--save-tensors") as temp:
            save_file(tensors, str(temp), metadata=metadata)
    except OSError as error:
        raise AttnError(f"cannot write {path}: {error.strerror}") from None
