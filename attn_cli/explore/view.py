"""What `attn explore` draws, as Rich renderables built from the same pieces as `attn inspect`.

Nothing here knows about Textual: the app (explore/app.py) puts these renderables in its widgets.
The drawing itself is render/: `HeadsGrid` (thumbnails), `weights_heatmap`/`scores_heatmap`,
`overview_grid`, `head_summary`, `header`, `SideBySide`. What is added here is only what a
full-screen, selectable view needs on top: the geometry that maps a mouse click to a head or a
query row, the marks of the selection, and a side panel for one query token.
"""

from __future__ import annotations

import math
import re

import numpy as np
from rich.console import Console, ConsoleOptions, Group, RenderableType
from rich.segment import Segment
from rich.style import Style
from rich.text import Text

from attn_cli.analyses.inspect_report import HeadReport, InspectReport, TopKey
from attn_cli.render.grid import HeadsGrid, picture_lines
from attn_cli.render.heatmap import SINK, literal, row_label
from attn_cli.render.layout import SideBySide
from attn_cli.render.terminal import (
    SINK_INDEX,
    head_summary,
    head_title,
    overview_grid,
    scores_heatmap,
    weights_formula,
    weights_heatmap,
)

# What `v` cycles through: the names Model.inspect(variant=...) takes.
VARIANTS = ("baseline", "shared-k", "no-scale", "raw", "scoring=cosine")
GRID_METRICS = ("weights", "entropy", "asymmetry")
GRID_TITLE_LINES = 2  # HeadsGrid: its title, then the h0 h1 ... header, then the layers
GRID_FOOT_LINES = 2  # its note and legend
MARK = "▶"
NO_MARK = (-1, -1)  # HeadsGrid drawn with a mark that matches no head: the app places ◂ itself (mark_strips)


def variant_label(variant: str) -> str:
    return variant.removeprefix("scoring=")


def status_line(
    layer: int,
    head: int,
    query: int,
    token: str,
    page: str | None,
    paged: bool,
    hidden: int = 0,
    stack: str | None = None,
    picture: bool = False,
) -> Text:
    """One line that changes with every move: where the selection is and, with the focus on the "grid" or the
    selected head's "heatmap" or "panel", what ↑↓ and tab do there (`paged`: one page at a time; `hidden`: the
    selected head has lines below (1) or only above (-1) what its pane shows, which PgDn / PgUp reach; `stack`:
    an encoder–decoder model's stack shown; `picture`: the head is drawn over an image, ↑↓ move the query
    patch)."""
    line = Text(f"{stack + ' ' if stack else ''}layer {layer} head {head} · query {query}:", style="bold")
    line.append_text(literal(token, "bold cyan"))
    if page is not None:
        where = {
            "grid": f"tab: {'picture' if picture else 'heatmap'}",
            "heatmap": "tab: query panel",
            "panel": "tab: grid",
        }[page]
        line.append(
            " · ↑↓ "
            + ("layers" if page == "grid" else "query patch" if picture else "query rows")
            + ", "
            + (where if paged else "tab switches")
            + {1: ", PgDn more", -1: ", PgUp back"}.get(hidden, ""),
            style="dim",
        )
    return line


def detail_place(paged: bool, stacked: bool) -> str:
    """Where the selected head is drawn, for the help (a compact screen: a page of its own)."""
    if paged:
        return "on pages of their own: tab goes from the grid to the heatmap, to the query panel and statistics"
    return "below the grid" if stacked else "on the right of the grid"


# -- the all-heads grid ------------------------------------------------------------------------------


class CachedGrid(HeadsGrid):
    """HeadsGrid that records the geometry of its last rendering, so a click can be mapped to a head.

    (The app renders a report's grid once per width and keeps the lines; HeadsGrid draws all the
    thumbnails of a grid together.)
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.geometry: tuple[int, int] | None = None  # (thumb width, lines per layer)
        self.top = GRID_TITLE_LINES  # lines above the first layer (the title may wrap)
        self.mark_phrase = "◂ the selected head"  # its detail is beside the grid, below it or a page of its own

    def lines(self, console: Console, options: ConsoleOptions) -> list[list[Segment]]:
        thumb, half = self.layout(console, options.max_width)
        first = next((head.weights for _, heads in self.layers for head in heads if head.weights is not None), None)
        self.geometry = None
        if thumb >= 2 and first is not None:  # half blocks: two rows a line; else 2 × 2 cells a character
            lines = picture_lines(first.shape, thumb, half)
            self.geometry = (thumb, lines)
            title = len(Text(self.title).wrap(console, options.max_width)) if self.title else 0
            self.top = title + 1
        return super().lines(console, options)

    def head_at(self, x: int, y: int) -> tuple[int, int] | None:
        """The (layer, head) drawn at column x, line y of the last rendering, if any."""
        if self.geometry is None:
            return None
        thumb, lines = self.geometry
        row = y - self.top
        column = x - self.label_width
        if row < 0 or column < 0 or row >= lines * len(self.layers):
            return None
        layer, heads = self.layers[row // lines]
        index, within = divmod(column, thumb + 1)
        if index >= len(heads) or within >= thumb:
            return None
        return layer, heads[index].head


def mark_strips(strips: list, grid: CachedGrid, mark: tuple[int, int]) -> list:
    """The grid's lines (rendered with NO_MARK) with ◂ after the thumbnail of `mark`, as HeadsGrid draws it."""
    if grid.geometry is None:
        return strips
    from textual.strip import Strip

    thumb, lines = grid.geometry
    layer, head = mark
    for row, (number, heads) in enumerate(grid.layers):
        if number != layer:
            continue
        for column, record in enumerate(heads):
            if record.head == head:
                y = grid.top + row * lines
                x = grid.label_width + column * (thumb + 1) + thumb
                line = strips[y].extend_cell_length(x + 1, Style.null())
                strips = list(strips)
                strips[y] = Strip.join([line.crop(0, x), Strip([Segment("◂", Style(bold=True))]), line.crop(x + 1)])
                return strips
    return strips


def grid_thumb(report: InspectReport, height: int, width: int) -> int:
    """The widest thumbnail (2..16 characters) whose grid fits `height` lines and `width` columns."""
    first = next((head.weights for _, head in report.heads() if head.weights is not None), None)
    if first is None:
        return 2
    layers = len(report.layer_list())
    across = max(len(layer.heads) for layer in report.layers)
    label = max(len(f"L{layer.layer}") for layer in report.layers) + 1
    best = 2
    for thumb in range(2, min(16, math.ceil(first.shape[1] / 2)) + 1):
        fits_height = GRID_TITLE_LINES + GRID_FOOT_LINES + layers * picture_lines(first.shape, thumb, False) <= height
        if fits_height and label + across * (thumb + 1) <= width:
            best = thumb
    return best


GRID_MIN_WIDTH = 28  # the grid's note, 'query rows ↓, key columns →', on one line


def grid_width(report: InspectReport, thumb: int) -> int:
    across = max(len(layer.heads) for layer in report.layers)
    label = max(len(f"L{layer.layer}") for layer in report.layers) + 1
    return max(GRID_MIN_WIDTH, label + across * (thumb + 1))


def thumbnails_grid(report: InspectReport, mark: tuple[int, int] = NO_MARK) -> CachedGrid:
    layers = [(layer.layer, layer.heads) for layer in report.layers]
    stack = report.layer_list()[0].stack if report.layer_list() else None  # an encoder–decoder model's: say which
    return CachedGrid(
        layers, f"All {stack} heads" if stack else f"All heads · {variant_label(report.variant)}", mark=mark
    )


def grid_view(report: InspectReport, metric: str, mark: tuple[int, int]) -> RenderableType:
    """The all-heads view: weight thumbnails (HeadsGrid), or the entropy or asymmetry table of `attn inspect`."""
    if metric == "weights" and not report.matrices_left_out:
        return thumbnails_grid(report, mark)
    return table_view(report, metric, mark)


def table_view(report: InspectReport, metric: str, mark: tuple[int, int]) -> Group:
    """The entropy or asymmetry table of `attn inspect` and the selected head's value; "weights" without the
    whole matrices is the entropy's, saying why."""
    parts: list[RenderableType] = []
    if metric == "weights":
        parts.append(
            Text("thumbnails need the whole matrices (this text is long): mean entropy instead", style="yellow")
        )
        metric = "entropy"
    layer, head = mark
    value = _metric(report.head(layer, head), metric)
    parts.append(overview_grid(report, metric))
    parts.append(
        Text.assemble(
            ("selected: ", "dim"),
            (f"layer {layer} head {head}", "bold"),
            f" = {value:.2f}" if math.isfinite(value) else " not defined",
        )
    )
    return Group(*parts)


def _metric(head: HeadReport, metric: str) -> float:
    return head.symmetry.relative if metric == "asymmetry" else float(np.mean(head.entropy, dtype=np.float64))


# -- the selected head -------------------------------------------------------------------------------


def row_lines(lines: list[list[Segment]], tokens: list[str]) -> dict[int, int]:
    """Which rendered lines are heatmap rows, and of which query: {line number: query index}.

    A heatmap row line starts with its label ('3 sat', render/heatmap.row_label), so rows are found
    there and the heatmap is drawn by render/ unchanged.
    """
    rows = {}
    for number, line in enumerate(lines):
        plain = "".join(segment.text for segment in line)
        match = re.match(r"\s*(\d+) ", plain)
        if match:
            index = int(match.group(1))
            if index < len(tokens) and plain.lstrip().startswith(row_label(index, tokens[index]).plain):
                rows[number] = index
    return rows


def gutter(lines: list[list[Segment]], rows: dict[int, int], selected: int) -> list[list[Segment]]:
    """The lines behind a one-column gutter with ▶ beside the selected query row's line(s)."""
    mark, blank = Segment(MARK, Style(bold=True, color="yellow")), Segment(" ", Style.null())
    return [[mark if rows.get(number) == selected else blank, *line] for number, line in enumerate(lines)]


def head_matrix_view(
    head: HeadReport, tokens: list[str], layer: int, scores: bool, label: str = "", keys: list[str] | None = None
) -> RenderableType:
    """The selected head's weights (or scores) heatmap, exactly as `attn inspect` draws it (keys: the column
    tokens where they are not the rows', as a cross-attention head's)."""
    if scores:
        view = scores_heatmap(head, tokens, layer, keys=keys)
        if label:
            view.title = f"{label}: {view.title}"
        return view
    if not label:
        return weights_heatmap(head, tokens, layer, keys=keys)
    return weights_heatmap(
        head, tokens, layer, title=f"{label}: {head_title(layer, head)} · weights = {weights_formula(head)}", keys=keys
    )


def query_panel(
    head: HeadReport, tokens: list[str], query: int, label: str = "", keys: list[str] | None = None
) -> RenderableType:
    """The selected query token: its most-attended keys with weights, its entropy and self-weight (keys: the key
    tokens where they are not `tokens`; a cross-attention head has no self-weight, and says why)."""
    heading = Text.assemble(("query ", "dim"), (f"{query}:", "dim"), literal(tokens[query], "bold"))
    if label:
        heading = Text.assemble((f"{label} · ", "magenta"), heading)
    top = list(head.top[query])
    listed = [Text.assemble(("→ ", "dim"), (f"{key.index}:", "dim"), literal(key.token, "bold")) for key in top]
    if head.sink is not None:  # the learned sink's share of the row, the heatmap's ⟨sink⟩ column: last, apart
        top.append(TopKey(SINK_INDEX, SINK, float(head.sink[query])))
        listed.append(Text.assemble(("→ ", "dim"), (SINK, "italic")))
    pad = max((key.cell_len for key in listed), default=0)
    lines = [heading]
    for text, key in zip(listed, top):
        text.pad_right(pad - text.cell_len + 1)
        text.append(f"{key.weight:.2f} ")
        text.append("█" * max(0, round(key.weight * 10)), style="yellow")
        lines.append(text)
    allowed = _allowed(head, query, len(tokens if keys is None else keys))
    uniform = math.log(allowed) if allowed > 1 else 0.0
    lines += [
        Text.assemble(
            ("entropy ", "dim"), f"{head.entropy[query]:.2f}", (f" nats (uniform over {allowed}: {uniform:.2f})", "dim")
        ),
        self_weight_line(head, query, tokens, keys),
    ]
    return Group(*lines)


def self_weight_line(head: HeadReport, query: int, tokens: list[str], keys: list[str] | None) -> Text:
    """'self-weight 0.12', or for a cross-attention head why there is none (its report holds null)."""
    if keys is None or math.isfinite(head.self_weight[query]):
        return Text.assemble(("self-weight ", "dim"), f"{head.self_weight[query]:.2f}")
    from attn_cli.math.measures import cross_tokens

    return Text.assemble(
        ("self-weight ", "dim"),
        "not defined: ",
        (f"{cross_tokens(len(tokens), len(keys))}, so no key is the query itself", "dim"),
    )


def _allowed(head: HeadReport, query: int, tokens: int) -> int:
    """Keys the query may attend (the unmasked cells of its row), where the scores say so."""
    if head.scores is not None and head.window.rows[0] <= query < head.window.rows[1] and head.window.is_whole:
        return int(np.isfinite(head.scores[query]).sum())
    return tokens


def head_statistics(head: HeadReport, label: str = "") -> RenderableType:
    """Symmetry and score statistics of the head (terminal.head_summary, the lines under `attn inspect`)."""
    lines = head_summary(head)
    if label:
        lines = [Text(label, style="magenta")] + lines
    return Group(*lines)


def maps_view(
    layer: int,
    tokens: list[str],
    scores: bool,
    base: HeadReport,
    other: HeadReport | None = None,
    other_name: str = "",
    other_error: str = "",
    keys: list[str] | None = None,
    stack: str | None = None,
) -> RenderableType:
    """The selected head's heatmap (titled with its `stack`, an encoder–decoder model's); with a variant, the
    variant's beside the baseline's."""
    if other is None:
        maps: RenderableType = head_matrix_view(base, tokens, layer, scores, stack or "", keys)
    else:
        maps = SideBySide(
            [
                head_matrix_view(base, tokens, layer, scores, "baseline", keys),
                head_matrix_view(other, tokens, layer, scores, variant_label(other_name), keys),
            ]
        )
    return Group(maps, Text(other_error, style="yellow")) if other_error else maps


def panel_view(
    tokens: list[str],
    query: int,
    base: HeadReport,
    other: HeadReport | None = None,
    other_name: str = "",
    keys: list[str] | None = None,
) -> RenderableType:
    """The query panel and the head's statistics (for the baseline and the variant)."""
    if other is None:
        return Group(Text(""), query_panel(base, tokens, query, keys=keys), Text(""), head_statistics(base))
    name = variant_label(other_name)
    return Group(
        Text(""),
        SideBySide([query_panel(base, tokens, query, "baseline", keys), query_panel(other, tokens, query, name, keys)]),
        Text(""),
        head_statistics(base, "baseline"),
        head_statistics(other, name),
    )
