"""A KVReport in the terminal (layers × heads grids: the class and budget of each head, its sink and local mass,
what StreamingLLM and H2O keep, its retrieval score) and as a figure (the same grids as SVG heatmaps and a page)."""

from __future__ import annotations

import numpy as np
from rich.console import Group, RenderableType
from rich.text import Text

from attn_cli.data.document import counted
from attn_cli.render.head_grid import head_grid
from attn_cli.render.page_parts import one_run
from attn_cli.render.scale import Scale
from attn_cli.render.svg import Heat
from attn_cli.render.terminal import model_line

LABEL_STYLES = {"retrieval": "bold white on dark_red", "streaming": "black on green"}


class KVView:
    """The whole view, sized to the width it is given when it is drawn."""

    def __init__(self, report):
        self.report = report

    def __rich_console__(self, console, options):
        yield render_kv(self.report, options.max_width)


def share_text(value: float) -> str:
    """A share 0 → 1 in five characters: ' 0.97', ' 1.00'."""
    return f"{value:5.2f}"


def grids(report) -> list[tuple[str, np.ndarray, Scale]]:
    """(title, (layers, heads) values, scale) of every statistic, as the terminal and the figure show them."""
    settings = report.settings
    layers, heads = layer_list(report), sorted({head.head for head in report.heads})

    def grid(value) -> np.ndarray:
        values = np.full((len(layers), len(heads)), np.nan)
        for head in report.heads:
            found = value(head)
            if found is not None:
                values[layers.index(head.layer), heads.index(head.head)] = found
        return values

    shares = Scale.weights()
    window = min(settings.windows)
    found = [
        (f"sink mass (the first {settings.sinks} keys)", grid(lambda head: head.sink), shares),
        (f"local mass (keys within {window})", grid(lambda head: head.windows[window]), shares),
        (
            f"StreamingLLM keeps ({settings.sinks} sinks + recent, {settings.budget} keys)",
            grid(lambda head: head.streaming),
            shares,
        ),
        (f"H2O keeps ({settings.budget} keys: recent + heavy hitters)", grid(lambda head: head.heavy_hitters), shares),
        (f"SnapKV keeps ({settings.budget} keys, of its window's rows)", grid(lambda head: head.snapkv), shares),
        ("retrieval score (needle probe)", grid(lambda head: head.retrieval), shares),
    ]
    return [entry for entry in found if not np.isnan(entry[1]).all()]


def layer_list(report) -> list[int]:
    return sorted({head.layer for head in report.heads})


def _rows(report) -> str:
    """The query rows read: all of them, or a long text's sample of them."""
    if report.tokens > report.rows:
        return f"{report.rows:,} of {report.tokens:,} query rows (a sample of the long texts' rows)"
    return counted(report.rows, "query row")


def render_kv(report, width: int = 80) -> RenderableType:
    settings = report.settings
    parts: list[RenderableType] = [
        model_line(report, "attn kv"),
        Text(
            f"{counted(report.texts, 'text')}, {_rows(report)} · a cache must keep "
            f"{settings.target:g} of each row's attention"
        ),
    ]
    layers, heads = layer_list(report), sorted({head.head for head in report.heads})
    budgets = np.full((len(layers), len(heads)), np.nan)
    labels: dict[tuple[int, int], str] = {}
    for head in report.heads:
        row, column = layers.index(head.layer), heads.index(head.head)
        budgets[row, column] = head.budget
        labels[row, column] = head.label
    title = f"class and budget: keys 90% of rows need to keep {settings.target:g} (R retrieval, S streaming)"
    parts.append(
        head_grid(
            title,
            layers,
            heads,
            budgets,
            Scale.magnitude(budgets),
            str,
            width,
            styles=lambda row, column: LABEL_STYLES[labels[row, column]],
            texts=lambda row, column: f"{labels[row, column][0].upper()}{budgets[row, column]:4.0f}",
        )
    )
    parts.append(Text(f"rule: {_rule(report)}", style="dim"))
    for title, values, scale in grids(report):
        parts.append(head_grid(title, layers, heads, values, scale, share_text, width))
    if report.model.kv_heads < report.model.heads:
        parts.append(_kv_heads(report))
    return Group(*parts)


def _rule(report) -> str:
    from attn_cli.analyses.kv import rule

    return rule(report.settings)


def _kv_heads(report) -> RenderableType:
    """Under grouped-query attention: per layer, each KV head's class and budget (its query heads' most)."""
    lines = [Text("per KV head (the cache is per KV head: the most any of its query heads needs)", style="bold")]
    by_layer: dict[int, list[dict]] = {}
    for group in report.kv_heads():
        by_layer.setdefault(group["layer"], []).append(group)
    for layer, groups in by_layer.items():
        line = Text(f"L{layer}  ")
        for group in groups:
            line.append(f"kv{group['kv_head']} ", style="dim")
            line.append(f"{group['label'][0].upper()} {group['budget']}", style=LABEL_STYLES[group["label"]])
            line.append("  ")
        lines.append(line)
    return Group(*lines)


def _budgets(report) -> tuple[str, np.ndarray]:
    """The recommended budgets as a (layers, heads) grid, and its title (with the heads' classes)."""
    layers, heads = layer_list(report), sorted({head.head for head in report.heads})
    values = np.full((len(layers), len(heads)), np.nan)
    for head in report.heads:
        values[layers.index(head.layer), heads.index(head.head)] = head.budget
    far = sorted(f"{head.layer}.{head.head}" for head in report.heads if head.label == "retrieval")
    title = f"budget (keys for {report.settings.target:g}); retrieval heads: {', '.join(far) or 'none'}"
    return title, values


def kv_items(report, per_head: bool = False) -> list[Heat]:
    layers, heads = layer_list(report), sorted({head.head for head in report.heads})
    rows, cols = [f"L{layer}" for layer in layers], [f"h{head}" for head in heads]
    title, budgets = _budgets(report)
    caption = "rows: layers · columns: heads"
    return [Heat(title, budgets, Scale.magnitude(budgets), rows=rows, cols=cols, caption=caption, noun="keys")] + [
        Heat(title, values, scale, rows=rows, cols=cols, caption=caption, noun="share")
        for title, values, scale in grids(report)
    ]


def kv_page(report, per_head: bool = False) -> dict:
    layers, heads = layer_list(report), sorted({head.head for head in report.heads})
    rows, cols = [f"L{layer}" for layer in layers], [f"h{head}" for head in heads]
    title, budgets = _budgets(report)
    runs = [
        one_run(
            title,
            budgets,
            kind="norms",
            rowTokens=rows,
            colTokens=cols,
            noun="keys ",
            lines=False,
            axes=["layer", "head"],
        )
    ] + [
        one_run(title, values, rowTokens=rows, colTokens=cols, noun="share ", lines=False, axes=["layer", "head"])
        for title, values, _ in grids(report)
    ]
    return {"runs": runs, "start": [0, 0], "caption": _rule(report)}
