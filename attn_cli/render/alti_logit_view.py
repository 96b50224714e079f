"""Rich renderables for a LogitAttributionReport (attn attribute --method alti-logit): each input token's part of
the logit as a signed bar, where each layer's attention read it, the strongest heads, and the rest of the logit,
in 80 columns. And the SVG/HTML figure's pictures: the tokens' parts per layer and the heads' parts."""

from __future__ import annotations

import numpy as np
from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from attn_cli.render.scale import NEGATIVE, POSITIVE, Scale, hex_colour
from attn_cli.render.svg import Heat
from attn_cli.render.terminal import header, row_label, titled

BAR = 28  # cells of the longest bar
SHOWN_TOKENS = 24  # a longer text shows its tokens of largest part, in text order
SHOWN_HEADS = 6
SOURCES = 3  # each layer's strongest source positions
PLUS, MINUS = hex_colour(POSITIVE[-1]), hex_colour(NEGATIVE[-1])


def value_text(value: float) -> str:
    """+1.23, -0.54; a part under 0.005 in size is 0.00, unsigned (not "-0.00")."""
    return " 0.00" if abs(value) < 0.005 else f"{value:+.2f}"


def bar(value: float, largest: float) -> Text:
    """|value| / largest of BAR cells, orange for a positive part, blue for a negative one."""
    cells = BAR * abs(value) / largest if largest > 0 else 0.0
    whole, half = int(cells), cells - int(cells) >= 0.5
    return Text("█" * whole + ("▌" if half else ""), style=PLUS if value >= 0 else MINUS)


def shown_positions(values: np.ndarray, count: int) -> list[int]:
    """Every position when there are at most `count`; else the `count` of largest |value|, in text order."""
    if len(values) <= count:
        return list(range(len(values)))
    return sorted(np.argsort(-np.abs(values), kind="stable")[:count].tolist())


def title_of(report) -> str:
    tokens = [token.text for token in report.tokens]
    target = report.target
    return (
        f"ALTI-Logit of {target['token']!r} after position {report.position} ({tokens[report.position]!r}): "
        f"logit {target['logit']:.2f}"
    )


def render_alti_logit(report, per_head: bool = False) -> RenderableType:
    tokens = [token.text for token in report.tokens]
    values = report.contributions
    largest = float(np.abs(values).max()) if len(values) else 0.0
    bars = Table(box=None, pad_edge=False, show_header=False)
    bars.add_column("token", no_wrap=True)
    bars.add_column("part", justify="right", no_wrap=True)
    bars.add_column("bar", no_wrap=True)
    shown = shown_positions(values, SHOWN_TOKENS)
    for position in shown:
        bars.add_row(
            row_label(position, tokens[position]),
            value_text(float(values[position])),
            bar(float(values[position]), largest),
        )
    parts: list[RenderableType] = [header(report, "attn attribute"), Text(title_of(report), style="bold")]
    what = "each input token's part (attention carried down through ALTI; orange +, blue −)"
    parts.append(titled(what, bars))
    if len(shown) < len(values):
        parts.append(Text(f"… {len(values) - len(shown)} more tokens, of smaller part (--json has all)", style="dim"))
    parts.append(
        titled("where each layer's attention read it (positions, not carried down)", sources_table(report, tokens))
    )
    parts.append(titled("strongest heads (their part of the logit, sources summed)", heads_table(report)))
    parts.append(rest_line(report))
    return Group(*parts)


def sources_table(report, tokens: list[str]) -> Table:
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("layer", no_wrap=True)
    table.add_column("attention", justify="right", no_wrap=True)
    table.add_column("read from")
    for layer, row in enumerate(report.sources):
        strongest = np.argsort(-np.abs(row), kind="stable")[:SOURCES]
        read = ", ".join(f"{j} {tokens[j]} {row[j]:+.2f}" for j in strongest if abs(row[j]) >= 0.005)
        table.add_row(f"L{layer}", value_text(float(row.sum())), read or "nothing")
    return table


def heads_table(report) -> Table:
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("head", no_wrap=True)
    table.add_column("part", justify="right", no_wrap=True)
    for layer, head, value in report.strongest_heads(SHOWN_HEADS):
        table.add_row(f"L{layer} H{head}", value_text(value))
    return table


def rest_line(report) -> Text:
    """The terms that are no token's, and the sum against the model's own logit."""
    terms = report.terms
    line = (
        f"the rest: embedding at {report.position} {terms['embedding']:+.2f} · FFNs {float(np.sum(terms['mlp'])):+.2f}"
        f" · attention biases {float(np.sum(terms['attention_bias'])):+.2f}"
        f" · final-norm bias {terms['final_norm_bias']:+.2f} · LM-head bias {terms['unembedding_bias']:+.2f}\n"
        f"tokens {float(report.contributions.sum()):+.2f} + the rest = {report.total:.2f}; "
        f"the model's logit {report.target['logit']:.2f}"
    )
    return Text(line, style="dim")


# -- the figure ---------------------------------------------------------------------------------------------


def alti_logit_items(report, per_head: bool = False) -> list[Heat]:
    """Layers × input tokens (each layer's attention carried down, and the tokens' sum), and layers × heads."""
    tokens = [token.text for token in report.tokens]
    layers = [f"L{layer}" for layer in range(len(report.per_layer))]
    by_layer = np.vstack([report.per_layer, report.contributions[None, :]])
    heads = [f"H{head}" for head in range(report.heads.shape[1])]
    return [
        Heat(
            title_of(report),
            by_layer,
            Scale.scores(by_layer),
            rows=[*layers, "all"],
            cols=tokens,
            caption="rows: each layer's attention, carried down through ALTI, and their sum · columns: input tokens",
            noun="logit",
        ),
        Heat(
            "each head's part of the logit",
            report.heads,
            Scale.scores(report.heads),
            rows=layers,
            cols=heads,
            caption="rows: layers · columns: heads",
            noun="logit",
        ),
    ]
