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
    parts: list[RenderableType] = [unit_list(report.tokens, "source tokens"),
                                   unit_list(report.target_tokens, "target tokens (decoder inputs)"),
                                   Text("teacher-forced: " + report.teacher_forcing_note, style="dim")]
    for stack in report.stacks:
        parts += [Rule(stack_title(stack)), render_report(stack, panels, per_head)]
    return Group(*parts)
