"""Matrices as terminal pictures: 2 × 2 cells a quadrant character, or two rows a half block ('▀').

A picture cell is one integer (its glyph and two colour levels, see _cell_code), decoded once per
distinct value into a (glyph, Style) pair or a Rich Segment: a grid draws thousands of cells in a
few hundred colours. Used by the all-heads grid (render/grid.py) and `attn explore`.
"""

from __future__ import annotations

import numpy as np
from rich.segment import Segment
from rich.style import Style

from attn_cli.render.scale import Scale

# Quadrant characters by the cells they ink: upper-left 8, upper-right 4, lower-left 2, lower-right 1.
QUADRANTS = " ▗▖▄▝▐▞▟▘▚▌▙▀▜▛█"
CONTRAST = 0.08  # a 2×2 block whose values differ less than this is drawn as one colour


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


def _fg_style(scale: Scale, value: float) -> Style:
    return Style(color=scale.colour(value))
