"""Rich renderables for `attn heads`: a layers × heads map coloured by label, a legend, then the top
heads of each type. Nothing here prints: the CLI does. Fits 80 columns for a 12-head model.
"""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from attn_cli.analyses.heads_report import HeadProfile, HeadsReport
from attn_cli.data.document import counted
from attn_cli.math.score_names import MIXED, SCORES
from attn_cli.render.scale import no_attention_note

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
PLUGIN_KIND = ("+", "black on plum2")  # a score a plugin registers (data/registry.HeadScore): its chip
ROW_LABEL = 4  # "L11 "
TOP_LABEL = 20  # the type's chip and name in the top table
TOP_NAMES = {
    "first_token": "first [CLS]/BOS",
    "last_token": "last [SEP]/EOS",
    "previous_token": "previous",
    "duplicate_token": "duplicate",
}
TOP_COUNT = 5
# An encoder–decoder model's stacks: the title over each one's grid, and the letter before layer.head in the top list
STACK_TITLES = {
    "encoder": "encoder self-attention · source × source",
    "decoder": "decoder self-attention · target × target (causal)",
    "cross": "cross-attention · target rows (queries) × source columns (keys)",
}
STACK_CODES = {"encoder": "e", "decoder": "d", "cross": "x"}


class HeadsView:
    """The whole view, sized to the width it is given when it is drawn (as every other view is)."""

    def __init__(self, report: HeadsReport):
        self.report = report

    def __rich_console__(self, console, options):
        yield render_heads(self.report, options.max_width)


def render_heads(report: HeadsReport, width: int) -> RenderableType:
    parts: list[RenderableType] = [_header(report)]
    parts += [*_grids(report, width), _legend(width), Text(""), _top_table(report, width)]
    return Group(*parts)


def _stacks(report: HeadsReport) -> list[str | None]:
    """The stacks of the report's heads in their order: [None] for a model with one."""
    return list(dict.fromkeys(profile.stack for profile in report.heads))


def _grids(report: HeadsReport, width: int) -> list[RenderableType]:
    """One grid, or one per stack of an encoder–decoder model, each under its title (and what it does not have)."""
    # an encoder–decoder model's heads each name their stack; a model with one stack names none
    stacks = [stack for stack in _stacks(report) if stack is not None]
    if not stacks:
        return [_grid(report.heads, width)]
    parts: list[RenderableType] = []
    for stack in stacks:
        profiles = [profile for profile in report.heads if profile.stack == stack]
        title = Text(STACK_TITLES.get(stack, stack), style="bold")
        missing = list(profiles[0].not_defined)
        if missing:
            title.append(
                f"\nnot defined: {', '.join(TOP_NAMES.get(name, name) for name in missing)} (target queries, "
                "source keys)",
                style="dim",
            )
        parts += [title, _grid(profiles, width)]
    return parts


def _header(report: HeadsReport) -> Text:
    info = report.model
    shape = f"{counted(info.layers, 'layer')} × {counted(info.heads, 'head')}"
    if report.decoder_layers is not None:
        decoder = counted(report.decoder_layers, "decoder layer")
        shape = f"{info.layers} encoder + {decoder} × {counted(info.heads, 'head')}"
    line = Text.assemble(
        ("attn heads", "bold"), f" · {info.name} ({info.architecture}, {shape}) · {report.device}, {report.dtype}\n"
    )
    note = no_attention_note(info)
    if note is not None:
        line.append(note + "\n", style="dim")
    if getattr(info, "attention_note", None):
        line.append(f"note: {info.attention_note}\n", style="yellow")
    if report.probe is not None:
        probe = report.probe
        if probe["kind"] == "retrieval":
            line.append(
                f"retrieval probe (seed {probe['seed']}, {report.tokens} tokens): a {probe['needle']}-token "
                f"needle after token {probe['depth']}\nof a {probe['length']}-token haystack, then the needle "
                "again",
                style="magenta",
            )
        else:
            line.append(
                f"{probe['kind']} probe: {probe['length']} random tokens, then the same again "
                f"(seed {probe['seed']}), {report.tokens} tokens",
                style="magenta",
            )
    else:
        texts = "1 text" if report.texts == 1 else f"{report.texts:,} texts"
        source = "" if report.source == "arguments" else f" from {report.source}"
        single = _input_line(report)
        line.append(
            single
            if single is not None
            else f"{texts}{source}, {report.tokens:,} tokens; "
            + ("scores of the one text" if report.texts == 1 else "means over the texts")
        )
    if report.interrupted:
        line.append(f"\nstopped by Ctrl-C: these are the {report.texts:,} texts done", style="bold yellow")
    if report.truncated:
        line.append(f"\n{report.truncated} texts were cut to the model's positions (--truncate)", style="yellow")
    line.append("\nEach cell: the head's label and its score (formulas: attn heads --help).", style="dim")
    return line


def _input_line(report: HeadsReport) -> str | None:
    """What one pair or one image was: the decoder's target, or the image's grid; None for texts."""
    if report.patch_grid is not None:
        grid = report.patch_grid["grid"]
        return (
            f"image {report.patch_grid['source']}: {grid['rows']} × {grid['cols']} patches and "
            f"{counted(len(report.patch_grid['special_tokens']), 'special token')}; scores of the one image"
        )
    if report.target is not None:
        return (
            f"1 pair, {report.tokens:,} tokens (source and target); the decoder teacher-forced on "
            f"“{_short(report.target, 40)}”"
        )
    return None


def _cell_width(heads: int, width: int) -> int:
    """Characters per cell: 4 ("P.97"), or 1 ("P") when four do not fit; cells are one space apart."""
    return 4 if ROW_LABEL + heads * 5 <= width else 1


def _grid(profiles: list[HeadProfile], width: int) -> Table:
    layers = sorted({profile.layer for profile in profiles})
    heads = sorted({profile.head for profile in profiles})
    cell = _cell_width(len(heads), width)
    table = Table(box=None, show_header=True, pad_edge=False, padding=(0, 0, 0, 1), header_style="dim")
    table.add_column("", width=ROW_LABEL - 1, no_wrap=True, style="dim")
    for head in heads:
        table.add_column(str(head) if cell > 1 or head % 4 == 0 else "", width=cell, no_wrap=True, overflow="crop")
    by_place = {(profile.layer, profile.head): profile for profile in profiles}
    for layer in layers:
        row: list[str | Text] = [f"L{layer}"]
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
    return Text(code + score_text(profile.scores[profile.label]), style=style)


def score_text(value: float | None) -> str:
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
    stacked = _stacks(report) != [None]
    title = (
        "Top heads per score ("
        + ("e encoder, d decoder, x cross; " if stacked else "")
        + "layer.head score"
        + ("±std over texts" if corpus else "")
        + ")"
    )
    rows: list[RenderableType] = [Text(title, style="bold")]
    for name in report.score_names:
        code, style, label = kind_of(name)
        # a plugin's score by its name, which --score takes (its title, in the figure, may be long)
        shown = TOP_NAMES.get(name, label if name in KINDS else name)
        line = Text.assemble((f" {code} ", style), f" {shown}"[: TOP_LABEL - 3].ljust(TOP_LABEL - 3))
        ranked = report.top(name, TOP_COUNT)
        reasons = {profile.stack: profile.not_defined[name] for profile in report.heads if name in profile.not_defined}
        if not ranked:
            line.append("  " + (next(iter(reasons.values())) if reasons else _undefined(name)), style="dim")
        # some heads have the score, others (cross heads) cannot: said at the end, room kept for it
        note = f"  {', '.join(_stack_code(stack) for stack in reasons)}: not defined" if ranked and reasons else ""
        for profile in ranked:
            entry = Text()
            entry.append("  ")
            entry.append(
                f"{_stack_code(profile.stack)}{profile.layer}.{profile.head}",
                style="bold" if profile.label == name else "",
            )
            entry.append(f" {score_text(profile.scores[name])}")
            if corpus and profile.std[name] is not None:
                entry.append(f"±{score_text(profile.std[name])}", style="dim")
            if name == "sink" and profile.sink_key is not None:
                entry.append(f" {_short(profile.sink_key.token)}", style="dim")
            if len(line) + len(entry) + len(note) > width:
                break
            line.append_text(entry)
        line.append(note, style="dim")
        line.no_wrap = True
        rows.append(line)
    sinking = [profile for profile in report.heads if profile.sink_mass is not None]
    if sinking:  # a learned sink logit's mean share of each row (the ⟨sink⟩ column): a statistic, not a score
        rows.append(_sink_mass_line(sinking, width))
    return Group(*rows)


def _sink_mass_line(profiles: list[HeadProfile], width: int) -> Text:
    """The heads whose learned sink takes most of their rows' softmax: 'layer.head mass', largest first."""
    line = Text.assemble("   ", " ⟨sink⟩ mass".ljust(TOP_LABEL - 3))
    ranked = sorted(profiles, key=lambda profile: (-(profile.sink_mass or 0.0), profile.layer, profile.head))
    for profile in ranked[:TOP_COUNT]:
        entry = Text(f"  {_stack_code(profile.stack)}{profile.layer}.{profile.head} {score_text(profile.sink_mass)}")
        if len(line) + len(entry) > width:
            break
        line.append_text(entry)
    line.no_wrap = True
    return line


def _stack_code(stack: str | None) -> str:
    """The letter before layer.head: e, d or x for an encoder–decoder model's stacks, none for a model with one."""
    return "" if stack is None else STACK_CODES.get(stack, stack)


def kind_of(score: str) -> tuple[str, str, str]:
    """A score's (code, style, name) for its chip and its line: KINDS' for the built-in ones; a plugin's
    (data/registry.HeadScore) shows a + and its title, or its name where this process has not registered it
    (a store written with the plugin, read without it)."""
    if score in KINDS:
        return KINDS[score]
    from attn_cli.data.registry import head_scores

    registered = head_scores().get(score)
    return (*PLUGIN_KIND, (registered.title if registered is not None else "") or score)


def _undefined(name: str) -> str:
    if name in ("duplicate_token", "induction"):
        return "no text had a repeated token (try --probe induction)"
    if name == "punctuation":
        return "no text had punctuation"
    if name == "retrieval":
        return "only on a needle: --probe retrieval"
    if name not in SCORES:
        return "undefined on every text"
    return "no row with a choice of keys"


def _short(token: str, limit: int = 7) -> str:
    shown = "".join(ch if ch.isprintable() else "?" for ch in token)
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"
