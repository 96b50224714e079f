"""`x` in `attn explore`: what is on screen written to files — the screen as SVG, the selected head as a
figure, the report as HTML and JSON."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from attn_cli.explore.view import variant_label


def export(
    directory: Path, report, variant: str, layer: int, head, scores: bool, number: int, screen_svg, document=None
) -> list[Path]:
    """Write attn-explore-L{layer}H{head}-{variant}-{time}-{number}{.svg, -head.svg, .html, .json} in
    `directory`: screen_svg() (the screen as SVG), `head` (the HeadReport drawn) as a figure of its
    scores or weights, and the `document` (default: the report; an encoder–decoder pair: every stack, with
    the source's and the target's tokens) as HTML and JSON. The paths written, in that order."""
    from attn_cli.analyses.inspect_report import LayerReport
    from attn_cli.render.figures import html_page, svg_figure
    from attn_cli.render.files import write_json
    from attn_cli.render.terminal import Panel

    stem = directory / (
        f"attn-explore-L{layer}H{head.head}-{variant_label(variant)}-{time.strftime('%H%M%S')}-{number}"
    )
    paths = [
        stem.with_suffix(".svg"),
        stem.with_name(stem.name + "-head.svg"),
        stem.with_suffix(".html"),
        stem.with_suffix(".json"),
    ]
    paths[0].write_text(screen_svg(), encoding="utf-8")
    one = replace(report, layers=[LayerReport(layer, [head])])
    paths[1].write_text(svg_figure(one, {Panel.scores if scores else Panel.weights}, "explore"), encoding="utf-8")
    document = report if document is None else document
    paths[2].write_text(html_page(document), encoding="utf-8")
    with open(paths[3], "w", encoding="utf-8") as handle:
        write_json(document, handle)
    return paths
