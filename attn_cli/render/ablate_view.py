"""An AblationReport in the terminal (the layers × heads grid of effects and the largest ones) and as a figure
(the same grid as an SVG heatmap and an HTML page)."""

from __future__ import annotations

from rich import box
from rich.console import Group, RenderableType
from rich.style import Style
from rich.table import Table
from rich.text import Text

from attn_cli.render.page_parts import one_run
from attn_cli.render.scale import Scale, luminance
from attn_cli.render.svg import Heat
from attn_cli.render.terminal import header, titled

TOP = 5
CELL = 5  # "+15.5", "+.042", "-.001": a number per head, one space between
ROW_LABEL = 4  # "L11 "

METHOD_WORDS = {"zero": "zero-ablation", "mean": "mean-ablation", "resample": "resample-ablation"}


def heads_named(heads: list[tuple[int, int]]) -> str:
    """[(1, 0), (1, 1)] -> '1.0, 1.1': LAYER.HEAD, as --head takes them."""
    return ", ".join(f"{layer}.{head}" for layer, head in heads)


def signed(value: float) -> str:
    """An effect in five characters, its sign always shown: '+15.5', '+1.23', '+.042', '-.001', '+0'."""
    if value != value:
        return "    ·"
    size = abs(value)
    if size >= 99.5:
        return f"{value:+.0f}"
    if size >= 9.95:
        return f"{value:+.1f}"
    if size >= 0.9995:
        return f"{value:+.2f}"
    if size < 0.0005:
        return "    0"
    return f"{value:+.3f}".replace("0.", ".", 1)


class AblateView:
    """The whole view, sized to the width it is given when it is drawn."""

    def __init__(self, report):
        self.report = report

    def __rich_console__(self, console, options):
        yield render_ablate(self.report, options.max_width)


def render_ablate(report, width: int = 80) -> RenderableType:
    method = METHOD_WORDS[report.method]
    about = f"{method} · {report.measured} · clean {report.clean:.4g}{_units(report)}"
    if report.reference is not None:
        about += f" · replacements from {report.reference}"
    parts: list[RenderableType] = [header(report, "attn ablate"), Text(about)]
    if report.together:
        ablation = report.ablations[0]
        parts.append(
            Text.assemble(
                f"removing {heads_named(ablation.heads)} together: {report.metric} ",
                (f"{ablation.value:.4g}", "bold"),
                f" (effect {ablation.effect:+.4g}{_units(report)})",
            )
        )
        return Group(*parts)
    grid = report.grid()
    if grid is not None:
        layers, heads, effects = grid
        parts.append(_grid(report, layers, heads, effects, width))
    parts.append(_top(report))
    return Group(*parts)


def _grid(report, layers: list[int], heads: list[int], effects, width: int) -> RenderableType:
    scale = Scale.scores(effects)
    numbers = ROW_LABEL + len(heads) * (CELL + 1) <= width
    table = Table(box=None, show_header=True, pad_edge=False, padding=(0, 0, 0, 1), header_style="dim")
    table.add_column("", width=ROW_LABEL - 1, no_wrap=True, style="dim")
    for head in heads:
        label = f"h{head}" if numbers else (str(head % 10) if head % 4 == 0 else "")
        table.add_column(label, width=CELL if numbers else 1, justify="right", no_wrap=True)
    for row, layer in enumerate(layers):
        cells = [f"L{layer}"]
        for column in range(len(heads)):
            value = float(effects[row, column])
            cells.append(_cell(value, scale, numbers))
        table.add_row(*cells)
    caption = f"effect of removing each head alone: {report.metric} ablated − clean{_units(report, ' in ')}"
    caption += "" if numbers else " (a cell a head, brighter: larger)"
    return titled(caption, table)


def _units(report, before: str = " ") -> str:
    return before + report.units if report.units else ""


def _cell(value: float, scale: Scale, numbers: bool):
    if value != value:
        return Text("    ·" if numbers else "·", style="dim")
    rgb = scale.rgb(value)
    ink = "black" if luminance(rgb) > 0.5 else "white"
    style = Style(bgcolor=scale.colour(value), color=ink)
    return Text(signed(value) if numbers else " ", style=style)


def _top(report) -> RenderableType:
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("heads" if report.together else "head", no_wrap=True)
    table.add_column(report.metric, justify="right")
    table.add_column("effect", justify="right")
    for ablation in report.top(TOP):
        table.add_row(heads_named(ablation.heads), f"{ablation.value:.4g}", signed(ablation.effect).strip())
    return titled(f"largest effects (of {len(report.ablations)})", table)


# -- figure ---------------------------------------------------------------------------------------------


def _figure_grid(report):
    """(title, rows, cols, matrix) of the figure: the effects grid, or the one set removed together."""
    grid = report.grid()
    title = f"{report.metric}, ablated − clean{_units(report, ', ')} ({METHOD_WORDS[report.method]})"
    if grid is None:
        ablation = report.ablations[0]
        import numpy as np

        return title, ["together"], [heads_named(ablation.heads)], np.array([[ablation.effect]])
    layers, heads, effects = grid
    return title, [f"L{layer}" for layer in layers], [f"h{head}" for head in heads], effects


def ablate_items(report, per_head: bool = False) -> list[Heat]:
    title, rows, cols, matrix = _figure_grid(report)
    return [
        Heat(
            title,
            matrix,
            Scale.scores(matrix),
            rows=rows,
            cols=cols,
            caption="rows: layers · columns: heads",
            noun="effect",
        )
    ]


def ablate_page(report, per_head: bool = False) -> dict:
    title, rows, cols, matrix = _figure_grid(report)
    run = one_run(
        title,
        matrix,
        kind="scores",
        limit=Scale.scores(matrix).limit,
        rowTokens=rows,
        colTokens=cols,
        noun="effect ",
        lines=False,
        axes=["layer", "head"],
    )
    return {"runs": [run], "start": [0, 0], "caption": f"{report.measured}; clean {report.clean:.4g}{_units(report)}"}
