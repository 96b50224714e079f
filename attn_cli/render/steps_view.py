"""Rich renderables for `attn steps`: one small labelled table per stage, with its shape."""

from __future__ import annotations

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
        rows, columns = len(stage.values), len(stage.values[0]) if stage.values else 0
        title = f"{number}. {stage.name}  ({rows} × {columns}) — {stage.note}"
        if stage.name == "mask":
            masked = [[value is None for value in row] for row in stage.values]
        if stage.kind == "tokens×tokens":
            shown = stage.values if masked is None else [
                [None if hidden else value for value, hidden in zip(row, hidden_row)]
                for row, hidden_row in zip(stage.values, masked)]
            parts.append(heatmap(shown, tokens, title, width))
        else:
            parts.append(vector_table(stage.values, tokens, title, width, (0, rows)))
    if report.missing:
        parts.append(Text(f"not available for this backend: {', '.join(report.missing)}", style="dim"))
    return Group(*parts)
