"""The terminal view of an encoder–decoder pair (analyses/seq2seq.PairReport): each stack as the inspect view
of its own report, under a rule saying what its rows and columns are."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.rule import Rule
from rich.text import Text

from attn_cli.render.terminal import render_report, unit_list

STACK_TITLES = {
    "encoder": "encoder self-attention · source rows × source columns",
    "decoder": "decoder self-attention (causal) · target rows × target columns",
    "cross": "cross-attention · target rows (queries) × source columns (keys)",
}


def stack_of(report) -> str:
    """The stack of one report of a pair: its layers say it."""
    return report.layers[0].stack if report.layers else "encoder"


def stack_title(report) -> str:
    return STACK_TITLES[stack_of(report)]


def render_pair(report, panels=None, per_head: bool = False) -> RenderableType:
    parts: list[RenderableType] = [
        unit_list(report.tokens, "source tokens"),
        unit_list(report.target_tokens, "target tokens (decoder inputs)"),
        Text("teacher-forced: " + report.teacher_forcing_note, style="dim"),
    ]
    for stack in report.stacks:
        parts += [Rule(stack_title(stack)), render_report(stack, panels, per_head)]
    return Group(*parts)


def render_pair_generate(report, per_head: bool = False) -> RenderableType:
    """attn generate on an encoder–decoder model: the decoder's view (its start token as the prompt), then the
    most focused cross-attention head as generated-token rows × source columns."""
    from attn_cli.render.generate_view import render_generate
    from attn_cli.render.heatmap import Heatmap
    from attn_cli.render.scale import Scale
    from attn_cli.render.terminal import most_focused

    decoder = report.decoder
    parts: list[RenderableType] = [
        unit_list(report.tokens, "source tokens"),
        Rule("decoder self-attention · generated-token rows × decoder tokens"),
        render_generate(decoder, per_head),
    ]
    pairs = [(layer.layer, head) for layer in report.cross for head in layer.heads]
    if pairs:
        layer, head = most_focused(pairs)
        from attn_cli.data.selection import Window

        # rows numbered as the decoder's tokens are: generated token i is decoder token prompt_tokens + i
        total, sources = len(decoder.tokens), len(report.tokens)
        parts += [
            Rule("cross-attention · generated-token rows × source columns"),
            Heatmap(
                head.weights,
                [token.text for token in decoder.tokens],
                f"cross layer {layer} · head {head.head}, the most focused",
                Scale.weights(head.weights, per_head),
                Window((decoder.prompt_tokens, total), (0, sources), total, sources),
                keys=[token.text for token in report.tokens],
            ),
        ]
    return Group(*parts)
