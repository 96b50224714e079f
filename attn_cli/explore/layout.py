"""The explorer's layout arithmetic: pure functions of sizes (columns, lines, tokens), nothing drawn.

How big the screen must be, whether it shows the grid and the selected head together or one page at a
time, how wide the grid is, whether the heatmap goes beside it or below it, how wide the detail view is,
and which window of a long text's matrix the heatmap shows.
"""

from __future__ import annotations

MIN_WIDTH, MIN_HEIGHT = 60, 16  # below this the screen says so instead of drawing
DETAIL_MIN = 40  # columns the selected head needs beside the grid; less: one above the other
ROW_WINDOW, COL_WINDOW = 32, 64  # long texts: the part of the selected head's matrix drawn
BODY_CHROME = 3  # lines around the body besides the header: the status, message and keys lines
COMPACT_WIDTH, COMPACT_HEIGHT = 100, 30  # below either: one page at a time (tab: the next), each full size
PAGES = ("grid", "heatmap", "panel")  # compact: the all-heads grid, the selected head's heatmap(s), its query panel
ROW_LABEL = 12  # a heatmap row label's token part (render/heatmap LABEL_TOKEN)


def too_small(width: int, height: int) -> bool:
    return width < MIN_WIDTH or height < MIN_HEIGHT


def compact(width: int, height: int) -> bool:
    """Too small for the grid and the selected head (heatmap, panel, statistics) together: at 80 × 24 beside
    each other the thumbnails are 2 × 2 characters and the panel is below the fold."""
    return width < COMPACT_WIDTH or height < COMPACT_HEIGHT


def next_page(page: str, step: int) -> str:
    return PAGES[(PAGES.index(page) + step) % len(PAGES)]


def grid_height(height: int, header_lines: int) -> int:
    """Lines the grid may take: the screen less the header and the lines around the body."""
    return max(6, height - header_lines - BODY_CHROME)


def thumbnails_room(width: int) -> int:
    """Columns the thumbnails may take: what the detail view beside them leaves."""
    return max(DETAIL_MIN, width - DETAIL_MIN)


def body_split(width: int, grid_columns: int, paged: bool = False) -> tuple[int, bool]:
    """(columns of the grid pane, stacked): the heatmap goes below the grid where beside it would leave it less
    than DETAIL_MIN columns (or on its own page, `paged`); stacked, the grid takes the whole width (less the
    scroll bar)."""
    stacked = paged or grid_columns + DETAIL_MIN > width
    return (width - 1 if stacked else grid_columns), stacked


def detail_width(width: int, grid_columns: int, stacked: bool) -> int:
    """Columns of the detail view: the width less the grid's and the padding between them (or the scroll bar)."""
    return width - 1 if stacked else width - grid_columns - 2


def head_window(
    query: int, tokens: int, width: int, keys: int | None = None
) -> tuple[tuple[int, int], tuple[int, int]]:
    """((first row, end row), (first key, end key)) of a long text's matrix around `query`, for a detail view
    `width` columns wide: ROW_WINDOW rows centred on the query, as many keys (one character each, at most
    COL_WINDOW) as fit beside the row labels, ending a little after the query. keys: the key tokens where they
    are not the `tokens` rows (cross-attention: target rows, source keys)."""
    keys = tokens if keys is None else keys
    label = len(f"{tokens} ") + ROW_LABEL
    across = max(8, min(COL_WINDOW, width - label - 4))
    r0 = max(0, min(query - ROW_WINDOW // 2, tokens - ROW_WINDOW))
    c0 = max(0, min(query - across + 8, keys - across))
    return (r0, min(tokens, r0 + ROW_WINDOW)), (c0, min(keys, c0 + across))
