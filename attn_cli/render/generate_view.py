"""Rich renderables for a GenerateReport: the text, then what each generated token looked at."""

from __future__ import annotations

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from attn_cli.data.selection import Window
from attn_cli.render.heatmap import Heatmap
from attn_cli.render.scale import Scale
from attn_cli.render.terminal import header, keys_text, literal, most_focused, row_label, titled


def render_generate(report, per_head: bool = False) -> RenderableType:
    tokens = [token.text for token in report.tokens]
    count, total = report.prompt_tokens, len(report.tokens)
    story = Text.assemble(literal(report.prompt), " ")
    story.append_text(literal(report.text, "bold green"))
    mode = "sampled" if report.sample else "greedy"
    parts: list[RenderableType] = [
        header(report, "attn generate"),
        story,
        Text(
            f"{_generated(count, total)} ({mode}, stopped at {report.stop.replace('_', ' ')}); {_new(count, total)}",
            style="dim",
        ),
    ]
    pairs = [(layer.layer, head) for layer in report.layers for head in layer.heads]
    layer, head = most_focused(pairs)
    if len(pairs) > 1:
        parts.append(
            Text(
                f"In detail: layer {layer} head {head.head}, the most focused head selected. "
                "Pick others with --layer and --head.",
                style="dim",
            )
        )
    window = Window((count, total), (0, total), total)  # rows: the generated tokens
    title = f"layer {layer} · head {head.head} (kv head {head.kv_head}) · keys 0-{count - 1}: the prompt"
    parts.append(Heatmap(head.weights, tokens, title, Scale.weights(head.weights, per_head), window, hint="widen"))
    parts.append(titled("what each generated token was produced from", sources_table(head, tokens, count)))
    return Group(*parts)


def _generated(count: int, total: int) -> str:
    return "1 token generated" if total - count == 1 else f"{total - count} tokens generated"


def _new(count: int, total: int) -> str:
    return f"token {count} is new" if total - count == 1 else f"tokens {count}-{total - 1} are new"


def sources_table(head, tokens: list[str], count: int) -> Table:
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("generated", no_wrap=True)
    table.add_column("attended (weight)")
    generated = lambda key: "bold" if key.index < count else "bold green"  # noqa: E731
    digits = len(str(len(tokens) - 1))  # ' 9 the' above '10 cat', as in the heatmap's rows
    for offset, row in enumerate(head.top):
        table.add_row(row_label(count + offset, tokens[count + offset], digits), keys_text(row, generated))
    return table
