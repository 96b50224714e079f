"""Rich renderables for a RolloutReport: the rolled-out matrix and each output token's main sources."""

from __future__ import annotations

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table

from attn_cli.render.heatmap import Heatmap
from attn_cli.render.scale import Scale
from attn_cli.render.terminal import header, keys_text, row_label, titled


def render_rollout(report, per_head: bool = False) -> RenderableType:
    """per_head: the matrix coloured from its own smallest to its largest share (--scale head)."""
    tokens = [token.text for token in report.tokens]
    span = f"layers {report.layers[0]}-{report.layers[-1]}" if len(report.layers) > 1 else f"layer {report.layers[0]}"
    if report.model.no_attention_layers:  # a hybrid: the chain skips what has no attention matrix
        span += f" (attention layers only: {', '.join(map(str, report.layers))})"
    title = f"rollout over {span}, heads fused by {report.head_fusion} (rows sum to 1)"
    sources = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    sources.add_column("output", no_wrap=True)
    sources.add_column("input tokens (share)")
    for index, row in enumerate(report.top):
        sources.add_row(row_label(index, tokens[index]), keys_text(row))
    # rows sum to 1, like weights: the same fixed scale
    scale = Scale.weights(report.matrix, per_head)
    return Group(
        header(report, "attn rollout"),
        Heatmap(report.matrix, tokens, title, scale, hint="widen", unit="matrix"),
        titled("where each output token comes from", sources),
    )
