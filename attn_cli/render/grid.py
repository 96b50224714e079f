"""The all-heads grid: every selected head's weights as a small picture, layers down, heads across."""

from __future__ import annotations

import math

import numpy as np
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.segment import Segment
from rich.style import Style
from rich.text import Text

from attn_cli.render.glyphs import half_block_codes, pool, quadrant_cells, quadrant_codes, segment_maker
from attn_cli.render.heatmap import legend
from attn_cli.render.scale import Scale

DIM = Style(dim=True)
INK_FLOOR = 0.2  # without colour, cells under this weight get no ink in the grid
THUMB_MAX = 16  # characters across one thumbnail (32 tokens) at most


class HeadsGrid:
    """Every selected head's weights as a small picture: layers down, heads across.

    heads: [(layer, [HeadReport, ...]), ...]; mark: the (layer, head) shown in detail below, if any;
    per_head: each head's picture spans the colours from its own smallest to its largest weight.
    """

    def __init__(
        self,
        layers: list[tuple[int, list]],
        title: str = "",
        mark: tuple[int, int] | None = None,
        scale: Scale | None = None,
        per_head: bool = False,
    ):
        self.layers = layers
        self.title = title
        self.mark = mark
        self.scale = scale or Scale.weights()
        self.per_head = per_head
        self.across = max((len(heads) for _, heads in layers), default=0)
        self.label_width = max((len(f"L{layer}") for layer, _ in layers), default=2) + 1
        self.max_lines: int | None = None  # lines the whole grid may take (FitScreen sets it); None: any
        # what ◂ marks: `attn inspect` prints the marked head's heatmap under the grid; explore says where (it
        # draws the head beside the grid, under it or on a page of its own, as the screen allows)
        self.mark_phrase = "◂ the head in detail below"

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement(self.label_width + 3 * self.across, options.max_width)

    def thumb_width(self, width: int) -> int:
        """Characters across one thumbnail at this terminal width (0: does not fit)."""
        first = next((head for _, heads in self.layers for head in heads if head.weights is not None), None)
        if first is None:
            return 0
        cols = first.weights.shape[1]
        per = (width - self.label_width) // max(1, self.across) - 1
        return max(0, min(math.ceil(cols / 2), per, THUMB_MAX))

    def first_shape(self) -> tuple[int, int] | None:
        """(rows, cols) of the heads' matrices (one window for all of them); None when none was kept."""
        return next(
            (np.shape(head.weights) for _, heads in self.layers for head in heads if head.weights is not None), None
        )

    def frame_lines(self, console: Console, width: int) -> int:
        """Lines besides the pictures: the title (it may wrap), the head numbers, the note and the legend."""
        title = len(Text(self.title).wrap(console, width)) if self.title else 0
        return title + 3

    def height(self, console: Console, width: int, thumb: int, half: bool) -> int:
        """Lines the grid takes drawn with this layout."""
        shape = self.first_shape()
        pictures = 0 if shape is None else len(self.layers) * picture_lines(shape, thumb, half)
        return self.frame_lines(console, width) + pictures

    def layout(self, console: Console, width: int, lines: int | None = None) -> tuple[int, bool]:
        """(characters across a thumbnail, half blocks?) at this width, within `lines` lines when it can (the
        smallest thumbnail, 2 characters, when none fits). With colour and room for a character per token:
        half blocks, every cell its own exact colour; else 2 × 2 cells a character."""
        shape = self.first_shape()
        if shape is None:
            return 0, False
        cols = shape[1]
        per = (width - self.label_width) // max(1, self.across) - 1
        fits = lambda thumb, half: lines is None or self.height(console, width, thumb, half) <= lines  # noqa: E731
        if console.color_system and cols <= min(per, THUMB_MAX) and fits(cols, True):
            return cols, True
        thumb = self.thumb_width(width)
        while thumb > 2 and not fits(thumb, False):  # narrower thumbnails are shorter too (cells stay square)
            thumb -= 1
        return thumb, False

    def min_lines(self, console: Console, width: int) -> int:
        """Lines the grid takes at its smallest (thumbnails 2 characters across)."""
        return self.height(console, width, 2, False) if self.first_shape() is not None else 1

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for line in self.lines(console, options):
            yield from line
            yield Segment.line()

    def lines(self, console: Console, options: ConsoleOptions) -> list[list[Segment]]:
        """The grid as lines of segments, as Console.render_lines(self, options, pad=False) has them: the
        thumbnails' lines are made here directly (thousands of one-character cells), the rest by Rich."""
        width = options.max_width

        def text(renderable: Text) -> list[list[Segment]]:
            return console.render_lines(renderable, options, pad=False)

        if not self.layers or all(head.weights is None for _, heads in self.layers for head in heads):
            return text(Text("all-heads grid: the weights were not kept (see --rows/--cols or --full)", style="yellow"))
        thumb, half = self.layout(console, width, self.max_lines)
        cols = next(head.weights.shape[1] for _, heads in self.layers for head in heads if head.weights is not None)
        if thumb < 2:
            need = self.label_width + 3 * self.across
            return text(
                Text(
                    f"all-heads grid: {self.across} heads need {need} columns, the terminal has {width}; "
                    "widen it or pick fewer heads with --head",
                    style="yellow",
                )
            )
        out = text(Text(self.title, style="bold")) if self.title else []
        head_ids = [head.head for head in max((heads for _, heads in self.layers), key=len)]
        header = Text(" " * self.label_width)
        # every head titled alike: 'h' where all the titles have room for it (h8 h9 10 11 read oddly)
        prefix = "h" if all(len(f"h{head_id}") <= thumb for head_id in head_ids) else ""
        for head_id in head_ids:
            label = f"{prefix}{head_id}"
            header.append(label.center(thumb) if len(label) <= thumb else " " * thumb, style="dim")
            header.append(" ")
        header.rstrip()
        out += text(header)
        pooled = 2 * thumb < cols and not half
        pictures = iter(self.pictures(thumb, half, 0.0 if console.color_system else INK_FLOOR))
        segments = segment_maker(self.scale)
        for layer, heads in self.layers:
            layer_pictures = [next(pictures) for _ in heads]
            for line_no in range(max(len(picture) for picture in layer_pictures)):
                label = f"L{layer}".ljust(self.label_width) if line_no == 0 else " " * self.label_width
                line = [Segment(label, DIM)]
                for head, picture in zip(heads, layer_pictures):
                    codes = picture[line_no] if line_no < len(picture) else []
                    line += segments(codes)
                    marked = self.mark == (layer, head.head) and line_no == 0
                    line.append(Segment(" " * (thumb - len(codes)) + ("◂" if marked else " ")))
                line[-1] = Segment(line[-1].text.rstrip())
                out.append(line)
        phrases = [
            "query rows ↓, key columns →",
            "a cell: the strongest of a few tokens"
            if pooled
            else "2 cells a character"
            if half
            else "2×2 cells a character",
        ]
        if self.mark is not None:
            phrases.append(self.mark_phrase)
        note = phrases[0]
        for phrase in phrases[1:]:
            if len(note) + 2 + len(phrase) <= width:
                note += "; " + phrase
        key = per_head_legend(width) if self.per_head else legend(self.scale, width)
        return out + text(Text(note, style="dim")) + text(key)

    def pictures(self, thumb: int, half: bool, ink_floor: float) -> list[list[list[int]]]:
        """Every head's picture (layer by layer, head by head) as lines of cell codes: half blocks, or
        thumbnails `thumb` characters across (HeadsGrid.thumbnail), the heads of one shape drawn together."""
        heads = [head for _, layer_heads in self.layers for head in layer_heads]
        shapes: dict[tuple[int, int], list[int]] = {}
        for index, head in enumerate(heads):
            if head.weights is not None:
                shapes.setdefault(np.shape(head.weights), []).append(index)
        out: list[list[list[int]]] = [[] for _ in heads]
        for (rows, cols), indices in shapes.items():
            stack = np.stack([self.picture_values(heads[index]) for index in indices])
            if half:
                codes = half_block_codes(stack, self.scale)
            else:
                row_bins, bins = pooled_bins((rows, cols), thumb)
                codes = quadrant_codes(pool(stack, row_bins, bins), self.scale, ink_floor)
            for index, picture in zip(indices, codes.tolist()):
                out[index] = picture
        return out

    def picture_values(self, head) -> np.ndarray:
        """The (rows, cols) values a head's picture draws on the grid's 0 → 1 colours: its weights, or with
        per_head their place between its own smallest and largest weight (masked cells left out)."""
        weights = np.asarray(head.weights, dtype=np.float64)
        if not self.per_head:
            return weights
        return Scale.weights(head.masked(head.weights), per_head=True).shares(weights)

    def thumbnail(self, weights: np.ndarray | None, thumb: int, ink_floor: float) -> list[list[tuple[str, Style]]]:
        """One head's thumbnail as lines of (glyph, Style): the grid's picture of it."""
        if weights is None:
            return []
        row_bins, bins = pooled_bins(weights.shape, thumb)
        return quadrant_cells(pool(weights, row_bins, bins), self.scale, ink_floor)


def per_head_legend(width: int) -> Text:
    """The grid's legend with --scale head: the colours run from each head's own smallest weight to its largest."""
    fixed = Scale.weights()
    text = Text()
    text.append("weight ", style="dim")
    text.append("its min ")
    for value in fixed.stops(8):
        text.append(fixed.shade(value), style=Style(color=fixed.colour(value)))
    text.append(" its max")
    for phrase in ("per-head scale (--scale head)", "colours do not compare across heads"):
        if text.cell_len + 3 + len(phrase) > width:
            break
        text.append(f" · {phrase}", style="dim")
    return text


def pooled_bins(shape: tuple[int, int], thumb: int) -> tuple[int, int]:
    """(row bins, column bins) a (rows, cols) matrix is pooled to in a thumbnail `thumb` characters across
    (2 × 2 cells a character): as many columns as fit, rows in proportion, so cells stay square."""
    rows, cols = shape
    bins = min(cols, 2 * thumb)
    return max(1, min(rows, round(rows * bins / cols))), bins


def picture_lines(shape: tuple[int, int], thumb: int, half: bool) -> int:
    """Lines one head's picture takes: half blocks draw two rows a line, quadrants two row bins a line."""
    if half:
        return math.ceil(shape[0] / 2)
    return math.ceil(pooled_bins(shape, thumb)[0] / 2)
