"""Rich renderables for a DiffReport: the most changed heads, then the top one side by side."""

from __future__ import annotations

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from attn_cli.render.heatmap import Heatmap
from attn_cli.render.layout import SideBySide
from attn_cli.render.scale import Scale, stat
from attn_cli.render.terminal import header, literal, titled, weights_heatmap

SHOWN_HEADS = 12  # rows of the ranking table


def render_diff(report, per_head: bool = False) -> RenderableType:
    a, b = report.a, report.b
    if report.mode == "models":
        intro = Text.assemble("A ", literal(a.model.name, "cyan"), " against B ", literal(b.model.name, "cyan"))
    else:
        intro = Text("A = the first text, B = the second")
    parts: list[RenderableType] = [header(a, "attn diff · A"), header(b, "attn diff · B"), intro]
    if not report.comparable:
        parts.append(
            Text(
                f"the texts have {len(a.tokens)} and {len(b.tokens)} tokens: rows cannot be matched, so "
                "heads are ranked by the change of their entropy",
                style="yellow",
            )
        )
    parts.append(ranking_table(report))
    top = report.heads[0]
    head_a, head_b = a.head(top.layer, top.head), b.head(top.layer, top.head)
    title = f"layer {top.layer} · head {top.head}"
    maps = [
        weights_heatmap(head_a, [t.text for t in a.tokens], top.layer, title=f"A · {title}", per_head=per_head),
        weights_heatmap(head_b, [t.text for t in b.tokens], top.layer, title=f"B · {title}", per_head=per_head),
    ]
    if report.comparable:
        change = head_b.weights - head_a.weights  # a signed change: the diverging scale, centred on 0
        maps.append(
            Heatmap(
                change,
                paired_tokens(report),
                f"B − A · {title}",
                Scale.scores(change),
                head_a.window,
                hint="widen",
                label="weight change",
            )
        )
    kind = top.label[0] if top.label[0] == top.label[1] else f"{top.label[0]} in A, {top.label[1]} in B"
    parts.append(
        Text(
            f"In detail: layer {top.layer} head {top.head}, the most changed head ({kind.replace('_', '-')}"
            " by attn heads' scores).",
            style="dim",
        )
    )
    relabelled = [c for c in report.heads if c.label[0] != c.label[1]]
    if relabelled:
        listed = ", ".join(f"{c.layer}.{c.head} {c.label[0]}→{c.label[1]}" for c in relabelled[:6])
        more = f" and {len(relabelled) - 6} more" if len(relabelled) > 6 else ""
        parts.append(Text(f"Heads whose type changed: {listed}{more}.", style="dim"))
    parts.append(SideBySide(maps[:2]))
    parts.extend(maps[2:])
    return Group(*parts)


def paired_tokens(report) -> list[str]:
    """The tokens of a B − A matrix: each one A's, or 'cat→dog' where B has another token there."""
    return [a.text if a.text == b.text else f"{a.text}→{b.text}" for a, b in zip(report.a.tokens, report.b.tokens)]


def ranking_table(report) -> RenderableType:
    shown = report.heads[:SHOWN_HEADS]
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, caption="A→B", caption_justify="left")
    for column in ("layer", "head", "JS", "top-1 same", "entropy", "self-weight", "first token"):
        table.add_column(column, justify="right", no_wrap=True)
    for change in shown:
        same = "—" if change.top1_agreement is None else f"{change.top1_agreement:.0%}"
        js = stat(change.js_divergence)
        table.add_row(
            str(change.layer),
            str(change.head),
            js,
            same,
            *(
                f"{stat(getattr(change, name).baseline)}→{stat(getattr(change, name).variant)}"
                for name in ("entropy", "self_weight", "first_token")
            ),
        )
    return titled(f"most changed heads ({len(shown)} of {len(report.heads)})", table)
