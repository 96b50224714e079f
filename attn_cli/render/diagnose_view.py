"""Rich renderables for `attn diagnose`: a header with the model's sink rate, one line per layer (its sink
rate, each head's first-token weight as a coloured glyph, the residual stream's median and largest entry),
then the largest entries and, over a corpus, the (layer, dim) pairs that recur. Nothing here prints.
Fits 80 columns for a 12-head model; past the width, the per-head strip is left out.
"""

from __future__ import annotations

from typing import Literal

from rich.console import Group, RenderableType
from rich.style import Style
from rich.table import Table
from rich.text import Text

from attn_cli.analyses.diagnose import DiagnoseReport
from attn_cli.data.document import counted
from attn_cli.render.scale import Scale, stat

BAR = 10  # characters of the sink-rate bar
NARROWEST_REST = 52  # the layer table's columns but the strip


class DiagnoseView:
    """The whole view, sized to the width it is given when it is drawn."""

    def __init__(self, report: DiagnoseReport):
        self.report = report

    def __rich_console__(self, console, options):
        yield render_diagnose(self.report, options.max_width)


def render_diagnose(report: DiagnoseReport, width: int) -> RenderableType:
    parts: list[RenderableType] = [_header(report), _layers(report, width)]
    if report.largest is not None:
        title = "Largest entries of the residual stream" + (
            " (each layer.dim's largest over the texts)" if report.texts > 1 else ""
        )
        parts += [Text(""), Text(title, style="bold"), _largest(report)]
        if report.texts > 1 and report.recurring:
            parts += [
                Text(""),
                Text(
                    "Recurring (layer, dim): in how many texts each held a massive entry, or the layer's largest",
                    style="bold",
                ),
                _recurring(report),
            ]
    parts.append(_footer(report))
    return Group(*parts)


def _header(report: DiagnoseReport) -> Text:
    info, thresholds = report.model, report.thresholds
    shape = f"{counted(info.layers, 'layer')} × {counted(info.heads, 'head')}"
    line = Text.assemble(
        ("attn diagnose", "bold"), f" · {info.name} ({info.architecture}, {shape}) · {report.device}, {report.dtype}\n"
    )
    texts = "1 text" if report.texts == 1 else f"{report.texts:,} texts"
    source = "" if report.source == "arguments" else f" from {report.source}"
    line.append(f"{texts}{source}, {report.tokens:,} tokens" + ("" if report.texts == 1 else "; means over the texts"))
    if report.interrupted:
        line.append(f"\nstopped by Ctrl-C: these are the {report.texts:,} texts done", style="bold yellow")
    if report.truncated:
        line.append(f"\n{report.truncated} texts were cut to the model's positions (--truncate)", style="yellow")
    line.append("\nSink rate ")
    line.append(f"{report.sink_rate:.2f}", style="bold")
    line.append(
        f": the share of heads whose weight on token 0, averaged over the rows, exceeds "
        f"ε = {thresholds['sink_epsilon']:g} (Gu et al. 2024)"
    )
    if report.massive is not None:
        line.append("\nMassive activations ")
        line.append(f"{report.massive:,}", style="bold")
        line.append(
            f": residual-stream entries over {thresholds['massive_ratio']:g}× their layer's median "
            f"magnitude and over {thresholds['massive_floor']:g} (Sun et al. 2024)"
        )
    return line


def _layers(report: DiagnoseReport, width: int) -> Table:
    strip = report.model.heads + 2 + NARROWEST_REST <= width  # each head's α as one glyph
    hidden = report.largest is not None
    table = Table(box=None, pad_edge=False, padding=(0, 1, 0, 0), header_style="dim")
    table.add_column("", no_wrap=True, style="dim")
    table.add_column("sink rate", no_wrap=True)
    if strip:
        table.add_column("α per head", no_wrap=True)
    if hidden:
        table.add_column("median |h|", justify="right", no_wrap=True)
        table.add_column("largest |h|", no_wrap=True)
        table.add_column("massive", justify="right", no_wrap=True)
    for layer in report.layers:
        if layer.sink_rate is None:  # a hybrid's linear-attention or state-space layer
            row: list = [f"L{layer.layer}", Text("no attention matrix", style="dim")]
        else:
            row = [f"L{layer.layer}", _bar(layer.sink_rate)]
        if strip:
            row.append(_strip(layer.first_token))
        if hidden:
            row += [
                stat(layer.median),
                _entry(layer.peak) if layer.peak is not None else "",
                Text(f"{layer.massive:,}", style="bold red" if layer.massive else "dim"),
            ]
        table.add_row(*row)
    return table


def _bar(share: float) -> Text:
    filled = round(share * BAR)
    return Text.assemble(f"{share:.2f} ", ("█" * filled, "dark_orange"), ("░" * (BAR - filled), "dim"))


def _strip(alpha: list[float]) -> Text:
    """One glyph a head: its first-token weight on the weights' colour scale (brighter and inkier = more)."""
    scale = Scale.weights()
    strip = Text()
    for value in alpha:
        strip.append(scale.shade(value) if scale.shade(value) != " " else "·", style=Style(color=scale.colour(value)))
    return strip


def _entry(entry) -> Text:
    """'10.5 [CLS] d99 33×': the value, its token (and position after 0), dimension and ratio to the median."""
    where = entry.token if entry.position == 0 else f"{entry.token}@{entry.position}"
    text = Text(f"{stat(entry.value)} ", style="bold red" if entry.massive else "")
    text.append(f"{_short(where)} d{entry.dim} ")
    text.append("" if entry.ratio is None else f"{stat(entry.ratio)}×", style="dim")
    return text


def _largest(report: DiagnoseReport) -> Table:
    table = Table(box=None, pad_edge=False, padding=(0, 2, 0, 0), header_style="dim")
    columns: tuple[tuple[str, Literal["left", "right"]], ...] = (
        ("layer", "right"),
        ("token", "left"),
        ("pos", "right"),
        ("dim", "right"),
        ("value", "right"),
        ("× median", "right"),
        ("massive", "left"),
    )
    for name, justify in columns:
        table.add_column(name, justify=justify, no_wrap=True)
    for entry in report.largest or []:
        table.add_row(
            str(entry.layer),
            _short(entry.token),
            str(entry.position),
            str(entry.dim),
            stat(entry.value),
            "—" if entry.ratio is None else stat(entry.ratio),
            Text("yes", style="bold red") if entry.massive else Text("no", style="dim"),
        )
    return table


def _recurring(report: DiagnoseReport) -> Table:
    table = Table(box=None, pad_edge=False, padding=(0, 2, 0, 0), header_style="dim")
    for name in ("layer", "dim", "massive in", "largest in"):
        table.add_column(name, justify="right", no_wrap=True)
    for pair in report.recurring or []:
        table.add_row(str(pair.layer), str(pair.dim), f"{pair.massive_texts:,}", f"{pair.peak_texts:,}")
    return table


def _footer(report: DiagnoseReport) -> Text:
    if report.largest is None:
        return Text(
            f"\n{report.model.name} hands over no residual stream, so massive activations are not looked for.",
            style="dim",
        )
    return Text(
        "\nα per head: each head's first-token weight, 0 · ░ ▒ ▓ █ 1. |h|: residual stream after "
        "the layer. Formulas: attn diagnose --help.",
        style="dim",
    )


def _short(token: str, limit: int = 10) -> str:
    shown = "".join(ch if ch.isprintable() else "?" for ch in token)
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"
