"""Rich renderables for an InspectReport. Nothing here prints: the CLI does.

Every piece of text that came from the user's input (token strings) goes in as
a `Text` built by `literal()`, so Rich markup such as `[bold]` and terminal
control characters are shown as written, never interpreted.
"""

from __future__ import annotations

import math
from enum import Enum

import numpy as np
from rich import box
from rich.color import Color
from rich.console import Group, RenderableType
from rich.style import Style
from rich.table import Table
from rich.text import Text

from attn_cli.report import HeadReport, InspectReport
from attn_cli.selection import Window

LABEL_WIDTH = 14  # row labels: "12 token…"
CELL_WIDTH = 4  # ".40", "-3.1" or a 4-character key token
COMPACT_CELL_WIDTH = 1  # one shade character per key when numbers do not fit
SHADES = " ░▒▓█"
VECTOR_CELL_WIDTH = 8  # "-12.34" plus padding
TOP_ROWS = 64  # query rows listed in the top table of a long text without a --rows window


class Panel(str, Enum):
    overview = "overview"
    weights = "weights"
    scores = "scores"
    q = "q"
    k = "k"
    v = "v"
    symmetry = "symmetry"
    stats = "stats"
    top = "top"


def literal(text: str, style: str | Style = "") -> Text:
    """User text made safe to show: control characters escaped, markup never parsed."""
    shown = "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)
    return Text(shown, style=style)


def render_report(report: InspectReport, panels: set[Panel] | None, width: int) -> RenderableType:
    """The whole terminal view. panels=None is the default view (overview + one head in detail)."""
    heads = report.heads()
    parts: list[RenderableType] = [header(report, "attn inspect")]
    if report.variant != "baseline":
        mode = "injected into every layer (--propagate)" if report.propagate else "recomputed per layer"
        parts.append(Text(f"variant: {report.variant}, {mode}", style="magenta"))
    if report.pre_rope:
        parts.append(Text("q and k before rotary position embeddings (--pre-rope): not the scores the model uses",
                          style="magenta"))
    if panels is None:
        if len(heads) > 1:
            parts += [overview_grid(report, "entropy"), overview_grid(report, "asymmetry")]
            layer, head = most_focused(heads)
            parts.append(Text(f"In detail: layer {layer} head {head.head}, the most focused head selected "
                              "(lowest mean entropy). Pick others with --layer and --head.", style="dim"))
            heads = [(layer, head)]
        panels = {Panel.weights, Panel.top, Panel.symmetry, Panel.stats}
    elif Panel.overview in panels:
        parts += [overview_grid(report, "entropy"), overview_grid(report, "asymmetry")]
    if Panel.symmetry in panels:
        parts.append(symmetry_table(report, heads))
    if Panel.stats in panels:
        parts.append(score_stats_table(heads))
    tokens = [token.text for token in report.tokens]
    for layer, head in heads:
        title = head_title(layer, head)
        if Panel.weights in panels and head.norms is not None:  # --measure norm: shown instead of weights
            parts.append(weights_heatmap(head, tokens, f"{title} · value-weighted norms ‖α·v·W_Oʰ‖", width,
                                         head.norms))
        elif Panel.weights in panels:
            parts.append(weights_heatmap(head, tokens, f"{title} · weights = softmax(q·kᵀ·{head.scale:.4g})", width))
        if Panel.scores in panels:
            parts.append(heatmap(head.scores, tokens, f"{title} · scores = q·kᵀ·{head.scale:.4g}", width,
                                 head.window))
        for name in ("q", "k", "v"):
            if Panel(name) in panels:
                parts.append(vector_table(head.tensors.get(name), tokens, f"{title} · {name.upper()}", width,
                                          shown_rows(head, len(tokens))))
        if Panel.top in panels:
            parts.append(top_table(head, tokens, title))
    return Group(*parts)


def head_title(layer: int, head: HeadReport) -> str:
    kv = "no projections" if head.kv_head is None else f"kv head {head.kv_head}"
    return f"layer {layer} · head {head.head} ({kv})"


def heatmap_width(tokens: int) -> int:
    """Columns a numeric heatmap of this many tokens needs."""
    return LABEL_WIDTH + tokens * (CELL_WIDTH + 1) + 1


def header(report, command: str) -> RenderableType:
    """Model, device, dtype and the tokens. report: an InspectReport or a CompareReport."""
    model = report.model
    kv = f", {model.kv_heads} kv heads" if model.kv_heads != model.heads else ""
    line = Text.assemble(
        (command, "bold"), " · ", literal(model.name, "cyan"),
        f" ({model.architecture}, {_count(model.layers, 'layer')} × {_count(model.heads, 'head')}{kv}, "
        f"head dim {model.head_dim}"
        f"{', causal' if model.causal else ''}) · {report.device} · {report.dtype}",
    )
    tokens = Text(f"{len(report.tokens)} tokens: ")
    for token in report.tokens[:TOP_ROWS]:
        tokens.append(f"{token.index}:", style="dim")
        tokens.append_text(literal(token.text, "dim italic" if token.special else "bold"))
        tokens.append("  ")
    if len(report.tokens) > TOP_ROWS:
        tokens.append(f"… and {len(report.tokens) - TOP_ROWS} more", style="dim")
    parts: list[RenderableType] = [line, tokens]
    if report.truncated_from is not None:
        parts.append(Text(f"truncated from {report.truncated_from} tokens (--truncate)", style="yellow"))
    return Group(*parts)


def overview_grid(report: InspectReport, metric: str) -> RenderableType:
    """Layers × heads, one number per head: mean row entropy, or relative asymmetry of S."""
    title = {
        "entropy": "Mean entropy of each head's weight rows (nats; low = focused, "
        f"uniform over {len(report.tokens)} tokens = {math.log(len(report.tokens)):.2f})",
        "asymmetry": "Relative asymmetry ‖S−Sᵀ‖/‖S‖ of each head's score matrix "
        "(0 = symmetric, ≈1.41 = no relation between S and Sᵀ, 2 = antisymmetric)",
    }[metric]
    values = {(layer, head.head): _head_metric(head, metric) for layer, head in report.heads()}
    top = max(values.values()) or 1.0
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1))
    table.add_column("layer", justify="right", style="dim")
    head_ids = [head.head for head in report.layers[0].heads]
    for head_id in head_ids:
        table.add_column(f"h{head_id}", justify="right")
    for layer in report.layers:
        cells = [Text(f"{values[(layer.layer, h.head)]:.2f}", style=_cell_style(values[(layer.layer, h.head)] / top))
                 for h in layer.heads]
        table.add_row(str(layer.layer), *cells)
    return Group(Text(title, style="bold"), table)


def _head_metric(head: HeadReport, metric: str) -> float:
    if metric == "asymmetry":
        return head.symmetry.relative
    return float(np.mean(head.entropy, dtype=np.float64))


def most_focused(heads: list[tuple[int, HeadReport]]) -> tuple[int, HeadReport]:
    return min(heads, key=lambda pair: _head_metric(pair[1], "entropy"))


def symmetry_table(report: InspectReport, heads: list[tuple[int, HeadReport]]) -> Table:
    table = Table(title="Symmetry of the score matrix S = q·kᵀ·scale", title_justify="left", box=box.SIMPLE_HEAD)
    for name in ("layer", "head", "max |S−Sᵀ|", "‖S−Sᵀ‖/‖S‖", "symmetric"):
        table.add_column(name, justify="right")
    for layer, head in heads:
        sym = head.symmetry
        table.add_row(str(layer), str(head.head), f"{sym.max_abs_diff:.3g}", f"{sym.relative:.3g}",
                      Text("yes", style="green") if sym.symmetric else Text("no", style="dim"))
    return table


def weights_heatmap(head: HeadReport, tokens: list[str], title: str, width: int,
                    values: np.ndarray | None = None) -> RenderableType:
    """The weights (or another per-weight matrix: the norms) with masked cells blank (their score is NaN)."""
    values = head.weights if values is None else values
    if values is None or head.scores is None:
        return heatmap(values, tokens, title, width, head.window)
    return heatmap(np.where(np.isnan(head.scores), np.nan, values), tokens, title, width, head.window)


def score_stats_table(heads: list[tuple[int, HeadReport]]) -> Table:
    """Score mean and variance with and without the scale, beside d·var(q)·var(k) (the √d argument)."""
    table = Table(title="Scores against the √d argument: var(q·k) ≈ d·var(q)·var(k); the 1/√d scale divides it by d",
                  title_justify="left", box=box.SIMPLE_HEAD)
    for name in ("layer", "head", "mean", "variance", "unscaled var", "d·var(q)·var(k)", "d"):
        table.add_column(name, justify="right")
    for layer, head in heads:
        stats = head.score_stats
        if stats is None:
            continue
        unscaled = "—" if stats.unscaled_variance is None else f"{stats.unscaled_variance:.3g}"
        table.add_row(str(layer), str(head.head), f"{stats.mean:.3g}", f"{stats.variance:.3g}", unscaled,
                      f"{stats.predicted_unscaled_variance:.3g}", str(stats.head_dim))
    return table


def heatmap(matrix: np.ndarray | None, tokens: list[str], title: str, width: int,
            window: Window | None = None) -> RenderableType:
    """Query tokens as rows, key tokens as columns, cells coloured by value; masked (NaN) cells blank.

    window: the part of the whole (T, T) that `matrix` is; None for a whole matrix.
    """
    if matrix is None:
        return Text(f"{title}: not kept for {len(tokens)} tokens (past the matrix size limit); pick a "
                    "window with --rows A:B --cols C:D, or pass --full", style="yellow")
    window = window if window is not None and window.is_partial else None
    row0, col0 = (window.rows[0], window.cols[0]) if window else (0, 0)
    count = matrix.shape[1]
    finite = matrix[np.isfinite(matrix)]
    low = min(float(finite.min()), 0.0) if finite.size else 0.0  # weights start at 0
    high = float(finite.max()) if finite.size else 1.0
    compact = heatmap_width(count) > width
    fits = (width - LABEL_WIDTH) // (COMPACT_CELL_WIDTH + 1)
    if compact and count > fits:
        return Text(f"{title}: {count} key columns do not fit a {width}-column terminal; pick a window, "
                    f"e.g. --rows {row0}:{row0 + min(len(matrix), 40)} --cols {col0}:{col0 + fits}", style="yellow")
    caption = f"colour: {low:.2g} (dark) → {high:.2g} (bright)" + ("; shade = value, widen the terminal for numbers" if compact else "")
    table = Table(caption=caption, caption_justify="left",
                  box=None, padding=(0, 1 if not compact else 0), collapse_padding=True)
    table.add_column("query ↓ key →", no_wrap=True, max_width=LABEL_WIDTH, style="bold")
    for index in range(col0, col0 + count):
        label = str(index % 10) if compact else _clip(tokens[index], CELL_WIDTH)
        table.add_column(literal(label), justify="right", no_wrap=True,
                         width=COMPACT_CELL_WIDTH if compact else CELL_WIDTH)
    for index, row in enumerate(matrix.tolist(), start=row0):
        cells = [_heat_cell(value, low, high, compact) for value in row]
        table.add_row(row_label(index, tokens[index]), *cells)
    place = f" · rows {row0}-{row0 + len(matrix) - 1}, keys {col0}-{col0 + count - 1}" if window else ""
    return Group(Text(title + place, style="bold"), table)


def _heat_cell(value: float, low: float, high: float, compact: bool) -> Text:
    if not math.isfinite(value):  # masked
        return Text("")
    share = (value - low) / (high - low) if high > low else 1.0
    if compact:
        return Text(SHADES[min(len(SHADES) - 1, int(share * len(SHADES)))], style=_cell_style(share))
    return Text(_short_number(value), style=_cell_style(share))


def _short_number(value: float) -> str:
    """A value in at most 4 characters: .40, 1.0, -3.1, 12, 1e+3."""
    if 0 <= value <= 1:
        return f"{value:.2f}".lstrip("0") if value >= 0.005 else "0"
    text = f"{value:.1f}" if abs(value) < 10 else f"{value:.0f}"
    return text if len(text) <= CELL_WIDTH else f"{value:.0e}"


def _cell_style(share: float) -> Style:
    """Dark blue (0) → orange (1); dark text on bright cells so numbers stay readable."""
    share = min(1.0, max(0.0, share))
    low, high = (24, 28, 64), (250, 170, 40)
    rgb = tuple(int(a + (b - a) * share) for a, b in zip(low, high))
    return Style(bgcolor=Color.from_rgb(*rgb), color="black" if share > 0.55 else "white")


def vector_table(rows: np.ndarray | None, tokens: list[str], title: str, width: int,
                 span: tuple[int, int]) -> RenderableType:
    """Per-token vectors (q, k or v) of the tokens in span, as many dimensions as fit the terminal."""
    if rows is None:
        return Text(f"{title}: not captured", style="dim")
    dims = rows.shape[1]
    shown = max(1, min(dims, (width - LABEL_WIDTH - 6) // (VECTOR_CELL_WIDTH + 1)))
    notes = [f"dims 0-{shown - 1} of {dims}; the JSON has all"] if shown < dims else []
    if span[1] - span[0] < len(tokens):
        notes.append(f"tokens {span[0]}-{span[1] - 1} of {len(tokens)}")
    caption = "; ".join(notes) or None
    table = Table(caption=caption, caption_justify="left", box=box.SIMPLE_HEAD)
    table.add_column("token", no_wrap=True, max_width=LABEL_WIDTH)
    for dim in range(shown):
        table.add_column(f"d{dim}", justify="right", no_wrap=True, min_width=VECTOR_CELL_WIDTH - 2)
    for index in range(*span):
        table.add_row(row_label(index, tokens[index]), *(f"{value:.2f}" for value in rows[index][:shown].tolist()))
    return Group(Text(title, style="bold"), table)


def shown_rows(head: HeadReport, tokens: int) -> tuple[int, int]:
    """Query rows a per-row table lists: the window's, or the first TOP_ROWS of a long text."""
    window = head.window
    return window.rows if window.is_partial else (0, min(tokens, TOP_ROWS))


def top_table(head: HeadReport, tokens: list[str], title: str) -> Table:
    """Most-attended keys per query row: the window's rows, or the first TOP_ROWS of a long text."""
    start, stop = shown_rows(head, len(tokens))
    caption = f"rows {start}-{stop - 1} of {len(tokens)}; pick others with --rows" if stop - start < len(tokens) else None
    table = Table(title=f"{title} · most-attended keys", title_justify="left", box=box.SIMPLE_HEAD,
                  caption=caption, caption_justify="left")
    table.add_column("query", no_wrap=True)
    table.add_column("attends to (weight)")
    table.add_column("entropy", justify="right")
    table.add_column("self", justify="right")
    for index in range(start, stop):
        row = head.top[index]
        keys = Text()
        # Keys under 1% weight are noise on screen (the JSON keeps all k).
        for rank, key in enumerate(key for rank, key in enumerate(row) if rank == 0 or key.weight >= 0.01):
            keys.append(", " if rank else "")
            keys.append_text(literal(key.token, "bold"))
            keys.append(f" {key.weight:.2f}", style="dim")
        table.add_row(row_label(index, tokens[index]), keys,
                      f"{head.entropy[index]:.2f}", f"{head.self_weight[index]:.2f}")
    return table


def row_label(index: int, token: str) -> Text:
    return Text.assemble((f"{index} ", "dim"), literal(_clip(token, LABEL_WIDTH - len(str(index)) - 1)))


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
