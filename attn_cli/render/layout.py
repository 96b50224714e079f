"""Self-sizing pieces of the terminal views: per-token vector tables, tables shown whole or not at all,
and renderables side by side when they fit."""

from __future__ import annotations

import numpy as np
from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.measure import Measurement
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from attn_cli.render.heatmap import row_label

VECTOR_CELL = 7  # '-12.34'


class VectorTable:
    """Per-token vectors (q, k or v) of the tokens in span, as many dimensions as fit the width."""

    def __init__(
        self,
        rows: np.ndarray | None,
        tokens: list[str],
        title: str,
        span: tuple[int, int],
        more: str = "--json has all",
    ):
        self.rows, self.tokens, self.title, self.span, self.more = rows, tokens, title, span, more

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement(30, options.max_width)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if self.rows is None:
            yield Text(f"{self.title}: not captured", style="dim")
            return
        width = options.max_width
        label = max(row_label(i, self.tokens[i]).cell_len for i in range(*self.span))
        values = [[f"{value:.2f}" for value in self.rows[i].tolist()] for i in range(*self.span)]
        cell = max(VECTOR_CELL, max((len(v) for row in values for v in row), default=1))
        dims = self.rows.shape[1]
        shown = min(dims, (width - label - 1) // (cell + 1))
        if shown < 1:
            yield Text(f"{self.title}: needs {label + cell + 2} columns, the terminal has {width}", style="yellow")
            return
        notes = [f"dims 0-{shown - 1} of {dims}; {self.more}"] if shown < dims else []
        if self.span[1] - self.span[0] < len(self.tokens):
            notes.append(f"tokens {self.span[0]}-{self.span[1] - 1} of {len(self.tokens)}")
        table = Table(box=None, padding=(0, 0, 0, 1), pad_edge=False, show_edge=False)
        table.add_column("token", no_wrap=True, width=label)
        for dim in range(shown):
            table.add_column(f"d{dim}", justify="right", no_wrap=True, width=cell)
        for offset, index in enumerate(range(*self.span)):
            table.add_row(row_label(index, self.tokens[index]), *values[offset][:shown])
        yield Text(self.title, style="bold")
        yield table
        if notes:
            yield Text("; ".join(notes), style="dim")


class Fit:
    """A table shown whole when the width allows it, else one line saying what to do (never cut numbers)."""

    def __init__(self, renderable, what: str, advice: str = "widen the terminal or use --json"):
        self.renderable, self.what, self.advice = renderable, what, advice

    def need(self, console: Console, options: ConsoleOptions) -> int:
        return Measurement.get(console, options.update_width(10_000), self.renderable).minimum

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self.renderable)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        need = self.need(console, options)
        if need > options.max_width:
            yield Text(
                f"{self.what}: needs {need} columns, the terminal has {options.max_width}; {self.advice}",
                style="yellow",
            )
        else:
            yield self.renderable


class SideBySide:
    """Renderables next to each other when their natural widths fit, else one under another.

    shrink: where the natural widths do not fit, still side by side in equal shares of the width when every
    part's smallest form fits its share (heatmaps then draw shade cells instead of numbers)."""

    def __init__(self, parts: list, gap: int = 3, shrink: bool = False):
        self.parts, self.gap, self.shrink = parts, gap, shrink

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        measures = [Measurement.get(console, options.update_width(10_000), part) for part in self.parts]
        widths = [measure.maximum for measure in measures]
        gaps = self.gap * (len(widths) - 1)
        share = (options.max_width - gaps) // max(1, len(widths))
        if sum(widths) + gaps > options.max_width and self.shrink and all(m.minimum <= share for m in measures):
            widths = [share] * len(widths)
        if sum(widths) + gaps <= options.max_width and len(self.parts) > 1:
            grid = Table.grid(padding=(0, self.gap))
            for width in widths:
                grid.add_column(width=width, overflow="fold")
            grid.add_row(*self.parts)
            yield grid
        else:
            yield Group(*self.parts)


class FitScreen:
    """Parts one under another, one of them (`flexible`, a HeadsGrid) sized to the screen's height.

    The flexible part gets the lines the others leave (the whole view then fits one screen); where even
    its smallest form does not fit beside them, it gets the whole screen (it fits by itself, and the
    rest follows below). The screen is the console's height (options.max_height).
    """

    def __init__(self, parts: list, flexible):
        self.parts, self.flexible = parts, flexible

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        rendered = {
            index: console.render_lines(part, options, pad=False)
            for index, part in enumerate(self.parts)
            if part is not self.flexible
        }
        screen = options.max_height
        others = sum(len(lines) for lines in rendered.values())
        fits_beside = self.flexible.min_lines(console, options.max_width) + others <= screen
        self.flexible.max_lines = screen - others if fits_beside else screen
        for index, part in enumerate(self.parts):
            lines = rendered.get(index)
            if lines is None:
                lines = console.render_lines(part, options, pad=False)
            for line in lines:
                yield from line
                yield Segment.line()
