"""Self-sizing Rich renderables: heatmaps, the all-heads grid, vector tables, side-by-side views.

Each reads the width it is given (`options.max_width` in `__rich_console__`, as rich's own `Bar`
does) and picks the richest form that fits: numbers, then shade cells two characters wide, then one
character wide; below that it prints one line saying what to do. Nothing here is ever cut with '…'.
"""

from __future__ import annotations

import math

import numpy as np
from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.measure import Measurement
from rich.segment import Segment
from rich.style import Style
from rich.table import Table
from rich.text import Text

from attn_cli.render.scale import CellFormat, Scale, luminance
from attn_cli.data.selection import Window

NUMBER_CELL = 4  # '1.00', '-1.4', '.40'
LABEL_TOKEN = 12  # characters of a token in a row label before it is clipped
WINDOW_HINT = "window"  # the message names --rows/--cols; otherwise it says to widen the terminal
LIST_LIMIT = 64  # key tokens listed under a heatmap


def literal(text: str, style: str | Style = "") -> Text:
    """User text made safe to show: control characters escaped, markup never parsed."""
    shown = "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)
    return Text(shown, style=style)


# The tokenizer's stand-in for a piece its vocabulary lacks (BERT's [UNK], SentencePiece's <unk>): not
# a word of the text, so it is drawn dim and italic wherever tokens are listed, never bold like a word.
UNKNOWN_TOKENS = frozenset({"[UNK]", "<unk>"})


def token_text(token: str, style: str = "bold") -> Text:
    """A token as a word of the text is drawn (style), or dim italic when it is the unknown-token stand-in."""
    return literal(token, "dim italic" if token in UNKNOWN_TOKENS else style)


def clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(1, width - 1)] + "…"


def row_label(index: int, token: str, digits: int = 0) -> Text:
    """'7 [SEP]'; digits right-aligns the index among larger ones (' 7 [SEP]' beside '12 cat')."""
    shown = clip(token, LABEL_TOKEN)
    return Text.assemble((f"{index:>{digits}} ", "dim"), token_text(shown, "") if shown == token else literal(shown))


def legend(scale: Scale, width: int, what: str | None = None, extra: str = "") -> Text:
    """'weight 0 ░░▒▒▓▓██ 1 · fixed scale, brighter = more' cut to whole phrases that fit `width`."""
    what = what or {"weights": "weight", "scores": "score"}.get(scale.kind, "value")
    text = Text()
    text.append(f"{what} ", style="dim")
    text.append(f"{scale.low_label} ")
    for value in scale.stops(9 if scale.diverging else 8):
        text.append(scale.shade(value), style=Style(color=scale.colour(value)))
    text.append(f" {scale.high_label}")
    phrases = {"weights": ["the same scale for every head", "brighter = more"],
               "scores": ["centred on 0", "brighter = further from 0"]}.get(scale.kind, ["brighter = more"])
    if extra:
        phrases.append(extra)
    for phrase in phrases:
        if text.cell_len + 3 + len(phrase) > width:
            break
        text.append(f" · {phrase}", style="dim")
    return text


class Heatmap:
    """Query tokens as rows, key tokens as columns; masked (NaN) cells blank.

    matrix: the (rows, cols) part of the whole T × T that `window` names (None: the whole matrix).
    """

    def __init__(self, matrix: np.ndarray | None, tokens: list[str], title: str, scale: Scale | None = None,
                 window: Window | None = None, hint: str = WINDOW_HINT, label: str | None = None):
        self.matrix = None if matrix is None else np.asarray(matrix, dtype=np.float64)
        self.tokens = tokens
        self.title = title
        self.scale = scale or Scale.weights()
        self.window = window if window is not None and window.is_partial else None
        self.hint = hint
        self.label = label  # what the legend calls the values ("weight", "score" by the scale)
        self.row0, self.col0 = (self.window.rows[0], self.window.cols[0]) if self.window else (0, 0)
        if self.matrix is not None:
            rows, cols = self.matrix.shape
            self.digits = len(str(self.row0 + rows - 1))
            self.label_width = max((row_label(i, tokens[i], self.digits).cell_len
                                    for i in range(self.row0, self.row0 + rows)), default=1)
            self.cols = cols

    # -- sizes ---------------------------------------------------------------------------------------
    def width_for(self, cell: int, gap: int) -> int:
        return self.label_width + 1 + self.cols * (cell + gap)

    @property
    def numbers_width(self) -> int:
        return self.width_for(NUMBER_CELL, 1)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        if self.matrix is None:
            return Measurement(20, options.max_width)
        return Measurement(min(self.width_for(1, 0), options.max_width), self.numbers_width)

    # -- rendering -----------------------------------------------------------------------------------
    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        if self.matrix is None:
            yield Text(f"{self.title}: not kept for {len(self.tokens)} tokens (past the matrix size limit); pick a "
                       "window with --rows A:B --cols C:D, or pass --full", style="yellow")
            return
        rows, cols = self.matrix.shape
        place = (f" · rows {self.row0}-{self.row0 + rows - 1}, keys {self.col0}-{self.col0 + cols - 1}"
                 if self.window else "")
        for cell, gap in ((NUMBER_CELL, 1), (2, 0), (1, 0)):
            if self.width_for(cell, gap) <= width:
                break
        else:
            yield self.too_narrow(width)
            return
        yield Text(self.title + place, style="bold")
        numbers = gap == 1
        fmt = CellFormat.choose(self.matrix, self.scale, NUMBER_CELL) if numbers else None
        yield from self.header_lines(cell, gap)
        for offset, row in enumerate(self.matrix.tolist()):
            index = self.row0 + offset
            line = row_label(index, self.tokens[index], self.digits)
            line.pad_right(self.label_width - line.cell_len)
            line.append(" ")
            for value in row:
                line.append_text(self.cell(value, cell, fmt))
                if gap:
                    line.append(" " * gap)
            line.rstrip()
            yield line
        yield self.key_list(width)
        extra = fmt.note if fmt and fmt.note else ("" if numbers else
                                                   f"{self.numbers_width} columns show numbers")
        yield legend(self.scale, width, self.label, extra=extra)

    def cell(self, value: float, cell: int, fmt: CellFormat | None) -> Text:
        if not math.isfinite(value):
            return Text(" " * cell)
        if fmt is not None:
            rgb = self.scale.rgb(value)
            ink = "black" if luminance(rgb) > 0.45 else "white"
            return Text(fmt.text(value).rjust(cell), style=Style(color=ink, bgcolor=self.scale.colour(value)))
        return Text(self.scale.shade(value) * cell, style=Style(color=self.scale.colour(value)))

    def header_lines(self, cell: int, gap: int) -> list[Text]:
        """Key column numbers: in line with the cells when they fit, else written downwards."""
        indices = [str(self.col0 + i) for i in range(self.cols)]
        digits = max(len(index) for index in indices)
        tag = "key →" if self.label_width >= 5 else "k→"
        if digits < cell + gap:  # a space between neighbours
            line = Text(tag.rjust(self.label_width) + " ", style="dim")
            line.append("".join(index.rjust(cell) + " " * gap for index in indices).rstrip(), style="bold")
            return [line]
        lines = []
        for place in range(digits):
            label = tag if place == digits - 1 else ""
            line = Text(label.rjust(self.label_width) + " ", style="dim")
            line.append("".join(index.rjust(digits)[place].rjust(cell) + " " * gap for index in indices).rstrip(),
                        style="bold")
            lines.append(line)
        return lines

    def key_list(self, width: int) -> Text:
        """The key tokens in full, numbered as the columns are."""
        text = Text("keys ", style="dim")
        shown = min(self.cols, LIST_LIMIT)
        for i in range(self.col0, self.col0 + shown):
            text.append(f"{i}:", style="dim")
            text.append_text(token_text(self.tokens[i]))
            text.append("  ")
        if shown < self.cols:
            text.append(f"… {self.cols - shown} more (the header lists every token)", style="dim")
        text.rstrip()
        return text

    def too_narrow(self, width: int) -> Text:
        fits = max(1, width - self.label_width - 1)
        need = self.width_for(1, 0)
        if self.hint == WINDOW_HINT:
            rows = len(self.matrix)
            advice = (f"pick a window, e.g. --rows {self.row0}:{self.row0 + min(rows, 40)} "
                      f"--cols {self.col0}:{self.col0 + fits}")
        else:
            advice = "widen the terminal"
        return Text(f"{self.title}: {self.cols} key columns need {need} columns, the terminal has {width}; {advice}",
                    style="yellow")


# -- the all-heads grid ------------------------------------------------------------------------------

# Quadrant characters by the cells they ink: upper-left 8, upper-right 4, lower-left 2, lower-right 1.
QUADRANTS = " ▗▖▄▝▐▞▟▘▚▌▙▀▜▛█"
CONTRAST = 0.08  # a 2×2 block whose values differ less than this is drawn as one colour
DIM = Style(dim=True)
INK_FLOOR = 0.2  # without colour, cells under this weight get no ink in the grid
THUMB_MAX = 16  # characters across one thumbnail (32 tokens) at most


def pool(matrix: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """Max-pool a matrix (or a stack of them, (n, rows, cols)) to (rows, cols) bins: the strongest
    attention in each bin stays visible."""
    matrix = np.nan_to_num(np.asarray(matrix, dtype=np.float64), nan=0.0)
    if matrix.shape[-2:] == (rows, cols):
        return matrix
    row_edges = np.linspace(0, matrix.shape[-2], rows + 1).astype(int)[:-1]
    col_edges = np.linspace(0, matrix.shape[-1], cols + 1).astype(int)[:-1]
    return np.maximum.reduceat(np.maximum.reduceat(matrix, row_edges, axis=-2), col_edges, axis=-1)


def _shares(scale: Scale, values: np.ndarray) -> np.ndarray:
    if scale.diverging:
        return np.minimum(1.0, np.abs(values) / scale.limit)
    return np.clip(values, 0.0, 1.0)


_STYLES: dict = {}
COLOUR_LEVELS = 200  # distinct colours along a scale


def _step(scale: Scale) -> float:
    return (2 * scale.limit if scale.diverging else 1.0) / COLOUR_LEVELS


def _level_indices(scale: Scale, values: np.ndarray) -> np.ndarray:
    """Values as whole COLOUR_LEVELS steps of the scale's range (weights 0..1, scores -limit..limit)."""
    return np.clip(np.round(values / _step(scale)), -_LEVEL_LIMIT, _LEVEL_LIMIT).astype(np.int64)


def _style(scale: Scale, fg: float, bg: float) -> Style:
    """Styles by colour, made once: a grid draws thousands of characters in a few hundred colours."""
    key = (scale, fg, bg)  # already rounded by the caller
    style = _STYLES.get(key)
    if style is None:
        style = _STYLES[key] = Style(color=scale.colour(fg), bgcolor=scale.colour(bg))
    return style


# A picture cell as one integer: its glyph and its two colour levels (see _cell_code). Glyphs 0-15 are
# QUADRANTS, 16 is '▀' over a background colour, 17 '▀' with no background (a half block's odd last row).
HALF, HALF_ALONE = 16, 17
GLYPHS = QUADRANTS + "▀▀"
_LEVEL_BITS = 21
_LEVEL_LIMIT = (1 << (_LEVEL_BITS - 1)) - 1  # far past any level a value on the scale has (colours saturate)


def _cell_code(glyph: np.ndarray, fg: np.ndarray, bg: np.ndarray) -> np.ndarray:
    offset = 1 << (_LEVEL_BITS - 1)
    return (glyph.astype(np.int64) << (2 * _LEVEL_BITS)) | ((fg + offset) << _LEVEL_BITS) | (bg + offset)


_CELLS: dict = {}  # (scale, code) -> (glyph, Style)
_SEGMENTS: dict = {}  # (scale, code) -> Segment(glyph, Style)


def _decode(scale: Scale, code: int) -> tuple[str, Style]:
    """The (glyph, Style) a cell code stands for: the styles of _style, made once per colour pair."""
    offset, mask = 1 << (_LEVEL_BITS - 1), (1 << _LEVEL_BITS) - 1
    glyph = code >> (2 * _LEVEL_BITS)
    step = _step(scale)
    fg, bg = (((code >> _LEVEL_BITS) & mask) - offset) * step, ((code & mask) - offset) * step
    if glyph == HALF_ALONE:
        return GLYPHS[glyph], _fg_style(scale, fg)
    return GLYPHS[glyph], _style(scale, fg, bg)


def cells(scale: Scale, codes: list) -> list[tuple[str, Style]]:
    """Cell codes (a line of a picture) as (glyph, Style) pairs."""
    known = _CELLS
    out = []
    for code in codes:
        cell = known.get((scale, code))
        if cell is None:
            cell = known[(scale, code)] = _decode(scale, code)
        out.append(cell)
    return out


def segment_maker(scale: Scale):
    """codes -> Segments: cell codes as Segments, one object per distinct cell (a grid repeats a few
    hundred of them)."""
    known = _SEGMENTS.setdefault(scale, {})

    def make(code: int) -> Segment:
        segment = known[code] = Segment(*_decode(scale, code))
        return segment

    def segments(codes: list) -> list[Segment]:
        return [known.get(code) or make(code) for code in codes]

    return segments


def quadrant_codes(stack: np.ndarray, scale: Scale, ink_floor: float = 0.0) -> np.ndarray:
    """Matrices (n, rows, cols) as pictures of quadrant characters, 2 × 2 cells each: cell codes
    (n, lines, chars). Ink goes where the brighter cells are.

    Each character has two colours, so a block's cells split into its brighter (ink) and darker
    (background) half. ink_floor: no ink for cells dimmer than this (without colour the ink is all
    there is, so only attention worth seeing gets it).
    """
    count, rows, cols = stack.shape
    padded = np.zeros((count, rows + rows % 2, cols + cols % 2))
    padded[:, :rows, :cols] = np.nan_to_num(stack, nan=0.0)
    lines_, chars = padded.shape[1] // 2, padded.shape[2] // 2
    blocks = padded.reshape(count, lines_, 2, chars, 2).transpose(0, 1, 3, 2, 4).reshape(count, lines_, chars, 4)
    high, low = blocks.max(axis=-1), blocks.min(axis=-1)
    ink = (blocks >= ((high + low) / 2)[..., None]) & (_shares(scale, blocks) >= ink_floor)
    inked = ink.sum(axis=-1)
    two = (_shares(scale, high) - _shares(scale, low) >= CONTRAST) & (inked > 0) & (inked < 4)
    bits = (ink * np.array([8, 4, 2, 1])).sum(axis=-1)
    ink_mean = np.where(ink, blocks, 0).sum(axis=-1) / np.maximum(inked, 1)
    back_mean = np.where(ink, 0, blocks).sum(axis=-1) / np.maximum(4 - inked, 1)
    mean = _level_indices(scale, blocks.mean(axis=-1))
    solid = _shares(scale, blocks.mean(axis=-1)) >= max(0.25, ink_floor)
    # Colours to 1/200 of the scale: finer than a terminal's 256 levels a channel shows over the range,
    # and few enough that a grid's thousands of cells share a few hundred styles.
    glyph = np.where(two, bits, np.where(solid, len(QUADRANTS) - 1, 0))
    fg = np.where(two, _level_indices(scale, ink_mean), mean)
    bg = np.where(two, _level_indices(scale, back_mean), mean)
    return _cell_code(glyph, fg, bg)


def quadrant_cells(matrix: np.ndarray, scale: Scale, ink_floor: float = 0.0) -> list[list[tuple[str, Style]]]:
    """A matrix as lines of quadrant characters, 2 × 2 cells each (quadrant_codes as (glyph, Style) pairs)."""
    codes = quadrant_codes(np.asarray(matrix)[None], scale, ink_floor)[0]
    return [cells(scale, line) for line in codes.tolist()]


def half_block_codes(stack: np.ndarray, scale: Scale) -> np.ndarray:
    """Matrices (n, rows, cols) as lines of '▀': the upper cell in the glyph's colour, the lower one in the
    background's. Cell codes (n, ceil(rows / 2), cols)."""
    levels = _level_indices(scale, np.nan_to_num(np.asarray(stack, dtype=np.float64), nan=0.0))
    upper, lower = levels[:, 0::2], levels[:, 1::2]
    glyph = np.full(upper.shape, HALF)
    if lower.shape[1] < upper.shape[1]:  # an odd last row: no lower cell, no background
        glyph[:, -1] = HALF_ALONE
        lower = np.concatenate([lower, upper[:, -1:]], axis=1)
    return _cell_code(glyph, upper, lower)


def half_blocks(matrix: np.ndarray | None, scale: Scale) -> list[list[tuple[str, Style]]]:
    """A matrix as lines of '▀' (half_block_codes as (glyph, Style) pairs)."""
    if matrix is None:
        return []
    codes = half_block_codes(np.asarray(matrix, dtype=np.float64)[None], scale)[0]
    return [cells(scale, line) for line in codes.tolist()]


def _fg_style(scale: Scale, value: float) -> Style:
    return Style(color=scale.colour(value))


class HeadsGrid:
    """Every selected head's weights as a small picture: layers down, heads across.

    heads: [(layer, [HeadReport, ...]), ...]; mark: the (layer, head) shown in detail below, if any.
    """

    def __init__(self, layers: list[tuple[int, list]], title: str = "", mark: tuple[int, int] | None = None,
                 scale: Scale | None = None):
        self.layers = layers
        self.title = title
        self.mark = mark
        self.scale = scale or Scale.weights()
        self.across = max((len(heads) for _, heads in layers), default=0)
        self.label_width = max((len(f"L{layer}") for layer, _ in layers), default=2) + 1

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

    def layout(self, console: Console, width: int) -> tuple[int, bool]:
        """(characters across a thumbnail, half blocks?) at this width. With colour and room for a character
        per token: half blocks, every cell its own exact colour; else 2 × 2 cells a character."""
        first = next((head for _, heads in self.layers for head in heads if head.weights is not None), None)
        if first is None:
            return 0, False
        cols = first.weights.shape[1]
        per = (width - self.label_width) // max(1, self.across) - 1
        half = bool(console.color_system) and cols <= min(per, THUMB_MAX)
        return (cols, True) if half else (self.thumb_width(width), False)

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
            return text(Text("all-heads grid: the weights were not kept (see --rows/--cols or --full)",
                             style="yellow"))
        thumb, half = self.layout(console, width)
        cols = next(head.weights.shape[1] for _, heads in self.layers for head in heads if head.weights is not None)
        if thumb < 2:
            need = self.label_width + 3 * self.across
            return text(Text(f"all-heads grid: {self.across} heads need {need} columns, the terminal has {width}; "
                             "widen it or pick fewer heads with --head", style="yellow"))
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
        phrases = ["query rows ↓, key columns →",
                   "a cell: the strongest of a few tokens" if pooled else
                   "2 cells a character" if half else "2×2 cells a character"]
        if self.mark is not None:
            phrases.append("◂ the head in detail below")
        note = phrases[0]
        for phrase in phrases[1:]:
            if len(note) + 2 + len(phrase) <= width:
                note += "; " + phrase
        return out + text(Text(note, style="dim")) + text(legend(self.scale, width))

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
            stack = np.stack([np.asarray(heads[index].weights, dtype=np.float64) for index in indices])
            if half:
                codes = half_block_codes(stack, self.scale)
            else:
                bins = min(cols, 2 * thumb)
                row_bins = max(1, min(rows, round(rows * bins / cols)))
                codes = quadrant_codes(pool(stack, row_bins, bins), self.scale, ink_floor)
            for index, picture in zip(indices, codes.tolist()):
                out[index] = picture
        return out

    def thumbnail(self, weights: np.ndarray | None, thumb: int, ink_floor: float) -> list[list[tuple[str, Style]]]:
        """One head's thumbnail as lines of (glyph, Style): the grid's picture of it."""
        if weights is None:
            return []
        rows, cols = weights.shape
        bins = min(cols, 2 * thumb)
        row_bins = max(1, min(rows, round(rows * bins / cols)))
        return quadrant_cells(pool(weights, row_bins, bins), self.scale, ink_floor)


# -- other self-sizing pieces ------------------------------------------------------------------------

VECTOR_CELL = 7  # '-12.34'


class VectorTable:
    """Per-token vectors (q, k or v) of the tokens in span, as many dimensions as fit the width."""

    def __init__(self, rows: np.ndarray | None, tokens: list[str], title: str, span: tuple[int, int],
                 more: str = "--json has all"):
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
            yield Text(f"{self.what}: needs {need} columns, the terminal has {options.max_width}; {self.advice}",
                       style="yellow")
        else:
            yield self.renderable


class SideBySide:
    """Renderables next to each other when their natural widths fit, else one under another."""

    def __init__(self, parts: list, gap: int = 3):
        self.parts, self.gap = parts, gap

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        widths = [Measurement.get(console, options.update_width(10_000), part).maximum for part in self.parts]
        if sum(widths) + self.gap * (len(widths) - 1) <= options.max_width and len(self.parts) > 1:
            grid = Table.grid(padding=(0, self.gap))
            for width in widths:
                grid.add_column(width=width, overflow="fold")
            grid.add_row(*self.parts)
            yield grid
        else:
            yield Group(*self.parts)

