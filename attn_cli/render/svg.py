"""SVG drawing for --save FILE.svg: heatmaps with full labels and a colour bar, the all-heads grid, and a
flow that lays heatmaps out left to right. Written by hand (no plotting library): one <rect> per cell.
Colours come from render/scale.py, the terminal's scales."""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape

import numpy as np

from attn_cli.data.selection import Window
from attn_cli.render.scale import CellFormat, Scale, luminance

FONT = "DejaVu Sans, Helvetica, Arial, sans-serif"
MAX_CELL, MIN_CELL = 28, 6  # px per heatmap cell
TARGET = 560  # px a heatmap aims for
# Heads drawn in full in one figure; past that many, inspect's figure shows the all-heads grid, generate's the most
# focused head (as the terminal does).
MAX_DETAIL = 16
GRID_TARGET = 900  # px across the all-heads grid
BAR_MIN = 80  # px: a colour bar is never shorter, whatever the rows
BAR_LABEL = 14  # px from a colour bar's bottom to its label's baseline
NUMBER_CHARS = 5  # characters of a number written in a cell ('-1.42', '1.00')
NOUNS = {"weights": "weight", "scores": "score", "magnitude": "norm"}


@dataclass
class Heat:
    """One heatmap of a figure: a matrix, what its rows and columns are, and how it is coloured."""

    title: str
    matrix: np.ndarray | None  # (rows, cols); NaN cells are left blank; None: not kept
    scale: Scale
    window: Window | None = None  # the part of the T × T matrix this is (rows, cols of `rows`/`cols`)
    rows: list[str] | None = None  # row labels; None: the figure's tokens
    cols: list[str] | None = None  # column labels; None: the same as the rows'
    caption: str = "rows: queries · columns: keys"
    noun: str | None = None  # the colour bar's label; None: the scale's ("weight", "score", "norm")
    # (rows,) a learned sink's share of each row: one more column after the keys, set apart and labelled ⟨sink⟩
    sink: np.ndarray | None = None


SINK = "⟨sink⟩"  # the learned sink logit's column of the softmax: not a key of the text
SINK_GAP = 0.5  # cells between the keys and the ⟨sink⟩ column


def text_width(text: str, size: float) -> float:
    """A generous estimate of a label's width in px (wide characters count double)."""
    return sum(2 if ord(ch) > 0x2E80 else 1 for ch in text) * size * 0.62


_ID = "\x00id\x00"  # where a document's own prefix goes in its ids (document() writes it)


class Svg:
    def __init__(self) -> None:
        self.parts: list[str] = []
        self.width = 0.0
        self.height = 0.0
        self.ids = 0

    def new_id(self, kind: str) -> str:
        """An id unique in this document, and across documents inlined in one page: numbered here, prefixed by
        document() with a digest of the document, so the same figure always gets the same ids (whatever was
        drawn before it in the process) and two different figures never share one."""
        self.ids += 1
        return f"{kind}{_ID}{self.ids}"

    def add(self, fragment: str, right: float, bottom: float) -> None:
        self.parts.append(fragment)
        self.width = max(self.width, right)
        self.height = max(self.height, bottom)

    def text(self, x, y, content, size=12, anchor="start", weight="normal", extra="") -> str:
        return (
            f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
            f'font-weight="{weight}"{extra}>{escape(content)}</text>'
        )

    def document(self, title: str) -> str:
        import hashlib

        width, height = math.ceil(self.width + 20), math.ceil(self.height + 20)
        text = (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" font-family="{FONT}">\n<title>{escape(title)}</title>\n'
            f'<rect width="100%" height="100%" fill="white"/>\n' + "\n".join(self.parts) + "\n</svg>\n"
        )
        prefix = hashlib.sha1(text.encode()).hexdigest()[:8]
        return text.replace(_ID, f"-{prefix}-")


def heatmap_svg(svg: Svg, x0: float, y0: float, heat: Heat, tokens: list[str]) -> tuple[float, float]:
    """One heatmap at (x0, y0) with full labels and its colour bar; returns its (width, height).
    tokens: the labels of rows and columns where `heat` names none of its own."""
    title, matrix, scale, window = heat.title, heat.matrix, heat.scale, heat.window
    if matrix is None:
        svg.add(svg.text(x0, y0 + 14, f"{title}: not kept (past the matrix size limit)", 13), x0 + 400, y0 + 20)
        return 400, 24
    rows, cols = matrix.shape
    row0, col0 = (window.rows[0], window.cols[0]) if window is not None and window.is_partial else (0, 0)
    row_names = heat.rows or tokens
    col_names = heat.cols or row_names
    row_tokens = [f"{row_names[row0 + i]}" for i in range(rows)]
    col_tokens = [f"{col_names[col0 + j]}" for j in range(cols)]
    cell = max(MIN_CELL, min(MAX_CELL, TARGET / max(rows, cols)))
    size = max(7.0, min(13.0, cell * 0.55))
    left = max(text_width(token, size) for token in row_tokens) + 8
    # Key labels stand upright, centred on their columns, when every one fits its column (a CJK character, a
    # digit); else all are slanted, so one axis never mixes the two (a slanted 我 reads as a different glyph).
    upright = all(text_width(token, size) <= cell - 2 for token in col_tokens)
    sink = None if heat.sink is None else np.asarray(heat.sink, dtype=np.float64)
    labels = col_tokens + ([] if sink is None else [SINK])
    upright = upright and (sink is None or text_width(SINK, size) <= cell - 2)
    top = size + 8 if upright else max(text_width(token, size) for token in labels) * 0.75 + 10
    # the title on two lines, head then formula, so neighbouring heatmaps' titles never overlap
    head_part, _, formula = (
        title.partition(" · weights = ") if " · weights = " in title else title.partition(" · scores = ")
    )
    kind = "weights = " if " · weights = " in title else "scores = " if formula else ""
    lines = [head_part] + ([kind + formula] if formula else [])
    out = [
        svg.text(x0, y0 + 15 + 17 * index, line, 14 if index == 0 else 12, weight="bold" if index == 0 else "normal")
        for index, line in enumerate(lines)
    ]
    title_width = max(text_width(line, 14) for line in lines)
    gx, gy = x0 + left, y0 + 26 + 17 * (len(lines) - 1) + top
    for j, token in enumerate(col_tokens):  # key labels: upright, or slanted up-right reading from the column
        cx = gx + (j + 0.5) * cell
        if upright:
            out.append(svg.text(cx, gy - 6, token, size, "middle"))
        else:
            out.append(svg.text(cx, gy - 5, token, size, extra=f' transform="rotate(-50 {cx:.1f} {gy - 5:.1f})"'))
    for i, token in enumerate(row_tokens):
        out.append(svg.text(gx - 5, gy + (i + 0.5) * cell + size * 0.35, token, size, anchor="end"))
    numbers = cell >= 22
    fmt = CellFormat.choose(matrix, scale, NUMBER_CHARS) if scale.diverging else CellFormat(2, True)
    for i in range(rows):
        for j in range(cols):
            label = f"{escape(row_tokens[i])} → {escape(col_tokens[j])}"
            _cell(svg, out, gx + j * cell, gy + i * cell, cell, float(matrix[i, j]), label, scale, fmt, numbers)
    out.append(
        f'<rect x="{gx:.2f}" y="{gy:.2f}" width="{cols * cell:.2f}" height="{rows * cell:.2f}" '
        'fill="none" stroke="#888" stroke-width="0.6"/>'
    )
    right = gx + cols * cell
    if sink is not None:
        right = sink_column(svg, out, right + SINK_GAP * cell, gy, cell, size, upright, sink, row_tokens, scale, fmt)
    bar_x = right + 18
    bar_h = max(BAR_MIN, rows * cell)
    out.append(colour_bar(svg, bar_x, gy, bar_h, scale, heat.noun))
    # The caption goes under the cells and under the colour bar's own label (a bar taller than a few rows
    # of cells ends lower than they do), so the two never share a line.
    caption = heat.caption + (" · per-head colour scale (min → max)" if scale.own else "")  # the bar: the range
    if sink is not None:
        caption += f" · {SINK}: the learned sink logit's share; each row sums to 1 with it"
    caption_y = gy + max(rows * cell, bar_h + BAR_LABEL) + 13
    out.append(svg.text(gx, caption_y, caption, 9, extra=' fill="#666"'))
    width = max(bar_x + 60 - x0, title_width, gx + text_width(caption, 9) - x0)
    height = caption_y + 9 - y0
    svg.add("\n".join(out), x0 + width, y0 + height)
    return width, height


def _cell(
    svg: Svg,
    out: list[str],
    x: float,
    y: float,
    cell: float,
    value: float,
    label: str,
    scale: Scale,
    fmt: CellFormat,
    numbers: bool,
) -> None:
    """One coloured cell at (x, y) with its hover title ("label: value") and, when numbers, its value written in
    it, black or white by the colour's lightness; nothing for a value that is not finite."""
    if not math.isfinite(value):
        return
    out.append(
        f'<rect x="{x:.2f}" y="{y:.2f}" width="{cell:.2f}" height="{cell:.2f}" fill="{scale.colour(value)}">'
        f"<title>{label}: {value:.4g}</title></rect>"
    )
    if numbers:
        ink = "black" if luminance(scale.rgb(value)) > 0.45 else "white"
        out.append(svg.text(x + cell / 2, y + cell / 2 + 3.5, fmt.text(value), 9, "middle", extra=f' fill="{ink}"'))


def sink_column(
    svg: Svg,
    out: list[str],
    x: float,
    y: float,
    cell: float,
    size: float,
    upright: bool,
    sink,
    row_tokens,
    scale: Scale,
    fmt: CellFormat,
) -> float:
    """The ⟨sink⟩ column at (x, y), in its own frame: each row's learned sink share, coloured and written as the
    weights are (with it each row sums to 1), headed ⟨sink⟩ as a key would be. Returns its right edge."""
    if upright:
        out.append(svg.text(x + cell / 2, y - 6, SINK, size, "middle", extra=' font-style="italic"'))
    else:
        cx = x + cell / 2
        out.append(
            svg.text(cx, y - 5, SINK, size, extra=f' font-style="italic" transform="rotate(-50 {cx:.1f} {y - 5:.1f})"')
        )
    numbers = cell >= 22
    for i, value in enumerate(sink.tolist()):
        label = f"{escape(row_tokens[i])} → {SINK} (the learned sink logit)"
        _cell(svg, out, x, y + i * cell, cell, value, label, scale, fmt, numbers)
    out.append(
        f'<rect x="{x:.2f}" y="{y:.2f}" width="{cell:.2f}" height="{len(sink) * cell:.2f}" '
        'fill="none" stroke="#888" stroke-width="0.6" stroke-dasharray="3 2"/>'
    )
    return x + cell


def colour_bar(
    svg: Svg,
    x: float,
    y: float,
    height: float,
    scale: Scale,
    noun: str | None = None,
    labels: tuple[str, str, str] | None = None,
) -> str:
    """A vertical colour bar, brightest at the top; labels: (top, middle, bottom), else the scale's."""
    gradient = svg.new_id("bar")
    stops = scale.stops(11)
    stop_tags = "".join(
        f'<stop offset="{index / 10:.2f}" stop-color="{scale.colour(value)}"/>'
        for index, value in enumerate(reversed(stops))
    )
    out = [
        f'<defs><linearGradient id="{gradient}" x1="0" y1="0" x2="0" y2="1">{stop_tags}</linearGradient></defs>',
        f'<rect x="{x:.1f}" y="{y:.1f}" width="12" height="{height:.1f}" fill="url(#{gradient})" '
        'stroke="#888" stroke-width="0.5"/>',
    ]
    ticks = labels or (scale.high_label, scale.middle_label, scale.low_label)
    for index, label in enumerate(ticks):
        ty = y + height * index / 2
        out.append(f'<line x1="{x + 12:.1f}" y1="{ty:.1f}" x2="{x + 16:.1f}" y2="{ty:.1f}" stroke="#444"/>')
        out.append(svg.text(x + 18, ty + 4, label, 10))
    noun = noun or NOUNS[scale.kind]
    out.append(svg.text(x + 6, y + height + BAR_LABEL, noun, 9, "middle", extra=' fill="#666"'))
    return "\n".join(out)


def grid_svg(
    svg: Svg, x0: float, y0: float, layers, scale: Scale, mark=None, per_head: bool = False
) -> tuple[float, float]:
    """Every head as a thumbnail: layers down, heads across, labelled; per_head: each head's colours span its
    own smallest → largest weight (the colour bar then says so instead of giving one range)."""
    across = max(len(heads) for _, heads in layers)
    first = next(head.weights for _, heads in layers for head in heads if head.weights is not None)
    rows, cols = first.shape
    thumb = max(24.0, min(96.0, GRID_TARGET / across - 8))
    cell_w, cell_h = thumb / cols, thumb / cols
    height = cell_h * rows
    which = "each head on its own scale, min → max" if per_head else "same colour scale"
    out = [svg.text(x0, y0 + 15, f"Every head's weights (query rows ↓, key columns →); {which}", 14, weight="bold")]
    gx, gy = x0 + 30, y0 + 40
    for index in range(across):
        out.append(
            svg.text(
                gx + index * (thumb + 8) + thumb / 2,
                gy - 6,
                f"h{layers[0][1][index].head}" if index < len(layers[0][1]) else "",
                11,
                "middle",
            )
        )
    for row, (layer, heads) in enumerate(layers):
        ty = gy + row * (height + 8)
        out.append(svg.text(gx - 6, ty + height / 2 + 4, f"L{layer}", 11, "end"))
        for index, head in enumerate(heads):
            tx = gx + index * (thumb + 8)
            matrix = head.weights
            if matrix is None:
                continue
            own = Scale.weights(head.masked(head.weights), per_head=True) if per_head else scale
            out.append(
                f"<g><title>layer {layer} head {head.head}</title>"
                f'<rect x="{tx:.1f}" y="{ty:.1f}" width="{thumb:.1f}" height="{height:.1f}" '
                f'fill="{scale.colour(0)}"/>'
            )
            for i in range(matrix.shape[0]):
                for j in range(matrix.shape[1]):
                    value = float(matrix[i, j])
                    if math.isfinite(value) and own.share(value) >= 0.02:
                        out.append(
                            f'<rect x="{tx + j * cell_w:.2f}" y="{ty + i * cell_h:.2f}" '
                            f'width="{cell_w + 0.05:.2f}" height="{cell_h + 0.05:.2f}" '
                            f'fill="{own.colour(value)}"/>'
                        )
            stroke = (
                ' stroke="#1a73e8" stroke-width="2"'
                if mark == (layer, head.head)
                else ' stroke="#bbb" stroke-width="0.5"'
            )
            out.append(
                f'<rect x="{tx:.1f}" y="{ty:.1f}" width="{thumb:.1f}" height="{height:.1f}" fill="none"{stroke}/></g>'
            )
    bottom = gy + len(layers) * (height + 8)
    right = gx + across * (thumb + 8)
    labels = ("its max", "", "its min") if per_head else None
    out.append(colour_bar(svg, right + 10, gy, min(bottom - gy - 8, 200), scale, labels=labels))
    svg.add("\n".join(out), right + 70, bottom + 16)
    return right + 70 - x0, bottom + 16 - y0


def flow(svg: Svg, x0: float, y0: float, items, tokens, limit: float = 1500) -> float:
    """Heatmaps left to right, wrapping at `limit` px; returns the y below them."""
    x, y, line = x0, y0, 0.0
    for heat in items:
        heat = heat if isinstance(heat, Heat) else Heat(*heat)  # (title, matrix, scale, window)
        width, height = heatmap_svg(Svg(), 0, 0, heat, tokens)  # measured first, to wrap before it
        if x > x0 and x + width > limit:
            x, y, line = x0, y + line + 24, 0.0
        heatmap_svg(svg, x, y, heat, tokens)
        x += width + 30
        line = max(line, height)
    return y + line + 24
