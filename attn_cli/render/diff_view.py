"""Rich renderables for a DiffReport: the most changed heads, then the top one side by side."""

from __future__ import annotations

from rich import box
from rich.columns import Columns
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from attn_cli.render.terminal import header, heatmap, heatmap_width, literal, weights_heatmap

SHOWN_HEADS = 12  # rows of the ranking table


def render_diff(report, width: int) -> RenderableType:
    a, b = report.a, report.b
    if report.mode == "models":
        intro = Text.assemble("A ", literal(a.model.name, "cyan"), " against B ", literal(b.model.name, "cyan"))
    else:
        intro = Text("A = the first text, B = the second")
    parts: list[RenderableType] = [header(a, "attn diff · A"), header(b, "attn diff · B"), intro]
    if not report.comparable:
        parts.append(Text(f"the texts have {len(a.tokens)} and {len(b.tokens)} tokens: rows cannot be matched, so "
                          "heads are ranked by the change of their entropy", style="yellow"))
    parts.append(ranking_table(report))
    top = report.heads[0]
    head_a, head_b = a.head(top.layer, top.head), b.head(top.layer, top.head)
    title = f"layer {top.layer} · head {top.head}"
    maps = [weights_heatmap(head_a, [t.text for t in a.tokens], f"A · {title}", width),
            weights_heatmap(head_b, [t.text for t in b.tokens], f"B · {title}", width)]
    if report.comparable:
        maps.append(heatmap(head_b.weights - head_a.weights, [t.text for t in a.tokens],
                            f"B − A · {title}", width))
    fits = sum(heatmap_width(len(r.tokens)) for r in (a, b)) + 2 <= width
    parts.append(Text(f"In detail: layer {top.layer} head {top.head}, the most changed head.", style="dim"))
    parts.append(Columns(maps[:2], padding=(0, 2)) if fits else Group(*maps[:2]))
    parts.extend(maps[2:])
    return Group(*parts)


def ranking_table(report) -> Table:
    shown = report.heads[:SHOWN_HEADS]
    table = Table(title=f"most changed heads ({len(shown)} of {len(report.heads)})", title_justify="left",
                  box=box.SIMPLE_HEAD)
    for column in ("layer", "head", "JS", "top-1 same", "entropy", "self-weight", "first token"):
        table.add_column(column, justify="right", no_wrap=True)
    for change in shown:
        same = "—" if change.top1_agreement is None else f"{change.top1_agreement:.0%}"
        js = "—" if change.js_divergence is None else f"{change.js_divergence:.3f}"
        table.add_row(str(change.layer), str(change.head), js, same,
                      *(f"{getattr(change, name).baseline:.2f} → {getattr(change, name).variant:.2f}"
                        for name in ("entropy", "self_weight", "first_token")))
    return table
