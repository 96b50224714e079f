"""Rich renderables for `attn heads`: a layers × heads map coloured by label, a legend, then the top
heads of each type. Nothing here prints: the CLI does. Fits 80 columns for a 12-head model.
"""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from attn_cli.math.score_names import MIXED, SCORES
from attn_cli.analyses.heads_report import HeadProfile, HeadsReport
from attn_cli.render.scale import counted

# label → (one-letter code, cell style, name in the legend and the top table)
KINDS = {
    "previous_token": ("P", "black on green", "previous token"),
    "duplicate_token": ("D", "black on cyan", "duplicate token"),
    "induction": ("I", "black on magenta", "induction"),
    "first_token": ("F", "white on blue", "first token ([CLS]/BOS)"),
    "last_token": ("L", "black on yellow", "last token ([SEP]/EOS)"),
    "punctuation": ("U", "white on red", "punctuation"),
    "self": ("S", "black on white", "self"),
    "broad": ("B", "white on grey42", "broad"),
    "sink": ("K", "black on dark_orange", "sink"),
    "retrieval": ("R", "black on bright_green", "retrieval"),
    MIXED: ("·", "dim", "mixed"),
}
ROW_LABEL = 4  # "L11 "
TOP_LABEL = 20  # the type's chip and name in the top table
TOP_NAMES = {"first_token": "first [CLS]/BOS", "last_token": "last [SEP]/EOS", "previous_token": "previous",
             "duplicate_token": "duplicate"}
TOP_COUNT = 5


class HeadsView:
    """The whole view, sized to the width it is given when it is drawn (as every other view is)."""

    def __init__(self, report: HeadsReport):
        self.report = report

    def __rich_console__(self, console, options):
        yield render_heads(self.report, options.max_width)


def render_heads(report: HeadsReport, width: int) -> RenderableType:
    parts: list[RenderableType] = [_header(report)]
    parts += [_grid(report, width), _legend(width), Text(""), _top_table(report, width)]
    return Group(*parts)


def _header(report: HeadsReport) -> Text:
    info = report.model
    shape = f"{counted(info.layers, 'layer')} × {counted(info.heads, 'head')}"
    line = Text.assemble(("attn heads", "bold"), f" · {info.name} ({info.architecture}, {shape}) · "
                         f"{report.device}, {report.dtype}\n")
    if report.probe is not None:
        probe = report.probe
        if probe["kind"] == "retrieval":
            line.append(f"retrieval probe (seed {probe['seed']}, {report.tokens} tokens): a {probe['needle']}-token "
                        f"needle after token {probe['depth']}\nof a {probe['length']}-token haystack, then the needle "
                        "again", style="magenta")
        else:
            line.append(f"{probe['kind']} probe: {probe['length']} random tokens, then the same again "
                        f"(seed {probe['seed']}), {report.tokens} tokens", style="magenta")
    else:
        texts = "1 text" if report.texts == 1 else f"{report.texts:,} texts"
        source = "" if report.source == "arguments" else f" from {report.source}"
        line.append(f"{texts}{source}, {report.tokens:,} tokens; " +
                    ("scores of the one text" if report.texts == 1 else "means over the texts"))
    if report.interrupted:
        line.append(f"\nstopped by Ctrl-C: these are the {report.texts:,} texts done", style="bold yellow")
    if report.truncated:
        line.append(f"\n{report.truncated} texts were cut to the model's positions (--truncate)", style="yellow")
    line.append("\nEach cell: the head's label and its score (formulas: attn heads --help).", style="dim")
    return line


def _cell_width(heads: int, width: int) -> int:
    """Characters per cell: 4 ("P.97"), or 1 ("P") when four do not fit; cells are one space apart."""
    return 4 if ROW_LABEL + heads * 5 <= width else 1


def _grid(report: HeadsReport, width: int) -> Table:
    layers = sorted({profile.layer for profile in report.heads})
    heads = sorted({profile.head for profile in report.heads})
    cell = _cell_width(len(heads), width)
    table = Table(box=None, show_header=True, pad_edge=False, padding=(0, 0, 0, 1), header_style="dim")
    table.add_column("", width=ROW_LABEL - 1, no_wrap=True, style="dim")
    for head in heads:
        table.add_column(str(head) if cell > 1 or head % 4 == 0 else "", width=cell, no_wrap=True,
                         overflow="crop")
    by_place = {(profile.layer, profile.head): profile for profile in report.heads}
    for layer in layers:
        row = [f"L{layer}"]
        for head in heads:
            profile = by_place.get((layer, head))
            row.append(_cell(profile, cell) if profile is not None else Text(""))
        table.add_row(*row)
    return table


def _cell(profile: HeadProfile, cell: int) -> Text:
    code, style, _ = KINDS[profile.label]
    if cell == 1:
        return Text(code, style=style)
    if profile.label == MIXED:
        return Text(f" {code}  ", style=style)
    return Text(code + _score(profile.scores[profile.label]), style=style)


def _score(value: float | None) -> str:
    """Three characters: ".97", "1.0", "  -"."""
    if value is None:
        return "  -"
    return "1.0" if value >= 0.995 else f"{value:.2f}"[1:]


def _legend(width: int) -> Text:
    legend = Text()
    used = 0
    for label, (code, style, name) in KINDS.items():
        if label == "retrieval":  # a score, never a label: no cell shows it
            continue
        chip = f" {code} {name}  "
        if used and used + len(chip) > width:
            legend.append("\n")
            used = 0
        legend.append(f" {code} ", style=style)
        legend.append(f" {name}  ")
        used += len(chip) + 1
    return legend


def _top_table(report: HeadsReport, width: int) -> Group:
    corpus = report.texts > 1
    title = "Top heads per score (layer.head score" + ("±std over texts" if corpus else "") + ")"
    rows: list[RenderableType] = [Text(title, style="bold")]
    for name in SCORES:
        code, style, label = KINDS[name]
        line = Text.assemble((f" {code} ", style), f" {TOP_NAMES.get(name, label)}".ljust(TOP_LABEL - 3))
        ranked = report.top(name, TOP_COUNT)
        if not ranked:
            line.append("  " + _undefined(name), style="dim")
        for profile in ranked:
            entry = Text()
            entry.append("  ")
            entry.append(f"{profile.layer}.{profile.head}", style="bold" if profile.label == name else "")
            entry.append(f" {_score(profile.scores[name])}")
            if corpus and profile.std[name] is not None:
                entry.append(f"±{_score(profile.std[name])}", style="dim")
            if name == "sink" and profile.sink_key is not None:
                entry.append(f" {_short(profile.sink_key.token)}", style="dim")
            if len(line) + len(entry) > width:
                break
            line.append_text(entry)
        line.no_wrap = True
        rows.append(line)
    return Group(*rows)


def _undefined(name: str) -> str:
    if name in ("duplicate_token", "induction"):
        return "no text had a repeated token (try --probe induction)"
    if name == "punctuation":
        return "no text had punctuation"
    if name == "retrieval":
        return "only on a needle: --probe retrieval"
    return "no row with a choice of keys"


def _short(token: str, limit: int = 7) -> str:
    shown = "".join(ch if ch.isprintable() else "?" for ch in token)
    return shown if len(shown) <= limit else shown[:limit - 1] + "…"
