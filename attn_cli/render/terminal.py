"""Rich renderables for an InspectReport. Nothing here prints: the CLI does.

Every piece of text that came from the user's input (token strings) goes in as
a `Text` built by `literal()`, so Rich markup such as `[bold]` and terminal
control characters are shown as written, never interpreted. Nothing here takes
a width: each piece sizes itself to the width Rich gives it (render/heatmap.py, grid.py, layout.py).
"""

from __future__ import annotations

import math
from typing import Any, Protocol, TypeVar

import numpy as np
from rich import box
from rich.console import Group, RenderableType
from rich.style import Style
from rich.table import Table
from rich.text import Text

from attn_cli.analyses.inspect_report import HeadReport, InspectReport, TopKey
from attn_cli.data.document import counted
from attn_cli.data.selection import Panel
from attn_cli.render.grid import HeadsGrid
from attn_cli.render.heatmap import ABSENT, SINK, Heatmap, clip, literal, row_label, token_text
from attn_cli.render.layout import Fit, FitScreen, VectorTable
from attn_cli.render.scale import Scale, luminance, no_attention_note, stat

TOP_ROWS = 64  # query rows listed in the top table of a long text without a --rows window
SINK_INDEX = -1  # the ⟨sink⟩ entry of a top-keys row: the learned sink's share, at no key index

__all__ = [
    "Panel",
    "render_report",
    "header",
    "head_title",
    "literal",
    "weights_heatmap",
    "scores_heatmap",
    "heads_grid",
    "clip",
    "row_label",
]


def render_report(report: InspectReport, panels: set[Panel] | None = None, per_head: bool = False) -> RenderableType:
    """The whole terminal view. panels=None is the default view: every head at a glance, one in detail.
    per_head: weights coloured on each head's own scale (--scale head)."""
    heads = report.heads()
    parts: list[RenderableType] = [header(report, "attn inspect")]
    if report.variant != "baseline":
        mode = "injected into every layer (--propagate)" if report.propagate else "recomputed per layer"
        parts.append(Text(f"variant: {report.variant}, {mode}", style="magenta"))
    if report.pre_rope:
        parts.append(
            Text(
                "q and k before rotary position embeddings (--pre-rope): not the scores the model uses", style="magenta"
            )
        )
    if panels is None:
        shown = parts + default_view(report, heads, per_head)
        grid = next((part for part in shown if isinstance(part, HeadsGrid)), None)
        return Group(*shown) if grid is None else FitScreen(shown, grid)  # the grid sized to the screen
    if Panel.grid in panels:
        parts.append(heads_grid(report, per_head=per_head))
    if Panel.overview in panels:
        parts += [overview_grid(report, "entropy"), overview_grid(report, "asymmetry")]
    if Panel.symmetry in panels:
        formula = _symmetry_formula(heads[0][1]) if heads else "q·kᵀ·scale"
        parts.append(titled(f"Symmetry of the score matrix S = {formula}", symmetry_table(heads)))
    if Panel.stats in panels:
        parts.append(
            titled(
                "Scores against the √d argument: var(q·k) ≈ d·var(q)·var(k); the 1/√d scale divides it by d",
                score_stats_table(heads),
            )
        )
    tokens, keys = axes(report)
    for layer, head in heads:
        title = head_title(layer, head)
        if Panel.weights in panels:
            parts.append(measure_heatmap(head, tokens, layer, per_head, keys))
        if Panel.scores in panels:
            parts.append(scores_heatmap(head, tokens, layer, keys=keys))
        for name in ("q", "k", "v"):
            if Panel(name) in panels:
                parts.append(
                    VectorTable(
                        head.tensors.get(name),
                        tokens,
                        f"{title} · {name.upper()}",
                        shown_rows(head, len(tokens)),
                        "--json --include qkv has all",
                    )
                )
        if Panel.top in panels:
            parts.append(titled(f"{title} · most-attended keys", top_table(head, tokens)))
    return Group(*parts)


def render_batch(report, panels: set[Panel] | None = None, per_head: bool = False) -> RenderableType:
    """Several texts run as one padded batch: each one's view under a rule saying which it is."""
    from rich.console import Group
    from rich.rule import Rule

    parts = []
    for index, single in enumerate(report.reports):
        parts += [
            Rule(f"text {index + 1} of {len(report.reports)} ({report.padding_side} padding removed)"),
            render_report(single, panels, per_head),
        ]
    return Group(*parts)


def axes(report: InspectReport) -> tuple[list[str], list[str] | None]:
    """The row tokens' texts, and the column tokens' where they are other tokens (cross-attention), else None."""
    rows = [unit.text for unit in report.axis]
    return rows, None if report.keys is None else [unit.text for unit in report.keys]


def default_view(
    report: InspectReport, heads: list[tuple[int, HeadReport]], per_head: bool = False
) -> list[RenderableType]:
    """All heads as a grid, then the most focused one in detail: its weights and two lines of statistics."""
    tokens, keys = axes(report)
    parts: list[RenderableType] = []
    layer, head = heads[0]
    if len(heads) > 1:
        layer, head = most_focused(heads)
        parts.append(heads_grid(report, mark=(layer, head.head), per_head=per_head))
        parts.append(
            Text(
                f"In detail: layer {layer} head {head.head}, the most focused head (lowest mean entropy). "
                "Others: --layer L --head H; more: --show "
                f"{'top,stats' if report.words is not None else 'top,scores,stats'},overview",
                style="dim",
            )
        )
    parts.append(measure_heatmap(head, tokens, layer, per_head, keys))
    parts += head_summary(head)
    return parts


def measure_heatmap(
    head: HeadReport, tokens: list[str], layer: int, per_head: bool = False, keys: list[str] | None = None
) -> Heatmap:
    """The head's weights, or with --measure NAME that measure's matrix instead (the value-weighted norms with
    --measure norm). keys: the column tokens where they are not `tokens` (cross-attention)."""
    for measure, matrix in head.measured.items():
        return measured_heatmap(head, tokens, layer, measure.title, measure.column, matrix)
    return weights_heatmap(head, tokens, layer, per_head=per_head, keys=keys)


def heads_grid(report: InspectReport, mark: tuple[int, int] | None = None, per_head: bool = False) -> HeadsGrid:
    layers = [(layer.layer, layer.heads) for layer in report.layers]
    count = sum(len(heads) for _, heads in layers)
    title = (
        f"Every head's weights: {len(layers)} layer{'s' if len(layers) != 1 else ''} × "
        f"{max(len(heads) for _, heads in layers)} heads"
        if count > 1
        else "The head's weights"
    )
    return HeadsGrid(layers, title, mark=mark, per_head=per_head)


def head_summary(head: HeadReport) -> list[Text]:
    """Symmetry and the √d argument for one head, in two short lines."""
    sym = head.symmetry
    verdict = Text("symmetric", style="green") if sym.symmetric else Text("not symmetric", style="dim")
    lines = (
        [Text.assemble(("Symmetry", "bold"), " not defined: ", sym.reason)]
        if sym.reason
        else [
            Text.assemble(
                ("Symmetry", "bold"),
                f" of S = {_symmetry_formula(head)}: max |S−Sᵀ| {stat(sym.max_abs_diff)}, "
                f"‖S−Sᵀ‖/‖S‖ {stat(sym.relative)}: ",
                verdict,
            )
        ]
    )
    if head.sink is not None:  # a learned sink: the softmax's extra ⟨sink⟩ column, left out of the weights
        lines.append(
            Text.assemble(
                ("Sink", "bold"),
                f": the learned ⟨sink⟩ logit takes a mean {stat(float(head.sink.mean()))} of each row's softmax "
                f"(at most {stat(float(head.sink.max()))}), its column after the keys; each row sums to 1 with it, "
                "to 1 − it without (the weights, as eager returns them)",
            )
        )
    stats = head.score_stats
    if stats is not None:
        unscaled = "" if stats.unscaled_variance is None else f"; unscaled {stat(stats.unscaled_variance)}"
        lines.append(
            Text.assemble(
                ("Scores", "bold"),
                f": mean {stat(stats.mean)}, variance {stat(stats.variance)}"
                f"{unscaled}, d·var(q)·var(k) {stat(stats.predicted_unscaled_variance)} "
                f"(d = {stats.head_dim})",
            )
        )
    return lines


def _symmetry_formula(head: HeadReport) -> str:
    """What the symmetry was measured on: q·kᵀ·scale, or the softcapped scores the model uses."""
    return head.formula if head.formula and "tanh" in head.formula else "q·kᵀ·scale"


def head_title(layer: int, head: HeadReport) -> str:
    kv = "no projections" if head.kv_head is None else f"kv head {head.kv_head}"
    return f"layer {layer} · head {head.head} ({kv})"


def weights_heatmap(
    head: HeadReport,
    tokens: list[str],
    layer: int,
    title: str | None = None,
    formula: str | None = None,
    per_head: bool = False,
    keys: list[str] | None = None,
) -> Heatmap:
    """The weights heatmap with masked cells blank (their weight is exactly 0; their score is NaN);
    per_head: coloured from its own smallest to its largest weight."""
    title = title or f"{head_title(layer, head)} · weights = {formula or weights_formula(head)}"
    matrix = head.masked(head.weights)
    sink = None if head.sink is None else head.sink[slice(*head.window.rows)]  # the ⟨sink⟩ column of the rows shown
    return Heatmap(matrix, tokens, title, Scale.weights(matrix, per_head), head.window, keys=keys, sink=sink)


def measured_heatmap(head: HeadReport, tokens: list[str], layer: int, title: str, label: str, matrix) -> Heatmap:
    """--measure NAME: its matrix (--measure norm: the value-weighted norms ‖α·v·W_Oʰ‖), 0 up to its largest,
    masked cells blank."""
    values = head.masked(matrix)
    return Heatmap(
        values, tokens, f"{head_title(layer, head)} · {title}", Scale.magnitude(values), head.window, label=label
    )


def scores_heatmap(
    head: HeadReport, tokens: list[str], layer: int, scale: Scale | None = None, keys: list[str] | None = None
) -> Heatmap:
    if head.without_qkv is not None:  # weights-only: no scores were seen (an empty window says so, not the size)
        title = f"{head_title(layer, head)} · no scores: {head.without_qkv}"
        return Heatmap(None, tokens, title, scale, head.window, hint=ABSENT, keys=keys)
    title = f"{head_title(layer, head)} · scores = {scores_formula(head)}"
    return Heatmap(head.scores, tokens, title, scale or Scale.scores(head.scores), head.window, keys=keys)


def weights_formula(head: HeadReport) -> str:
    if head.without_qkv is not None:  # weights-only: the model's own softmax, its scores never seen
        return "the model's own softmax (weights only: no Q, K, V)"
    merged = " · over words" if head.merged else ""
    return f"softmax({scores_formula(head)}){merged}"


def scores_formula(head: HeadReport) -> str:
    """q·kᵀ·scale, or score(q, k) for a model's own scoring (the toy's bilinear and additive), which has no
    unscaled form (its score statistics say so)."""
    stats = head.score_stats
    if stats is not None and stats.unscaled_variance is None:
        return head.formula or "score(q, k)"  # softcapping's formula; a learned scoring has none
    return head.formula or f"q·kᵀ·{head.scale:.4g}"


def header(report, command: str) -> RenderableType:
    """Model, device, dtype and the tokens. report: an InspectReport or a CompareReport."""
    parts: list[RenderableType] = [model_line(report, command), unit_list(report.tokens, "tokens")]
    note = no_attention_note(report.model)
    if note is not None:  # a hybrid: its other layers are listed, the attention layers shown by their own index
        parts.append(Text(note, style="dim"))
    if report.model.attention_note:  # diffllama: what the weights shown are not
        parts.append(Text(f"note: {report.model.attention_note}", style="yellow"))
    words = report.words if isinstance(report, InspectReport) else None  # --words
    if words is not None:
        parts += [
            unit_list(words, "words"),
            Text(
                f"--words: {len(report.tokens)} tokens merged into {len(words)} words; attention to a word = "
                "the sum over its pieces, from a word = the mean over them (rows sum to 1). Scores are not "
                "merged; symmetry and score statistics are of the token-level scores.",
                style="dim",
            ),
        ]
    if report.truncated_from is not None:
        parts.append(Text(f"truncated from {report.truncated_from} tokens (--truncate)", style="yellow"))
    return Group(*parts)


def model_line(report, command: str) -> Text:
    """'attn inspect · minilm (bert, 6 layers × 12 heads, head dim 32) · cpu · float32'."""
    model = report.model
    kv = f", {model.kv_heads} kv heads" if model.kv_heads != model.heads else ""
    return Text.assemble(
        (command, "bold"),
        " · ",
        literal(model.name, "cyan"),
        f" ({model.architecture}, {counted(model.layers, 'layer')} × {counted(model.heads, 'head')}{kv}, "
        f"head dim {model.head_dim}"
        f"{', causal' if model.causal else ''}) · {report.device} · {report.dtype}",
    )


def unit_list(units, noun: str) -> Text:
    """'8 tokens: 0:[CLS]  1:hello …' (or words): numbered as the matrices' rows are, special ones dim italic."""
    text = Text(f"{len(units)} {noun}: ")
    for unit in units[:TOP_ROWS]:
        text.append(f"{unit.index}:", style="dim")
        text.append_text(literal(unit.text, "dim italic") if unit.special else token_text(unit.text))
        text.append("  ")
    if len(units) > TOP_ROWS:
        text.append(f"… and {len(units) - TOP_ROWS} more", style="dim")
    text.rstrip()
    return text


OVERVIEW = {
    "entropy": ("Mean entropy of each head's weight rows, nats", "bright = focused (low entropy)"),
    "asymmetry": ("Relative asymmetry ‖S−Sᵀ‖/‖S‖ of each head's scores", "bright = nearly symmetric"),
}


def overview_grid(report: InspectReport, metric: str) -> RenderableType:
    """Layers × heads, one number per head, coloured so the interesting heads stand out."""
    title, bright = OVERVIEW[metric]
    if metric == "asymmetry" and report.keys is not None:
        return Text(
            f"{title}: not defined for cross-attention heads (queries and keys are different tokens)", style="dim"
        )
    tokens = len(report.axis)
    if metric == "entropy":
        note = f"0 = one key, {math.log(tokens):.2f} = uniform over {tokens} tokens; {bright}"
        top = math.log(tokens) or 1.0
    else:
        note = "0 = symmetric, ≈1.41 = unrelated to Sᵀ, 2 = antisymmetric; " + bright
        top = math.sqrt(2)
    values = {(layer, head.head): _head_metric(head, metric) for layer, head in report.heads()}
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False, collapse_padding=True)
    table.add_column("layer", justify="right", style="dim", no_wrap=True)
    head_ids = [head.head for head in report.layer_list()[0].heads]
    for head_id in head_ids:
        table.add_column(f"h{head_id}", justify="right", no_wrap=True)
    scale = Scale.weights()
    for layer in report.layers:
        cells = []
        for h in layer.heads:
            value = values[(layer.layer, h.head)]
            share = 1 - min(1.0, value / top)
            rgb = scale.rgb(share)
            ink = "black" if luminance(rgb) > 0.45 else "white"
            cells.append(Text(f"{value:.2f}", style=Style(color=ink, bgcolor=scale.colour(share))))
        table.add_row(str(layer.layer), *cells)
    return Group(
        Text(title, style="bold"),
        Fit(table, "overview table", "widen the terminal, or pick heads with --head, or use --show grid"),
        Text(note, style="dim"),
    )


def _head_metric(head: HeadReport, metric: str) -> float:
    if metric == "asymmetry":
        return head.symmetry.relative
    return float(np.mean(head.entropy, dtype=np.float64))


class HasEntropy(Protocol):
    entropy: Any  # (T,) per query row, in nats


H = TypeVar("H", bound=HasEntropy)  # a head of any report: HeadReport, GeneratedHead


def most_focused(heads: list[tuple[int, H]]) -> tuple[int, H]:
    """The (layer, head) whose rows have the lowest mean entropy (the first of equals): the head a view shows in
    detail when several are selected. Any head with per-row `entropy` (an inspected or a generated head)."""
    return min(heads, key=lambda pair: float(np.mean(pair[1].entropy, dtype=np.float64)))


def symmetry_table(heads: list[tuple[int, HeadReport]]) -> Table:
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for name in ("layer", "head", "max |S−Sᵀ|", "‖S−Sᵀ‖/‖S‖", "symmetric"):
        table.add_column(name, justify="right", no_wrap=True)
    for layer, head in heads:
        sym = head.symmetry
        verdict = (
            Text("not defined", style="dim")
            if sym.symmetric is None
            else Text("yes", style="green")
            if sym.symmetric
            else Text("no", style="dim")
        )
        table.add_row(str(layer), str(head.head), stat(sym.max_abs_diff), stat(sym.relative), verdict)
    return table


def score_stats_table(heads: list[tuple[int, HeadReport]]) -> Table:
    """Score mean and variance with and without the scale, beside d·var(q)·var(k) (the √d argument)."""
    table = Table(
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        caption="unscaled: the variance without the scale; d·vq·vk: d·var(q)·var(k)",
        caption_justify="left",
    )
    for name in ("layer", "head", "mean", "variance", "unscaled", "d·vq·vk", "d"):
        table.add_column(name, justify="right", no_wrap=True)
    for layer, head in heads:
        stats = head.score_stats
        if stats is None:
            continue
        table.add_row(
            str(layer),
            str(head.head),
            stat(stats.mean),
            stat(stats.variance),
            stat(stats.unscaled_variance),
            stat(stats.predicted_unscaled_variance),
            str(stats.head_dim),
        )
    return table


def titled(title: str, table: Table, what: str | None = None) -> RenderableType:
    """A bold title on its own line (a table's own title would wrap to the table's width), then the table,
    or one line saying what to do where the table does not fit."""
    return Group(Text(title, style="bold"), Fit(table, what or title.split(":")[0]))


def shown_rows(head: HeadReport, tokens: int) -> tuple[int, int]:
    """Query rows a per-row table lists: the window's, or the first TOP_ROWS of a long text."""
    window = head.window
    return window.rows if window.is_partial else (0, min(tokens, TOP_ROWS))


def top_table(head: HeadReport, tokens: list[str]) -> Table:
    """Most-attended keys per query row: the window's rows, or the first TOP_ROWS of a long text."""
    start, stop = shown_rows(head, len(tokens))
    caption = (
        f"rows {start}-{stop - 1} of {len(tokens)}; pick others with --rows" if stop - start < len(tokens) else None
    )
    table = Table(box=box.SIMPLE_HEAD, caption=caption, caption_justify="left", pad_edge=False)
    table.add_column("query", no_wrap=True)
    table.add_column("attends to (weight)")
    table.add_column("entropy", justify="right", no_wrap=True)
    table.add_column("self", justify="right", no_wrap=True)
    for index in range(start, stop):
        keys = list(head.top[index])
        if head.sink is not None:  # the learned sink's share, ranked among the keys: the row sums to 1 with it
            keys = sorted([*keys, TopKey(SINK_INDEX, SINK, float(head.sink[index]))], key=lambda key: -key.weight)
        # Keys under 1% weight are noise on screen (the JSON keeps all k).
        row = [key for rank, key in enumerate(keys) if rank == 0 or key.weight >= 0.01]
        table.add_row(
            row_label(index, tokens[index]),
            keys_text(row, lambda key: "italic" if key.index == SINK_INDEX else "bold"),
            f"{head.entropy[index]:.2f}",
            _number(head.self_weight[index]),
        )
    return table


def _number(value: float) -> str:
    """Two decimals, or "—" where the value is not defined (a cross-attention head's self-weight)."""
    return f"{value:.2f}" if math.isfinite(value) else "—"


def keys_text(keys, style_of=lambda key: "bold") -> Text:
    """Top keys as 'token 0.40, token 0.21': each token literal, in style_of(key), its weight dim."""
    text = Text()
    for rank, key in enumerate(keys):
        text.append(", " if rank else "")
        text.append_text(token_text(key.token, style_of(key)))
        text.append(f" {key.weight:.2f}", style="dim")
    return text
