"""Rich renderables for `attn steps`: one small labelled table per stage, with its shape."""

from __future__ import annotations

import numpy as np
from rich.console import Group, RenderableType
from rich.text import Text

from attn_cli.render.heatmap import Heatmap
from attn_cli.render.layout import VectorTable
from attn_cli.render.scale import Scale
from attn_cli.render.terminal import header

WIDEN = "widen"  # steps has no --rows/--cols: a heatmap too wide asks for a wider terminal


def render_steps(report, per_head: bool = False) -> RenderableType:
    """per_head: the softmax stage coloured from its own smallest to its largest weight (--scale head)."""
    tokens = [token.text for token in report.tokens]
    parts: list[RenderableType] = [
        header(report, "attn steps"),
        Text(f"layer {report.layer}, head {report.head}, stage by stage", style="magenta"),
    ]
    masked = None  # after the mask stage, its blank cells stay blank (their weights are exactly 0)
    for number, stage in enumerate(report.stages, start=1):
        rows, columns = stage.values.shape
        title = f"{number}. {stage.name}  ({rows} × {columns}) — {stage.note}"
        if stage.name == "mask":
            masked = np.isnan(stage.values)
        if stage.kind == "tokens×tokens":
            shown = stage.values if masked is None else np.where(masked, np.nan, stage.values)
            scale = Scale.weights(shown, per_head) if stage.name == "softmax" else Scale.scores(shown)
            parts.append(Heatmap(shown, tokens, title, scale, hint=WIDEN))
        else:
            parts.append(VectorTable(stage.values, tokens, title, (0, rows)))
    if report.missing:
        parts.append(Text(f"not available for this backend: {', '.join(report.missing)}", style="dim"))
    return Group(*parts)
