"""Rich renderables for an AttributionReport: the rolled-out contributions (beside the attention rollout with
--vs attention), and each output token's main sources. The same heatmap as `attn rollout`'s."""

from __future__ import annotations

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table

from attn_cli.render.heatmap import Heatmap
from attn_cli.render.layout import SideBySide
from attn_cli.render.scale import Scale
from attn_cli.render.terminal import header, keys_text, row_label, titled

METHOD_NAMES = {
    "alti": "ALTI",
    "globenc": "GlobEnc",
    "value-zeroing": "value zeroing",
    "gradient": "gradient-weighted attention",
    "flow": "attention flow",
}
UNNORMALISED = ("gradient",)  # relevancy R = I + Σ Ā·R: rows do not sum to 1, the diagonal is at least 1


def span_of(layers: list[int]) -> str:
    return f"layers {layers[0]}-{layers[-1]}" if len(layers) > 1 else f"layer {layers[0]}"


def attribution_title(report) -> str:
    name = METHOD_NAMES.get(report.method, report.method)
    if report.method in UNNORMALISED:
        return f"{name} over {span_of(report.layers)} for {target_text(report.target)} (relevancy; rows unnormalised)"
    return f"{name} over {span_of(report.layers)} (rows sum to 1)"


def target_text(target: dict | None) -> str:
    """What the gradient was taken of, in a few words (backends/gradients.py's kinds)."""
    target = target or {}
    kind = target.get("kind")
    if kind == "next-token-logit":
        return f"the next token {target['token']!r}'s logit" + (" (the top prediction)" if target.get("top") else "")
    if kind == "class-logit":
        name = target["label"] or target["index"]
        return f"class {name!r}'s logit" + (" (the top class)" if target.get("top") else "")
    if kind == "embedding-norm":
        return "the mean-pooled embedding's norm"
    if kind == "embedding-dimension":
        return f"dimension {target['dimension']} of the mean-pooled embedding"
    return "a custom target"


def attribution_scale(report, matrix, per_head: bool = False) -> Scale:
    """A share's fixed 0 → 1 (or its own, per_head); the unnormalised relevancy from 0 to its largest value."""
    if report.method in UNNORMALISED and matrix is report.matrix and not per_head:
        return Scale.magnitude(matrix)
    return Scale.weights(matrix, per_head)


def sources_title(report) -> str:
    return f"where each output token comes from ({METHOD_NAMES.get(report.method, report.method)})"


def attention_title(report) -> str:
    return f"raw attention rollout over {span_of(report.layers)}"


def render_attribution(report, per_head: bool = False) -> RenderableType:
    """per_head: each matrix coloured from its own smallest to its largest share (--scale head)."""
    tokens = [token.text for token in report.tokens]
    label = "relevancy" if report.method in UNNORMALISED else "share"
    maps = [
        Heatmap(
            report.matrix,
            tokens,
            attribution_title(report),
            attribution_scale(report, report.matrix, per_head),
            hint="widen",
            label=label,
            unit="matrix",
        )
    ]
    if report.attention is not None:
        maps.insert(
            0,
            Heatmap(
                report.attention,
                tokens,
                attention_title(report),
                Scale.weights(report.attention, per_head),
                hint="widen",
                label="share",
                unit="matrix",
            ),
        )
    sources = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    sources.add_column("output", no_wrap=True)
    sources.add_column("input tokens (relevancy)" if report.method in UNNORMALISED else "input tokens (share)")
    for index, row in enumerate(report.top):
        sources.add_row(row_label(index, tokens[index]), keys_text(row))
    return Group(
        header(report, "attn attribute"),
        SideBySide(maps, shrink=True) if len(maps) > 1 else maps[0],
        titled(sources_title(report), sources),
    )
