"""Write reports to streams and files: JSON documents, SVG, PNG, PDF and HTML figures, tensors."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import IO

from attn_cli.plumbing.errors import AttnError, BadInput
from attn_cli.render.raster import DRAWN_FORMATS, check_drawable, draw, missing_glyphs_note

SNAPSHOT_FORMATS = (".svg", ".html", ".htm")
DEFAULT_DPI = 150  # a PNG figure's pixels per inch: sharp on slides and screens, small enough to mail
DPI_RANGE = (10, 1200)


def write_json(document, stream: IO[str], before_last: Callable[[], None] | None = None) -> None:
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


def check_snapshot_path(path: Path, dpi: float | None = None) -> None:
    """Fail before the model runs, not after, when --save names a format we cannot write (or cannot draw:
    PNG and PDF need the [figures] extra), or --dpi is given for a figure that has no pixels."""
    suffix = path.suffix.lower()
    if suffix in (".jpg", ".jpeg"):
        raise BadInput(
            f"--save {path}: attn writes .svg, .png, .pdf and .html figures, not {path.suffix}",
            "use FILE.png for pixels",
        )
    if suffix not in SNAPSHOT_FORMATS + DRAWN_FORMATS:
        raise BadInput(
            f"--save {path}: unknown format {path.suffix or '(none)'!r}", "use a .svg, .png, .pdf or .html file"
        )
    check_dpi(dpi, path)
    if suffix in DRAWN_FORMATS:
        check_drawable(f"--save {path}")
    from attn_cli.plumbing.atomic import check_writable

    check_writable(path, "--save")


def check_dpi(dpi: float | None, path: Path | None) -> None:
    """--dpi: a PNG's pixels per inch, within DPI_RANGE; only with --save FILE.png (the others are vector)."""
    if dpi is None:
        return
    if path is None or path.suffix.lower() != ".png":
        given = f"--save {path} is vector" if path is not None else "no --save was given"
        raise BadInput(
            f"--dpi sets the pixels of a --save FILE.png figure, and {given}",
            "use --save FILE.png, or drop --dpi (SVG and PDF have no pixels)",
        )
    low, high = DPI_RANGE
    if not low <= dpi <= high:
        raise BadInput(f"--dpi {dpi:g} is out of range", f"use {low} to {high} (default {DEFAULT_DPI})")


def save_figure(
    report,
    path: Path,
    panels=None,
    dpi: float | None = None,
    per_head: bool = False,
    query: tuple[int, int] | None = None,
) -> list[str]:
    """--save for a report: a vector SVG figure, that SVG drawn as PNG or PDF, or a self-contained
    interactive HTML page (render/figures.py; an image's report: render/image_figures.py, from the
    patch `query`, unless `panels` names token views, drawn as for text); per_head: weights on each head's own
    colour scale (an image's pictures always spread each head from its least to its most attended patch).
    Returns warnings for the user (characters no font has)."""
    from attn_cli.plumbing.atomic import atomic_path

    if shows_image(report) and not panels:  # the image with a heat overlay per head
        from attn_cli.render.image_figures import image_html, image_svg

        def svg_figure(report, panels=None, looked_by: str = "inspect", per_head: bool = False) -> str:
            return image_svg(report, query)

        def html_page(report, per_head: bool = False) -> str:
            return image_html(report, query)

    else:
        from attn_cli.render.figures import html_page, svg_figure
    suffix = path.suffix.lower()
    notes: list[str] = []
    if suffix in DRAWN_FORMATS:
        content, missing = draw(svg_figure(report, panels, per_head=per_head), suffix, dpi or DEFAULT_DPI)
        if missing:
            notes.append(missing_glyphs_note(path, missing))
    else:
        content = (
            svg_figure(report, panels, per_head=per_head) if suffix == ".svg" else html_page(report, per_head)
        ).encode("utf-8")
    with atomic_path(path, "--save") as temp:  # an OSError becomes one AttnError there
        write_figure(temp, content)
    return notes


def shows_image(report) -> bool:
    """An inspect or rollout report of an image (--image): its figure is the image with the heat over it."""
    from attn_cli.analyses.inspect_report import InspectReport
    from attn_cli.analyses.rollout import RolloutReport

    return isinstance(report, (InspectReport, RolloutReport)) and report.image is not None


def write_figure(path: Path, content: bytes) -> None:
    Path(path).write_bytes(content)


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
        heads[prefix] = {
            "kv_head": head.kv_head,
            "scale": head.scale,
            "window": [list(window.rows), list(window.cols)] if window.is_partial else None,
        }
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
