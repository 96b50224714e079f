"""Rich renderables for `attn steps`: one small labelled table per stage, with its shape."""

from __future__ import annotations

import numpy as np
from rich.console import Group, RenderableType
from rich.text import Text

from attn_cli.render.terminal import header, heatmap, vector_table


def render_steps(report, width: int) -> RenderableType:
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
            parts.append(heatmap(shown, tokens, title, width))
        else:
            parts.append(vector_table(stage.values, tokens, title, width, (0, rows)))
    if report.missing:
        parts.append(Text(f"not available for this backend: {', '.join(report.missing)}", style="dim"))
    return Group(*parts)
