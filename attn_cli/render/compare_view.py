"""Rich renderables for a CompareReport: what changed, in words, in a table, and side by side."""

from __future__ import annotations

from rich import box
from rich.columns import Columns
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from attn_cli.report import Change, CompareReport, HeadDiff, VariantSummary
from attn_cli.render.terminal import head_title, header, heatmap_width, weights_heatmap

PER_HEAD_ROWS = 12  # more compared heads than this: one row per layer (means)


def render_compare(report: CompareReport, width: int) -> RenderableType:
    mode = "injected into every layer (--propagate)" if report.propagate else "recomputed per layer from the real inputs"
    parts: list[RenderableType] = [header(report, "attn compare"), Text(f"variants {mode}", style="dim")]
    for name, summary in report.summaries.items():
        parts.append(Text.assemble((f"{name}", "bold magenta"), f" — {report.descriptions[name]}"))
        parts.append(Text("  " + summary_sentence(summary)))
    for name, layers in report.diffs.items():
        parts.append(diff_table(name, layers))
    parts.extend(side_by_side(report, width))
    return Group(*parts)


def summary_sentence(summary: VariantSummary) -> str:
    """The plain-words line: e.g. 'all 72 heads symmetric (max rel. asymmetry 0); mean self-weight 0.16 → 0.60; …'"""
    if summary.symmetric_heads == summary.heads:
        symmetric = f"all {summary.heads} heads symmetric" if summary.heads > 1 else "the head is symmetric"
    else:
        symmetric = f"{summary.symmetric_heads} of {summary.heads} heads symmetric"
    return (f"{symmetric} (max rel. asymmetry {summary.max_asymmetry:.2g}); "
            f"mean self-weight {_arrow(summary.self_weight)}; mean entropy {_arrow(summary.entropy)} nats; "
            f"score variance {_arrow(summary.score_variance, '.3g')}; "
            f"rows moved by {summary.js_divergence:.3f} nats JS on average; "
            f"same top-1 key in {summary.top1_agreement:.0%} of rows")


def _arrow(change: Change, spec: str = ".2f") -> str:
    return f"{change.baseline:{spec}} → {change.variant:{spec}}"


def diff_table(name: str, layers: list[tuple[int, list[HeadDiff]]]) -> Table:
    per_head = sum(len(heads) for _, heads in layers) <= PER_HEAD_ROWS
    title = f"baseline → {name}, per head" if per_head else f"baseline → {name}, mean over the selected heads of each layer"
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
    for column in ("layer", "head" if per_head else "heads", "asymmetry", "self-weight", "entropy", "score var",
                   "JS", "top-1 same"):
        table.add_column(column, justify="right")
    for layer, heads in layers:
        rows = [(str(diff.head), [diff]) for diff in heads] if per_head else [(f"{len(heads)}", heads)]
        for head_label, diffs in rows:
            table.add_row(str(layer), head_label, *_diff_cells(diffs))
    return table


def _diff_cells(diffs: list[HeadDiff]) -> list[str]:
    def mean(values) -> float:
        values = list(values)
        return sum(values) / len(values)

    def arrow(name: str, spec: str = ".2f") -> str:
        return _arrow(Change(mean(getattr(d, name).baseline for d in diffs),
                             mean(getattr(d, name).variant for d in diffs)), spec)

    return [arrow("asymmetry"), arrow("self_weight"), arrow("entropy"), arrow("score_variance", ".3g"),
            f"{mean(d.js_divergence for d in diffs):.3f}", f"{mean(d.top1_agreement for d in diffs):.0%}"]


def side_by_side(report: CompareReport, width: int) -> list[RenderableType]:
    """Weights heatmaps of baseline and each variant for the selected head, or the most changed one."""
    baseline = report.runs["baseline"]
    pairs = [(layer.layer, index) for layer in baseline for index in range(len(layer.heads))]
    parts: list[RenderableType] = []
    if len(pairs) > 2:
        first = next(iter(report.diffs))
        layer_pos, head_pos = max(
            ((li, hi) for li, (_, heads) in enumerate(report.diffs[first]) for hi in range(len(heads))),
            key=lambda pos: report.diffs[first][pos[0]][1][pos[1]].js_divergence,
        )
        pairs = [(baseline[layer_pos].layer, head_pos)]
        parts.append(Text(f"In detail: layer {baseline[layer_pos].layer} head "
                          f"{baseline[layer_pos].heads[head_pos].head}, the head {first} changes most "
                          "(largest JS divergence). Pick others with --layer and --head.", style="dim"))
    tokens = [token.text for token in report.tokens]
    runs = len(report.runs)
    fits = heatmap_width(len(tokens)) * runs + 2 * (runs - 1) <= width
    for layer, head_pos in pairs:
        layer_pos = next(i for i, entry in enumerate(baseline) if entry.layer == layer)
        maps = []
        for name, run in report.runs.items():
            head = run[layer_pos].heads[head_pos]
            maps.append(weights_heatmap(head, tokens, f"{name} · {head_title(layer, head)}",
                                width // runs if fits else width))
        parts.append(Columns(maps, padding=(0, 2)) if fits else Group(*maps))
    return parts
