"""Interventions drawn: an AblationReport (the layers × heads grid of effects and the largest ones) and a PatchReport
(its recoveries), in the terminal and as figures (SVG heatmaps and HTML pages)."""

from __future__ import annotations

import numpy as np
from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from attn_cli.data.document import counted
from attn_cli.render.head_grid import CELL, cell, head_grid
from attn_cli.render.page_parts import one_run, report_title, svg_title
from attn_cli.render.scale import Scale
from attn_cli.render.svg import Heat, Svg, flow
from attn_cli.render.terminal import header, model_line, titled, unit_list

TOP = 5

METHOD_WORDS = {"zero": "zero-ablation", "mean": "mean-ablation", "resample": "resample-ablation"}


def heads_named(heads: list[tuple[int, int]]) -> str:
    """[(1, 0), (1, 1)] -> '1.0, 1.1': LAYER.HEAD, as --head takes them."""
    return ", ".join(f"{layer}.{head}" for layer, head in heads)


def signed(value: float) -> str:
    """An effect in five characters, its sign always shown: '+15.5', '+1.23', '+.042', '-.001', '+0'."""
    if value != value:
        return "    ·"
    size = abs(value)
    if size >= 99.5:
        return f"{value:+.0f}"
    if size >= 9.95:
        return f"{value:+.1f}"
    if size >= 0.9995:
        return f"{value:+.2f}"
    if size < 0.0005:
        return "    0"
    return f"{value:+.3f}".replace("0.", ".", 1)


class AblateView:
    """The whole view, sized to the width it is given when it is drawn."""

    def __init__(self, report):
        self.report = report

    def __rich_console__(self, console, options):
        yield render_ablate(self.report, options.max_width)


def ablation_line(report) -> str:
    """One ablation in a line (attn explore's z): what was removed, the metric clean and without it."""
    ablation = report.ablations[0]
    return (
        f"head {heads_named(ablation.heads)} removed: {report.measured} {report.clean:.4g} → {ablation.value:.4g} "
        f"({ablation.effect:+.4g}{_units(report)})"
    )


def render_ablate(report, width: int = 80) -> RenderableType:
    method = METHOD_WORDS[report.method]
    about = f"{method} · {report.measured} · clean {report.clean:.4g}{_units(report)}"
    if report.reference is not None:
        about += f" · replacements from {report.reference}"
    opening = header(report, "attn ablate") if report.texts == 1 else model_line(report, "attn ablate")
    parts: list[RenderableType] = [opening, Text(about)]
    if report.together and report.texts == 1:
        ablation = report.ablations[0]
        parts.append(
            Text.assemble(
                f"removing {heads_named(ablation.heads)} together: {report.metric} ",
                (f"{ablation.value:.4g}", "bold"),
                f" (effect {ablation.effect:+.4g}{_units(report)})",
            )
        )
        return Group(*parts)
    grid = report.grid()
    if grid is not None:
        layers, heads, effects = grid
        parts.append(_grid(report, layers, heads, effects, width))
    parts.append(_top(report))
    return Group(*parts)


def _grid(report, layers: list[int], heads: list[int], effects, width: int) -> RenderableType:
    title = f"effect of removing each head alone: {report.metric} ablated − clean{_units(report, ' in ')}"
    return head_grid(title, layers, heads, effects, Scale.scores(effects), signed, width)


def _units(report, before: str = " ") -> str:
    return before + report.units if report.units else ""


def _top(report) -> RenderableType:
    corpus = report.texts > 1
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("heads" if report.together else "head", no_wrap=True)
    table.add_column(report.metric, justify="right")
    table.add_column("effect", justify="right")
    if corpus:
        table.add_column("± std", justify="right")
        table.add_column("where largest", overflow="ellipsis", no_wrap=True, max_width=40)
    for ablation in report.top(TOP):
        cells = [heads_named(ablation.heads), f"{ablation.value:.4g}", signed(ablation.effect).strip()]
        if corpus:
            effect, text = ablation.examples[0]
            cells += [f"{ablation.std:.3g}", f"{signed(effect).strip()} {text}"]
        table.add_row(*cells)
    over = f" over {counted(report.texts, 'text')}, mean" if corpus else ""
    return titled(f"largest effects{over} (of {len(report.ablations)})", table)


# -- figure ---------------------------------------------------------------------------------------------


def _figure_grid(report):
    """(title, rows, cols, matrix) of the figure: the effects grid, or the one set removed together."""
    grid = report.grid()
    title = f"{report.measured}: ablated − clean{_units(report, ', ')} ({METHOD_WORDS[report.method]})"
    if grid is None:
        ablation = report.ablations[0]

        return title, ["together"], [heads_named(ablation.heads)], np.array([[ablation.effect]])
    layers, heads, effects = grid
    return title, [f"L{layer}" for layer in layers], [f"h{head}" for head in heads], effects


def ablate_items(report, per_head: bool = False) -> list[Heat]:
    title, rows, cols, matrix = _figure_grid(report)
    return [
        Heat(
            title,
            matrix,
            Scale.scores(matrix),
            rows=rows,
            cols=cols,
            caption="rows: layers · columns: heads",
            noun="effect",
        )
    ]


def ablate_page(report, per_head: bool = False) -> dict:
    title, rows, cols, matrix = _figure_grid(report)
    run = one_run(
        title,
        matrix,
        kind="scores",
        limit=Scale.scores(matrix).limit,
        rowTokens=rows,
        colTokens=cols,
        noun="effect ",
        lines=False,
        axes=["layer", "head"],
    )
    return {"runs": [run], "start": [0, 0], "caption": f"{report.measured}; clean {report.clean:.4g}{_units(report)}"}


# -- patch ----------------------------------------------------------------------------------------------


class PatchView:
    """A PatchReport, sized to the width it is given when it is drawn."""

    def __init__(self, report):
        self.report = report

    def __rich_console__(self, console, options):
        yield render_patch(self.report, options.max_width)


def recovery_text(value: float) -> str:
    """A recovery in five characters: ' 0.36', '-0.02', ' 1.00'."""
    return "    ·" if value != value else f"{value:5.2f}"


def render_patch(report, width: int = 80) -> RenderableType:
    source, into = ("clean", "corrupted") if report.direction == "denoising" else ("corrupted", "clean")
    parts: list[RenderableType] = [
        header(report, "attn patch"),
        unit_list(report.corrupt_tokens, "corrupted tokens"),
        Text(
            f"{report.direction}: the {into} run with one head's output from the {source} run"
            + (", one position at a time" if report.by_position else ", at every position")
        ),
        Text(
            f"{report.measured}: clean {report.clean_value:.4g}, corrupted {report.corrupt_value:.4g} · recovery = "
            "(patched − corrupted) / (clean − corrupted)",
            style="dim",
        ),
    ]
    if report.clean_value < report.corrupt_value:
        parts.append(
            Text(
                "warning: the corrupted text favours --target more than the clean one: the recovery scale runs "
                "backwards (swap --target and --foil, or the texts)",
                style="yellow",
            )
        )
    layers, heads, grid = report.grid()
    if report.by_position:
        parts.append(_positions_grid(report, layers, heads, grid, width))
    else:
        parts.append(_recovery_grid(layers, heads, grid, width))
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("head", no_wrap=True)
    if report.by_position:
        table.add_column("position", no_wrap=True)
    table.add_column("logit diff", justify="right")
    table.add_column("recovery", justify="right")
    for patch in report.top(TOP):
        cells = [f"{patch.layer}.{patch.head}"]
        if report.by_position:
            cells.append(f"{patch.position} {report.tokens[patch.position].text}")
        table.add_row(*cells, f"{patch.value:.4g}", f"{patch.recovery:.3f}")
    moved = "0, no change" if report.direction == "denoising" else "1, no change"
    parts.append(titled(f"the patches that move it most, farthest from {moved} (of {len(report.patches)})", table))
    return Group(*parts)


def _recovery_grid(layers: list[int], heads: list[int], grid, width: int) -> RenderableType:
    return head_grid(
        "recovery of each head patched alone", layers, heads, grid, Scale.scores(grid), recovery_text, width
    )


def _positions_grid(report, layers: list[int], heads: list[int], grid, width: int) -> RenderableType:
    """Rows: the tokens; columns: the heads that recover most at any position (as many as fit)."""

    rest = 0.0 if report.direction == "denoising" else 1.0
    reach = np.nan_to_num(np.abs(grid - rest)).max(axis=1)  # (layers, heads): each head's strongest position
    order = sorted(
        ((layer, head) for layer in range(len(layers)) for head in range(len(heads))), key=lambda p: -reach[p]
    )
    label = min(12, max(len(f"{t.index} {t.text}") for t in report.tokens))
    # the strongest heads that fit, drawn in layer and head order, as the figure and the page draw them
    shown = sorted(order[: max(1, (width - label - 1) // (CELL + 1))])
    scale = Scale.scores(grid)
    table = Table(box=None, show_header=True, pad_edge=False, padding=(0, 0, 0, 1), header_style="dim")
    table.add_column("", width=label, no_wrap=True, overflow="ellipsis", style="dim")
    for layer, head in shown:
        table.add_column(f"{layers[layer]}.{heads[head]}", width=CELL, justify="right", no_wrap=True)
    for position, token in enumerate(report.tokens):
        values = [float(grid[layer, position, head]) for layer, head in shown]
        cells = [cell(value, scale, recovery_text(value), True) for value in values]
        table.add_row(f"{position} {token.text}", *cells)
    what = f"the {len(shown)} heads that recover most" if len(shown) < len(order) else "every head"
    return titled(f"recovery of one head patched at one position (rows: positions · columns: {what})", table)


def _patch_grids(report) -> list[tuple[str, list[str], list[str], np.ndarray]]:
    """(title, rows, cols, matrix) per picture: the layers × heads recoveries, or per layer positions × heads."""
    layers, heads, grid = report.grid()
    cols = [f"h{head}" for head in heads]
    if not report.by_position:
        return [(f"recovery, {report.direction}", [f"L{layer}" for layer in layers], cols, grid)]
    rows = [f"{token.index} {token.text}" for token in report.tokens]
    return [
        (f"layer {layer}: recovery by position, {report.direction}", rows, cols, grid[index])
        for index, layer in enumerate(layers)
    ]


def patch_items(report, per_head: bool = False) -> list[Heat]:
    grids = _patch_grids(report)
    scale = Scale.scores(*(matrix for *_, matrix in grids))
    caption = "rows: positions · columns: heads" if report.by_position else "rows: layers · columns: heads"
    return [
        Heat(title, matrix, scale, rows=rows, cols=cols, caption=caption, noun="recovery")
        for title, rows, cols, matrix in grids
    ]


def patch_page(report, per_head: bool = False) -> dict:
    grids = _patch_grids(report)
    limit = Scale.scores(*(matrix for *_, matrix in grids)).limit
    axes = ["position", "head"] if report.by_position else ["layer", "head"]
    runs = [
        one_run(
            title,
            matrix,
            kind="scores",
            limit=limit,
            rowTokens=rows,
            colTokens=cols,
            noun="recovery ",
            lines=False,
            axes=axes,
        )
        for title, rows, cols, matrix in grids
    ]
    caption = (
        f"corrupted: {report.corrupt!r} · {report.measured}; clean {report.clean_value:.4g}, corrupted "
        f"{report.corrupt_value:.4g}"
    )
    return {"runs": runs, "start": [0, 0], "caption": caption}


# -- importance -----------------------------------------------------------------------------------------

CURVE_BAR = 30  # characters of the pruning curve's widest bar


class ImportanceView:
    """An ImportanceReport, sized to the width it is given when it is drawn."""

    def __init__(self, report):
        self.report = report

    def __rich_console__(self, console, options):
        yield render_importance(self.report, options.max_width)


def magnitude_text(value: float) -> str:
    """A non-negative magnitude in five characters: '0.813', '12.34', '123.4'."""
    if value != value:
        return "    ·"
    return f"{value:5.3f}" if value < 9.9995 else f"{value:5.2f}" if value < 99.995 else f"{value:5.1f}"


def render_importance(report, width: int = 80) -> RenderableType:
    parts: list[RenderableType] = [
        model_line(report, "attn importance"),
        Text(
            f"{counted(report.texts, 'text')}, {counted(report.predicted, 'predicted token')} · mean loss "
            f"{report.loss:.4g} nats · importance = mean over the texts of |∂loss/∂ξ|, ξ a gate on the head's output"
        ),
    ]
    heads = list(range(report.importance.shape[1]))
    title = "importance of each head (larger: removing it changes the loss more)"
    scale = Scale.magnitude(report.importance)
    parts.append(head_grid(title, report.layers, heads, report.importance, scale, magnitude_text, width))
    top = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    top.add_column("head", no_wrap=True)
    top.add_column("importance", justify="right")
    if report.texts > 1:
        top.add_column("± std over texts", justify="right")
    for layer, head, value in report.top(TOP):
        spread = float(report.spread[report.layers.index(layer), head])
        top.add_row(f"{layer}.{head}", f"{value:.4g}", *([f"{spread:.3g}"] if report.texts > 1 else []))
    parts.append(titled("most important heads", top))
    if report.pruning:
        parts.append(_curve(report))
    return Group(*parts)


def _curve(report) -> RenderableType:
    """The pruning curve as a table with a bar per step: heads removed (least important first) → loss."""
    largest = max(loss for _, loss in report.pruning) or 1.0
    order = report.order()  # least important first: the heads removed, in the order they go
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("removed", justify="right")
    table.add_column("loss", justify="right")
    table.add_column("")
    table.add_column("the step removes")
    before = 0
    for removed, loss in report.pruning:
        bar = Text("█" * max(1, round(CURVE_BAR * loss / largest)), style="cyan")
        table.add_row(str(removed), f"{loss:.4g}", bar, _heads_named(order[before:removed]))
        before = removed
    total = report.importance.size
    return titled(f"pruning curve: the loss with the least important heads removed (of {total})", table)


def _heads_named(heads: list[tuple[int, int]], shown: int = 3) -> str:
    """A step's removed heads as LAYER.HEAD, the first `shown` of them and how many more."""
    names = ", ".join(f"{layer}.{head}" for layer, head in heads[:shown])
    return names + (f" … (+{len(heads) - shown})" if len(heads) > shown else "")


def importance_items(report, per_head: bool = False) -> list[Heat]:
    rows = [f"L{layer}" for layer in report.layers]
    cols = [f"h{head}" for head in range(report.importance.shape[1])]
    scale = Scale.magnitude(report.importance)
    return [
        Heat(
            "importance |∂loss/∂ξ|",
            report.importance,
            scale,
            rows=rows,
            cols=cols,
            caption="rows: layers · columns: heads",
            noun="importance",
        )
    ]


def importance_page(report, per_head: bool = False) -> dict:
    """The page: the importance grid (its own 0 → largest scale); the pruning curve is in the SVG and the JSON."""
    rows = [f"L{layer}" for layer in report.layers]
    cols = [f"h{head}" for head in range(report.importance.shape[1])]
    run = one_run(
        "importance |∂loss/∂ξ|",
        report.importance,
        kind="norms",
        rowTokens=rows,
        colTokens=cols,
        noun="importance ",
        lines=False,
        axes=["layer", "head"],
    )
    caption = f"{counted(report.texts, 'text')}, mean loss {report.loss:.4g} nats; larger: removing the head changes the loss more"
    return {"runs": [run], "start": [0, 0], "caption": caption}


CHART_W, CHART_H = 420.0, 180.0


def importance_svg(svg: Svg, x: float, y: float, report, panels, looked_by, per_head) -> float:
    """Figure.svg of an ImportanceReport: the importance grid, then the pruning curve as a line chart."""
    svg_title(svg, x, y, report_title(report, "importance"))
    about = f"{counted(report.texts, 'text')}, {counted(report.predicted, 'predicted token')}, mean loss {report.loss:.4g} nats"
    svg.add(svg.text(x, y + 40, about, 12), x + len(about) * 7.5, y + 46)
    y = flow(svg, x, y + 60, importance_items(report), [])
    if not report.pruning:
        return y
    left, top = x + 50, y + 30
    svg.add(
        svg.text(x, y + 12, "pruning curve: loss (nats) with the least important heads removed", 13, weight="bold"),
        x + 480,
        y + 16,
    )
    removed = [step for step, _ in report.pruning]
    losses = [loss for _, loss in report.pruning]
    low, high = min(losses), max(losses)
    span = (high - low) or 1.0
    last = max(removed) or 1
    points = [
        (left + CHART_W * step / last, top + CHART_H - CHART_H * (loss - low) / span) for step, loss in report.pruning
    ]
    svg.add(
        f'<rect x="{left:.1f}" y="{top:.1f}" width="{CHART_W:.1f}" height="{CHART_H:.1f}" fill="none" stroke="#cbd5e0"/>',
        left + CHART_W,
        top + CHART_H,
    )
    path = " ".join(f"{px:.1f},{py:.1f}" for px, py in points)
    svg.add(f'<polyline points="{path}" fill="none" stroke="#2b6cb0" stroke-width="2"/>', left + CHART_W, top + CHART_H)
    for (px, py), (step, loss) in zip(points, report.pruning):
        svg.add(
            f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3" fill="#2b6cb0"><title>{step} removed: loss {loss:.4g}</title></circle>',
            px + 3,
            py + 3,
        )
    for value, py in ((high, top), (low, top + CHART_H)):
        svg.add(svg.text(x, py + 4, f"{value:.3g}", 11), left, py)
    bottom = top + CHART_H
    svg.add(svg.text(left, bottom + 16, "0", 11), left + 10, bottom + 20)
    svg.add(svg.text(left + CHART_W, bottom + 16, str(last), 11, anchor="end"), left + CHART_W, bottom + 20)
    svg.add(
        svg.text(left + CHART_W / 2, bottom + 30, "heads removed", 11, anchor="middle"), left + CHART_W, bottom + 36
    )
    return bottom + 44
