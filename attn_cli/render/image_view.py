"""The picture in the terminal: an image as a vision transformer saw it, with a head's attention laid over it.

Each character cell is two pixels stacked: '▀' drawn in the upper pixel's colour on the lower pixel's
background, so a W-wide picture is W × 2·lines pixels, square pixels on a usual 1:2 cell. The
attention of one query over the patch grid (rows × cols) is stretched over the same pixels (each pixel
takes its patch's weight) and laid over the image: the image is dimmed, and the heat colour of the
weights' scale rises over it as the weight does (brightest = the query's most attended patch). Without
colour (NO_COLOR, a pipe), the image is drawn in shades of its brightness and the attention as a
second picture in shades of weight. A --query patch is outlined: in cyan (MARK, a colour the heat scale never
takes) over the colour picture, in ASCII (+--+ and |) over the shaded ones; in a small picture, where a patch is a
pixel or two, the outline fills it.
"""

from __future__ import annotations

import numpy as np
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.measure import Measurement
from rich.segment import Segment
from rich.style import Style
from rich.table import Table
from rich.text import Text

from attn_cli.data.image import PatchGrid, query_row
from attn_cli.render.scale import SHADE_FLOOR, SHADES, Scale

MAIN_WIDTH = 64  # the selected head's picture: at most this many cells wide
MAIN_LINES = 24  # … and this many lines tall
DIM = 0.3  # how bright the image stays on the least attended patch
TINT = 0.5  # how much of the heat colour is laid over the most attended patch
MARK = (0, 229, 255)  # the query patch's outline: cyan, as in the HTML page (image_page.js); not on the heat scale


def resized(pixels: np.ndarray, width: int) -> np.ndarray:
    """(H, W, 3) uint8 → (h, width, 3) with h even and h/width = H/W: the pixels a picture `width` cells wide shows."""
    from PIL import Image

    height, wide = pixels.shape[:2]
    rows = max(2, 2 * round(width * height / wide / 2))
    return np.asarray(Image.fromarray(pixels).resize((width, rows), Image.Resampling.BOX))


def stretched(weights: np.ndarray, height: int, width: int) -> np.ndarray:
    """Patch weights (rows, cols) → (height, width): each pixel the weight of the patch it lies in."""
    rows, cols = weights.shape
    return weights[(np.arange(height) * rows) // height][:, (np.arange(width) * cols) // width]


def heat(shares: np.ndarray) -> np.ndarray:
    """(…) shares in [0, 1] → (…, 3) the weights' colours (the fixed scale's, brighter = more)."""
    scale = Scale("weights", 1.0)
    table = np.array([scale.rgb(level / 255) for level in range(256)], dtype=np.float64)  # (256, 3)
    return table[np.clip(np.round(shares * 255), 0, 255).astype(int)]


def overlay(pixels: np.ndarray, weights: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """The picture `width` cells wide: (h, width, 3) uint8 pixels, and each pixel's share (h, width) in [0, 1]
    of the patches' range of weights: 0 the least attended patch, 1 the most (a random model's nearly
    even attention still shows where it leans). The image stays visible everywhere: dimmed where the
    share is low, brightened and tinted with the weights' heat colour where it is high."""
    image = resized(pixels, width).astype(np.float64)
    share = stretched(spread(weights), image.shape[0], width)[..., None]  # (h, width, 1)
    mixed = image * (DIM + (1 - DIM) * share) * (1 - TINT * share) + heat(share[..., 0]) * TINT * share
    return np.clip(np.round(mixed), 0, 255).astype(np.uint8), share[..., 0]


def spread(weights: np.ndarray) -> np.ndarray:
    """Values (any shape) → shares in [0, 1] from the smallest to the largest (NaN as 0); all equal: all 1."""
    values = np.nan_to_num(np.asarray(weights, dtype=np.float64))
    low, high = float(values.min()), float(values.max())
    return np.ones_like(values) if high - low < 1e-12 else (values - low) / (high - low)


def query_box(grid: PatchGrid, query: tuple[int, int], height: int, width: int) -> tuple[int, int, int, int]:
    """The pixels of patch `query` (row, col) in a (height, width) picture, as stretched() lays the patches out:
    (top, bottom, left, right), inclusive. A patch narrower than a pixel gets the pixel it falls on."""
    row, col = query
    ys = np.nonzero((np.arange(height) * grid.rows) // height == row)[0]
    xs = np.nonzero((np.arange(width) * grid.cols) // width == col)[0]
    top, bottom = (ys[0], ys[-1]) if len(ys) else (row * height // grid.rows,) * 2
    left, right = (xs[0], xs[-1]) if len(xs) else (col * width // grid.cols,) * 2
    return int(top), int(bottom), int(left), int(right)


def outline_pixels(pixels: np.ndarray, box: tuple[int, int, int, int]) -> np.ndarray:
    """(h, w, 3) pixels with the box's border (one pixel wide) in MARK."""
    top, bottom, left, right = box
    marked = pixels.copy()
    marked[[top, bottom], left : right + 1] = MARK
    marked[top : bottom + 1, [left, right]] = MARK
    return marked


def outline_cells(lines: list[str], box: tuple[int, int, int, int]) -> list[str]:
    """Shaded lines (a line is two pixel rows) with the box (in pixels) outlined in ASCII: +--+ on its first
    and last line, | on its sides between."""
    top, bottom, left, right = box
    first, last = top // 2, bottom // 2
    marked = [list(line) for line in lines]
    for number in range(first, last + 1):
        if number in (first, last):
            marked[number][left : right + 1] = ["+"] + ["-"] * (right - left - 1) + ["+"] if right > left else ["+"]
        else:
            marked[number][left] = marked[number][right] = "|"
    return ["".join(line) for line in marked]


def shade(values: np.ndarray) -> list[str]:
    """Each row of values in [0, 1] as shade characters (' ' under SHADE_FLOOR, then ░ ▒ ▓ █)."""
    index = np.minimum(len(SHADES) - 1, (values * len(SHADES)).astype(int))
    return [
        "".join(" " if value < SHADE_FLOOR else SHADES[i] for value, i in zip(row, indices))
        for row, indices in zip(values, index)
    ]


class Picture:
    """One image with one query's attention over it, `width` cells wide (or as wide as there is room)."""

    def __init__(
        self,
        grid: PatchGrid,
        weights: np.ndarray | None,
        width: int = MAIN_WIDTH,
        title: str = "",
        lines: int = MAIN_LINES,
        with_image: bool = True,
        query: tuple[int, int] | None = None,
    ):
        height, wide = grid.pixels.shape[:2]
        self.grid, self.weights, self.title, self.query = grid, weights, title, query  # query: outlined
        self.with_image = with_image  # without colour: also the image in shades, beside the attention
        self.width = max(1, min(width, int(2 * lines * wide / height)))  # no taller than `lines`

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        width = min(self.width, options.max_width)
        return Measurement(width, width)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = max(1, min(self.width, options.max_width))
        if self.title:
            yield Text(self.title[:width], style="bold")
        weights = np.zeros((self.grid.rows, self.grid.cols)) if self.weights is None else self.weights
        pixels, share = overlay(self.grid.pixels, weights, width)
        box = None if self.query is None else query_box(self.grid, self.query, *share.shape)
        marked = (lambda lines: lines) if box is None else (lambda lines: outline_cells(lines, box))  # noqa: E731
        if console.color_system and not console.no_color:
            yield from colour_lines(pixels if box is None else outline_pixels(pixels, box))
            return
        # No colour: the attention in shades; the main picture also the image, in shades of its brightness
        # (stretched from its darkest to its brightest pixel),
        # beside it (or above it, when narrow)
        attention = marked(shade(share[0::2] / 2 + share[1::2] / 2))
        if not self.with_image:
            yield from (Text(line) for line in attention)
            return
        brightness = spread(resized(self.grid.pixels, width).mean(axis=2))  # (h, width), darkest 0 … brightest 1
        image = marked(shade(brightness[0::2] / 2 + brightness[1::2] / 2))
        if width * 2 + 2 <= options.max_width:
            yield from (Text(f"{left}  {right}") for left, right in zip(image, attention))
        else:
            yield from (Text(line) for line in image + attention)


def colour_lines(pixels: np.ndarray) -> RenderResult:
    """(h, w, 3) pixels, h even, as h/2 lines of '▀' (upper pixel the colour, lower the background)."""
    for top, bottom in zip(pixels[0::2], pixels[1::2]):
        for upper, lower in zip(top, bottom):
            yield Segment("▀", Style(color=_rgb(upper), bgcolor=_rgb(lower)))
        yield Segment.line()


def _rgb(pixel) -> str:
    return "#{:02x}{:02x}{:02x}".format(*tuple(int(channel) for channel in pixel))


def image_lines(grid: PatchGrid) -> Text:
    height, width = grid.pixels.shape[:2]
    specials = " ".join(grid.specials) or "none"
    return Text(
        f"image {grid.source} · {width}×{height} px as the model saw it · {grid.rows} × {grid.cols} "
        f"patches of {grid.patch_size} px (r0c0 top left, row by row) · its own tokens: {specials}",
        style="dim",
    )


def render_image_report(report, query: tuple[int, int] | None = None) -> RenderableType:
    """The head (the one selected, or the most focused) over the image, then every selected head small."""
    from attn_cli.render.terminal import most_focused

    grid = report.image
    heads = report.heads()
    parts: list[RenderableType] = [header_line(report), image_lines(grid)]
    if report.matrices_left_out:
        parts.append(
            Text(
                "the weights were left out (past the cell limit): pass --full, or fewer --layer/--head", style="yellow"
            )
        )
        return Group(*parts)
    layer, head = heads[0] if len(heads) == 1 else most_focused(heads)
    row, name = query_row(grid, head.weights, query)
    chosen = "" if len(heads) == 1 else " (the most focused head; --layer L --head H picks one)"
    outlined = "" if query is None else " (outlined)"
    parts += [
        Text(""),
        Text(f"layer {layer} head {head.head}: attention from {name}{outlined}{chosen}", style="bold"),
        Picture(grid, row, query=query),
        legend(row),
    ]
    if len(heads) > 1:
        parts += [
            Text(""),
            Text(
                f"every head: attention from {name}, each picture from its least to its most attended patch",
                style="bold",
            ),
            small_pictures(grid, heads, query),
        ]
    return Group(*parts)


def header_line(report, command: str = "attn inspect") -> Text:
    """The model line over an image, titled with the command as typed (`attn inspect`, as every other view is)."""
    model = report.model
    return Text.assemble(
        (command, "bold"),
        " · ",
        (model.name, "cyan"),
        f" ({model.architecture}, {model.layers} layers × {model.heads} heads, head dim "
        f"{model.head_dim}) · {report.device} · {report.dtype}",
    )


def legend(row: np.ndarray, what: str = "attention") -> Text:
    low, high = (float(np.nanmin(row)), float(np.nanmax(row))) if row.size else (0.0, 0.0)
    return Text(
        f"darkest = the least {what} on a patch ({low:.3g}) … brightest = the most ({high:.3g}); "
        f"the patches hold {float(np.nansum(row)):.3f} of it, the model's own tokens the rest",
        style="dim",
    )


def small_pictures(grid: PatchGrid, heads, query) -> RenderableType:
    """Every head as a small picture (as wide as the grid has columns, or twice), titled L·H, in a table
    as many across as fit."""
    return SmallPictures(
        grid, [(f"L{layer} H{head.head}", query_row(grid, head.weights, query)[0]) for layer, head in heads], query
    )


class SmallPictures:
    def __init__(self, grid: PatchGrid, pictures: list[tuple[str, np.ndarray]], query: tuple[int, int] | None = None):
        self.grid, self.pictures, self.query = grid, pictures, query

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = self.grid.cols * (2 if options.max_width >= 8 * (2 * self.grid.cols + 1) else 1)
        width = max(6, width)
        across = max(1, (options.max_width + 1) // (width + 1))
        table = Table.grid(padding=(0, 1))
        for start in range(0, len(self.pictures), across):
            table.add_row(
                *[
                    Picture(self.grid, weights, width, title, with_image=False, query=self.query)
                    for title, weights in self.pictures[start : start + across]
                ]
            )
        yield table


def render_image_rollout(report) -> RenderableType:
    """Rollout from [CLS] (or the patches' mean) over the image."""
    grid = report.image
    row, name = query_row(grid, report.matrix, None)
    layers = f"layers {report.layers[0]}-{report.layers[-1]}" if len(report.layers) > 1 else f"layer {report.layers[0]}"
    return Group(
        header_line(report, "attn rollout"),
        image_lines(grid),
        Text(""),
        Text(f"rollout from {name} over {layers} ({report.head_fusion} of the heads)", style="bold"),
        Picture(grid, row),
        legend(row, "rollout"),
    )
