"""The lines the explorer shows, rendered once per look, head and width and kept: the header, the all-heads
grid, the selected head's heatmap(s) and its panel.

Rendering a Rich renderable is the slow part of a repaint, so each is rendered once (by the screen, or by
the model thread right after a run) into these caches, and a move only hands kept lines to the widgets.
Every cache entry holds the report or head its key names by id(), so an id is never reused while its
entry lives; forget() drops the entries of reports and heads the session let go. No Textual here: `line`
turns a list of Rich segments into what a widget shows (the app's: a Textual Strip).
"""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Console, ConsoleOptions
from rich.segment import Segment
from rich.text import Text

from attn_cli.explore.kinds import NoColour, header_view, heads_pictures, pictures_view, pictures_width
from attn_cli.explore.layout import body_split, compact, detail_width, grid_height, thumbnails_room
from attn_cli.explore.view import (
    CachedGrid,
    grid_thumb,
    grid_view,
    grid_width,
    gutter,
    maps_view,
    mark_strips,
    panel_view,
    row_lines,
    table_view,
    thumbnails_grid,
)
from attn_cli.plumbing.errors import AttnError
from attn_cli.render.terminal import axes

HEADER_MAX_LINES = 6


class Drawn:
    """The caches of drawn lines, and how they are drawn: on `console` with options() (the screen's size)."""

    def __init__(
        self, console: Console, options: Callable[[], ConsoleOptions], line: Callable = list, no_color: bool = False
    ):
        self.console = console
        self.no_color = no_color  # NO_COLOR: the pictures over an image are drawn in shades (kinds.NoColour)
        self.options = options
        self.line = line
        self.headers: dict = {}  # (report, variant, width) → (report, view, lines)
        self.grid_lines: dict = {}  # (report, width) → (report, grid, lines)
        self.maps_lines: dict = {}  # (base, other, error, scores, width) → (base, other, lines, {line: query})
        self.panels: dict = {}  # (base, other, variant, query, width) → (base, other, lines)

    def render_lines(self, renderable, width: int) -> list[list[Segment]]:
        options = self.options().update(highlight=False, width=max(1, width), height=None)
        return self.console.render_lines(renderable, options, pad=False)

    def render(self, renderable, width: int) -> list:
        return [self.line(segments) for segments in self.render_lines(renderable, width)]

    def forget(self, reports: set[int], heads: set[int]) -> None:
        """Keep only the entries of these reports and heads (ids: Session.forget_old_texts)."""
        for cache, alive in (
            (self.headers, reports),
            (self.grid_lines, reports),
            (self.maps_lines, heads),
            (self.panels, heads),
        ):
            for key, entry in list(cache.items()):
                if id(entry[0]) not in alive:
                    cache.pop(key, None)

    # -- the header ---------------------------------------------------------------------------------
    def header_view(self, look, variant: str, width: int, stack: str | None = None):
        """(view, lines): the model line and the tokens of `attn inspect`'s header, then the variant (a pair: its
        tokens and the `stack` shown; kinds.header_view), and its height in lines (at most HEADER_MAX_LINES) at
        `width`."""
        key = (id(look), variant, width, stack)
        if key not in self.headers:
            view = header_view(look, variant, stack)
            self.headers[key] = (look, view, min(HEADER_MAX_LINES, len(self.render_lines(view, width - 2))))
        return self.headers[key][1:]

    # -- the grid -----------------------------------------------------------------------------------
    def grid_layout(
        self, shown, metric: str, mark: tuple[int, int], size: tuple[int, int], header_lines: int
    ) -> tuple[int, bool]:
        """(columns of the grid pane, stacked) on a screen of `size`: the widest thumbnails that fit (or the
        table's width), then body_split. On a compact screen the grid has a page of its own: the thumbnails as
        wide as the screen allows, however tall (the pane scrolls to the selected layer)."""
        width, height = size
        paged = compact(width, height)
        if metric == "weights" and not shown.matrices_left_out:
            room = (10_000, width - 1) if paged else (grid_height(height, header_lines), thumbnails_room(width))
            columns = grid_width(shown, grid_thumb(shown, *room))
        elif metric == "pictures":  # every head small over the image: a layer a row, where there is room
            columns = min(width - 1 if paged else thumbnails_room(width), pictures_width(shown))
        else:
            columns = min(width - 1, self.table_width(shown, metric, mark))
        return body_split(width, columns, paged)

    def table_width(self, report, metric: str, mark: tuple[int, int]) -> int:
        """Columns the entropy/asymmetry table of `attn inspect` takes (its Fit part), measured by Rich."""
        from rich.measure import Measurement

        from attn_cli.render.layout import Fit

        view = table_view(report, metric, mark)
        parts = [part for group in view.renderables for part in getattr(group, "renderables", [group])]
        options = self.options().update_width(10_000)
        return (
            max(
                (Measurement.get(self.console, options, part).maximum for part in parts if isinstance(part, Fit)),
                default=66,
            )
            + 1
        )

    def grid(self, shown, metric: str, mark: tuple[int, int], width: int, query: int = 0) -> tuple:
        """(renderable, lines) of the grid: weight thumbnails rendered once per report and width (◂ placed
        here), or a table, or over an image every head's picture from the `query` token."""
        if metric != "weights" or shown.matrices_left_out:
            renderable = heads_pictures(shown, mark, query) if metric == "pictures" else grid_view(shown, metric, mark)
            if metric == "pictures" and self.no_color:
                renderable = NoColour(renderable)
            return renderable, self.render(renderable, width)
        _, grid, lines = self.thumbnail_lines(shown, width)
        return grid, mark_strips(lines, grid, mark)

    def thumbnail_lines(self, shown, width: int) -> tuple:
        """(report, grid, lines): the report's thumbnails grid at this width, rendered once (HeadsGrid.lines,
        the lines Rich would render, without Rich's pass over every one-character segment)."""
        key = (id(shown), width)
        if key not in self.grid_lines:
            grid: CachedGrid = thumbnails_grid(shown)
            options = self.options().update(highlight=False, width=max(1, width), height=None)
            self.grid_lines[key] = (shown, grid, [self.line(line) for line in grid.lines(self.console, options)])
        return self.grid_lines[key]

    # -- the selected head --------------------------------------------------------------------------
    def detail_lines(
        self, report, variant: str, heads: tuple, layer: int, query: int, scores: bool, width: int, panel: bool = True
    ) -> tuple:
        """(heatmap lines, {line: query row}, panel lines) of heads = (base, other, error), each rendered once
        per head, query, scores/weights and width (less the gutter's column)."""
        width -= 1  # the gutter
        base, other, error = heads
        tokens, keys = axes(report)  # keys: a cross-attention head's columns (the source), else None
        picture = report.image is not None  # over an image: the query's row drawn on the picture
        key = (id(base), id(other), error, scores, width, query if picture else None)
        if key not in self.maps_lines:
            if picture:
                view = pictures_view(report, base, other, variant, error, layer, query, scores)
                lines = self.render_lines(NoColour(view) if self.no_color else view, width)
                self.maps_lines[key] = (base, other, lines, {})
            else:
                stack = report.layers[0].stack if report.layers else None
                lines = self.render_lines(
                    maps_view(layer, tokens, scores, base, other, variant, error, keys, stack), width
                )
                self.maps_lines[key] = (base, other, lines, row_lines(lines, tokens))
        _, _, lines, rows = self.maps_lines[key]
        if not panel:
            return lines, rows, []
        panel_key = (id(base), id(other), variant, query, width)
        if panel_key not in self.panels:
            view = panel_view(tokens, query, base, other, variant, keys)
            self.panels[panel_key] = (
                base,
                other,
                [self.line([Segment(" "), *line]) for line in self.render_lines(view, width)],
            )
        return lines, rows, self.panels[panel_key][2]

    def detail(
        self, session, width: int, layer: int | None = None, head: int | None = None, part: str = "all"
    ) -> tuple[list, dict]:
        """(lines, {line: query row}) of the session's selected head in a detail view `width` columns wide: its
        heatmap(s) behind a gutter with ▶ at the query row, then the query panel and statistics (part "all"),
        or only the "heatmap" or only the "panel" (a compact screen's pages); an error line if the head cannot
        be shown. With (layer, head): only that head's heatmap rendered into the cache (a prefetch), ([], {})."""
        try:
            heads = session.selected_heads(width, layer, head)
        except AttnError as failure:
            return self.render(Text(f"error: {failure.message}", style="red"), width - 1), {}
        lines, rows, panel = self.detail_lines(
            session.report,
            session.variant,
            heads,
            session.layer if layer is None else layer,
            session.query,
            session.scores,
            width,
            panel=layer is None,
        )
        if layer is not None:  # a prefetch: the heatmap lines are what takes time
            return [], {}
        if part == "panel":
            return panel, {}
        heatmap = [self.line(line) for line in gutter(lines, rows, session.query)]
        return (heatmap if part == "heatmap" else heatmap + panel), rows

    def prerender(self, session, text: str, variant: str, variant_error: str, size: tuple[int, int]) -> None:
        """On the model thread, after a run: what showing `text` under `variant` will draw on a screen of `size`
        (the header, the grid's thumbnails, the selected head's heatmap and panel), into the caches."""
        report = session.look(text, "baseline")
        shown = session.look(text, variant) if variant != "baseline" and (text, variant) in session.reports else report
        _, header_lines = self.header_view(session.reports[(text, "baseline")], variant, size[0], session.stack)
        mark = (session.layer, session.head)
        columns, stacked = self.grid_layout(shown, session.metric, mark, size, header_lines)
        if session.metric == "weights" and not shown.matrices_left_out:
            self.thumbnail_lines(shown, columns)
        if report.matrices_left_out:  # the heatmap is a window around the query row, run when shown
            return
        width = detail_width(size[0], columns, stacked)
        layer, head, query = session.layer, session.head, min(session.query, len(report.tokens) - 1)
        heads = session.heads_to_show(text, variant, variant_error, layer, head, width)
        self.detail_lines(report, variant, heads, layer, query, session.scores, width)
