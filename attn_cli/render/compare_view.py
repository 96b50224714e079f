"""Rich renderables for a CompareReport: what changed, in words, in a table, and side by side."""

from __future__ import annotations

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from attn_cli.analyses.compare import Change, CompareReport, HeadDiff, VariantSummary
from attn_cli.render.layout import SideBySide
from attn_cli.render.scale import stat
from attn_cli.render.terminal import head_title, header, titled, weights_heatmap

PER_HEAD_ROWS = 12  # more compared heads than this: one row per layer (means)


def render_compare(report: CompareReport, per_head: bool = False) -> RenderableType:
    mode = (
        "injected into every layer (--propagate)" if report.propagate else "recomputed per layer from the real inputs"
    )
    parts: list[RenderableType] = [header(report, "attn compare"), Text(f"variants {mode}", style="dim")]
    for name, summary in report.summaries.items():
        parts.append(Text.assemble((f"{name}", "bold magenta"), f" — {report.descriptions[name]}"))
        parts.append(Text("  " + summary_sentence(summary)))
    for name, layers in report.diffs.items():
        parts.append(diff_table(name, layers))
    parts.extend(side_by_side(report, per_head))
    return Group(*parts)


def summary_sentence(summary: VariantSummary) -> str:
    """The plain-words line: e.g. 'all 72 heads symmetric (max rel. asymmetry 0); mean self-weight 0.16 → 0.60; …'"""
    if summary.symmetric_heads == summary.heads:
        symmetric = f"all {summary.heads} heads symmetric" if summary.heads > 1 else "the head is symmetric"
    else:
        symmetric = f"{summary.symmetric_heads} of {summary.heads} heads symmetric"
    return (
        f"{symmetric} (max rel. asymmetry {stat(summary.max_asymmetry)}); "
        f"mean self-weight {_arrow(summary.self_weight, ' → ')}; mean entropy {_arrow(summary.entropy, ' → ')} "
        f"nats; score variance {_arrow(summary.score_variance, ' → ')}; "
        f"rows moved by {stat(summary.js_divergence)} nats JS on average; "
        f"same top-1 key in {summary.top1_agreement:.0%} of rows"
    )


def _arrow(change: Change, between: str = "→") -> str:
    """'0.16→0.60': one word, so a table never breaks it across lines."""
    return f"{stat(change.baseline)}{between}{stat(change.variant)}"


def diff_table(name: str, layers: list[tuple[int, list[HeadDiff]]]) -> RenderableType:
    per_head = sum(len(heads) for _, heads in layers) <= PER_HEAD_ROWS
    title = (
        f"baseline → {name}, per head" if per_head else f"baseline → {name}, mean over the selected heads of each layer"
    )
    table = Table(
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        caption="baseline→variant; JS: mean Jensen-Shannon divergence of the rows (nats); "
        "top-1: rows with the same most-attended key",
        caption_justify="left",
    )
    for column in (
        "layer",
        "head" if per_head else "heads",
        "asymmetry",
        "self",
        "entropy",
        "score var",
        "JS",
        "top-1",
    ):
        table.add_column(column, justify="right", no_wrap=True)
    for layer, heads in layers:
        rows = [(str(diff.head), [diff]) for diff in heads] if per_head else [(f"{len(heads)}", heads)]
        for head_label, diffs in rows:
            table.add_row(str(layer), head_label, *_diff_cells(diffs))
    return titled(title, table, f"the {name} table")


def _diff_cells(diffs: list[HeadDiff]) -> list[str]:
    def mean(values) -> float:
        values = list(values)
        return sum(values) / len(values)

    def arrow(name: str) -> str:
        return _arrow(
            Change(mean(getattr(d, name).baseline for d in diffs), mean(getattr(d, name).variant for d in diffs))
        )

    return [
        arrow("asymmetry"),
        arrow("self_weight"),
        arrow("entropy"),
        arrow("score_variance"),
        stat(mean(d.js_divergence for d in diffs)),
        f"{mean(d.top1_agreement for d in diffs):.0%}",
    ]


def shown_pairs(report: CompareReport) -> list[tuple[int, int]]:
    """(layer position, head position) of the heads shown side by side: the selected ones when there are at most
    two, else the one the first variant changes most (largest JS divergence)."""
    baseline = report.runs["baseline"]
    pairs = [(li, hi) for li, layer in enumerate(baseline) for hi in range(len(layer.heads))]
    if len(pairs) <= 2:
        return pairs
    first = next(iter(report.diffs))
    return [max(pairs, key=lambda pos: report.diffs[first][pos[0]][1][pos[1]].js_divergence)]


def side_by_side(report: CompareReport, per_head: bool = False) -> list[RenderableType]:
    """Weights heatmaps of baseline and each variant for the selected head, or the most changed one."""
    baseline = report.runs["baseline"]
    pairs = shown_pairs(report)
    parts: list[RenderableType] = []
    if sum(len(layer.heads) for layer in baseline) > 2:
        layer_pos, head_pos = pairs[0]
        parts.append(
            Text(
                f"In detail: layer {baseline[layer_pos].layer} head "
                f"{baseline[layer_pos].heads[head_pos].head}, the head {next(iter(report.diffs))} changes "
                "most (largest JS divergence). Pick others with --layer and --head.",
                style="dim",
            )
        )
    tokens = [token.text for token in report.tokens]
    for layer_pos, head_pos in pairs:
        maps = []
        for name, run in report.runs.items():
            entry = run[layer_pos]
            head = entry.heads[head_pos]
            maps.append(
                weights_heatmap(
                    head, tokens, entry.layer, title=f"{name} · {head_title(entry.layer, head)}", per_head=per_head
                )
            )
        parts.append(SideBySide(maps))
    return parts
