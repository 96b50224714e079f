"""A layers × heads grid of numbers in the terminal, each cell coloured by its value: the one drawing `attn
ablate`, `patch`, `importance` and `kv` share. Five characters a cell where the heads fit the width, else a
coloured block a head (and a head number every fourth column)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from rich.console import RenderableType
from rich.style import Style
from rich.table import Table
from rich.text import Text

from attn_cli.render.scale import Scale, luminance
from attn_cli.render.terminal import titled

CELL = 5  # "+15.5", "0.813": a number per head, one space between
ROW_LABEL = 4  # "L11 "


def fits(heads: int, width: int) -> bool:
    """Whether a number per head fits the width."""
    return ROW_LABEL + heads * (CELL + 1) <= width


def cell(value: float, scale: Scale, written: str, numbers: bool, style: str | None = None) -> Text:
    """One value's cell: `written` (five characters) on its colour, ink readable on it; a dim dot for NaN; one
    coloured space where the numbers do not fit. style: instead of the value's colour (a label's)."""
    if value != value:
        return Text("    ·" if numbers else "·", style="dim")
    if style is None:
        rgb = scale.rgb(value)
        style = str(Style(bgcolor=scale.colour(value), color="black" if luminance(rgb) > 0.5 else "white"))
    return Text(written if numbers else " ", style=style)


def head_grid(
    title: str,
    layers: list[int],
    heads: list[int],
    values: np.ndarray,
    scale: Scale,
    shown: Callable[[float], str],
    width: int,
    styles: Callable[[int, int], str | None] | None = None,
    texts: Callable[[int, int], str] | None = None,
) -> RenderableType:
    """values (layers, heads), NaN where a head has none; shown(value) its five characters; styles(row, column):
    a style that replaces the value's colour (a label's), or None; texts(row, column): the cell's five
    characters instead of shown(value)."""
    numbers = fits(len(heads), width)
    table = Table(box=None, show_header=True, pad_edge=False, padding=(0, 0, 0, 1), header_style="dim")
    table.add_column("", width=ROW_LABEL - 1, no_wrap=True, style="dim")
    for head in heads:
        label = f"h{head}" if numbers else (str(head % 10) if head % 4 == 0 else "")
        table.add_column(label, width=CELL if numbers else 1, justify="right", no_wrap=True)
    for row, layer in enumerate(layers):
        cells: list[RenderableType] = [f"L{layer}"]
        for column in range(len(heads)):
            value = float(values[row, column])
            written = shown(value) if texts is None or value != value else texts(row, column)
            cells.append(cell(value, scale, written, numbers, None if styles is None else styles(row, column)))
        table.add_row(*cells)
    return titled(title + ("" if numbers else " (a cell a head, brighter: larger)"), table)
