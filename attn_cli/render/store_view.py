"""Rich renderables for `attn heads show DIR`: the store's heads grid (heads_view.py's), and one head's
dashboard: a histogram per score, its top texts, a sample per decile and its top edges, each a line of
context with the query token and its attended keys highlighted. Nothing here prints: the CLI does.

Highlights are colours on a terminal; without colour (NO_COLOR, a file, a pipe) they are marks:
[query] and {key}, so the line still says which token is which.
"""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.style import Style
from rich.text import Text

from attn_cli.analyses.store_read import Example, HeadDashboard, StoreReport
from attn_cli.data.document import counted
from attn_cli.render.heads_view import KINDS, kind_of, render_heads, score_text  # a score in three characters: .97 1.0
from attn_cli.render.scale import Scale, luminance

SPARKS = "▁▂▃▄▅▆▇█"  # a histogram bin's height, relative to the score's fullest bin
HIST_NAMES = {
    "first_token": "first",
    "last_token": "last",
    "previous_token": "previous",
    "duplicate_token": "duplicate",
}  # the scores' names beside their histograms
NAME_WIDTH = 16  # " U  punctuation ": the chip and the longest name, a space after it
MIN_CONTEXT = 24  # characters of context kept on an example's line, however narrow the terminal
NEXT = "--layer L --head H: one head's dashboard · --save dashboard.html: every head"
QUERY_STYLE = Style(bold=True, reverse=True)
MARKERS = {"query": ("[", "]"), "key": ("{", "}")}  # without colour
SUBWORD = "##"  # WordPiece: glued to the token before
SPACE_MARKERS = ("Ġ", "▁")  # byte-level BPE and SentencePiece: a space before the word


def store_header(report: StoreReport) -> Text:
    """What the store is: its path, and whether the run that wrote it finished."""
    written = f" · {counted(report.parts, 'part')} · written by attn {report.run['attn_version']}"
    line = Text.assemble(("store ", "dim"), (report.path, "bold"), (written, "dim"))
    if not report.complete:
        line.append(
            f"\nincomplete: the run stopped after {counted(report.texts, 'text', grouped=True)} (--resume completes it)",
            style="bold yellow",
        )
    return line


class StoreView:
    """The grid and top heads, as `attn heads` draws them, under the store's own line."""

    def __init__(self, report: StoreReport):
        self.report = report

    def __rich_console__(self, console, options):
        yield Group(
            store_header(self.report), render_heads(self.report, options.max_width), Text(f"\n{NEXT}", style="dim")
        )


class DashboardView:
    """One head's dashboard, sized to the width it is given."""

    def __init__(self, dashboard: HeadDashboard):
        self.dashboard = dashboard

    def __rich_console__(self, console, options):
        yield render_dashboard(
            self.dashboard, options.max_width, colour=not console.no_color and console.color_system is not None
        )


def render_dashboard(dashboard: HeadDashboard, width: int, colour: bool = True) -> RenderableType:
    store = dashboard.store
    info = store.model
    examples = dashboard.examples
    name = _score_name(dashboard.score)
    parts: list[RenderableType] = [
        Text.assemble(
            ("attn heads show", "bold"),
            f" · {info.name} ({info.architecture}, "
            f"{counted(info.layers, 'layer')} × {counted(info.heads, 'head')}) · "
            f"{counted(store.texts, 'text', grouped=True)} from {store.source}",
        ),
        store_header(store),
        _head_line(dashboard),
        Text(""),
        Text("Scores over the texts: histogram 0 → 1, mean±std, 5th–95th percentile", style="bold"),
        *[_histogram_line(dashboard, score) for score in store.scores_named],
        Text(""),
        Text(f"Top texts by {name} (score; the query, its keys and weights →)", style="bold"),
        *_example_lines(examples.top.get(dashboard.score, [])[: dashboard.top], width, colour, "value"),
        Text(""),
        Text(f"A sample from each tenth of {name}, lowest first", style="bold"),
        *_example_lines(_one_per_decile(examples.decile.get(dashboard.score, [])), width, colour, "decile"),
        Text(""),
        Text("Top edges (single weights, the sink key excluded)", style="bold"),
        *_example_lines(examples.edge[: dashboard.top], width, colour, "value"),
    ]
    if not colour:
        parts.append(Text("\n[query] {key}: the highlighted query token and the keys it attends", style="dim"))
    return Group(*parts)


def _score_name(score: str) -> str:
    return kind_of(score)[2].split(" (")[0]


def _head_line(dashboard: HeadDashboard) -> Text:
    profile = dashboard.profile
    code, style, _ = KINDS.get(profile.label, ("?", "", ""))
    # the label as the legend of `attn heads` shows it, its chip then its name: no " · " before the chip, which
    # for a mixed head is itself a dot ("head 0.1 ·  ·  mixed" read as two separators)
    line = Text.assemble(
        (f"head {profile.layer}.{profile.head}", "bold"), " ", (f" {code} ", style), f" {_score_name(profile.label)}"
    )
    if profile.sink_key is not None:
        sink = profile.sink_key
        line.append(
            f" · sink key {sink.token} (position {sink.position}, in {counted(sink.texts, 'text', grouped=True)})",
            style="dim",
        )
    return line


def _histogram_line(dashboard: HeadDashboard, score: str) -> Text:
    distribution = dashboard.store.distributions[dashboard.profile.layer, dashboard.profile.head][score]
    code, style, _ = kind_of(score)
    name = f" {HIST_NAMES.get(score, score)}"[: NAME_WIDTH - 3]
    line = Text.assemble((f" {code} ", style), name.ljust(NAME_WIDTH - 3))
    line.append("│", style="dim")
    line.append(sparkline(distribution.hist), style="bold" if score == dashboard.score else "")
    line.append("│", style="dim")
    if distribution.count == 0:
        line.append("  undefined in every text", style="dim")
        return line
    line.append(f" {score_text(distribution.mean)}±{score_text(distribution.std)}")
    q05, q95 = distribution.quantiles["q05"], distribution.quantiles["q95"]
    if q05 is not None and q95 is not None:
        line.append(f"  {score_text(q05)}–{score_text(q95)}", style="dim")
    line.append(f"  {counted(distribution.count, 'text', grouped=True)}", style="dim")
    return line


def sparkline(hist) -> str:
    """One character per bin, its height the bin's count against the fullest bin; an empty bin is a space."""
    fullest = max(hist, default=0)
    if fullest == 0:
        return " " * len(hist)
    return "".join(
        " " if count == 0 else SPARKS[min(len(SPARKS) - 1, (count * len(SPARKS) - 1) // fullest)] for count in hist
    )


def _one_per_decile(examples: list[Example]) -> list[Example]:
    return [example for example in examples if example.rank == 0]


# -- an example on one line ------------------------------------------------------------------------------


def _example_lines(examples: list[Example], width: int, colour: bool, lead: str) -> list[Text]:
    if not examples:
        return [Text("  none in this store", style="dim")]
    return [example_line(example, width, colour, lead) for example in examples]


def example_line(example: Example, width: int, colour: bool = True, lead: str = "value") -> Text:
    """'  .97  text 31  … book [he] river . [SEP]  → school .97 he .02': the example's value, its text,
    a window of context centred on the query (cut to fit), and the query's strongest keys with weights."""
    prefix = Text("  ")
    if lead == "decile":
        prefix.append(f"d{example.decile} ", style="dim")
    prefix.append(score_text(example.value))
    prefix.append(f"  text {example.text_id:<4}", style="dim")
    suffix = _keys_suffix(example, max((width - len(prefix)) // 3, 1))  # the rest is context
    context = _context(example, width - len(prefix) - len(suffix) - 1, colour)
    line = Text.assemble(prefix, context, " ", suffix)
    line.no_wrap = True
    line.overflow = "ellipsis"
    return line


def _keys_suffix(example: Example, room: int) -> Text:
    suffix = Text("→", style="dim")
    for key, weight in zip(example.keys, example.weights):
        entry = f" {short(example.token(key)) if _in_window(example, key) else f'#{key}'} {score_text(weight)}"
        if len(suffix) + len(entry) > room and len(suffix) > 1:
            break
        suffix.append(entry)
    return suffix


def _in_window(example: Example, position: int) -> bool:
    return 0 <= position - example.window_start < len(example.tokens)


def _context(example: Example, room: int, colour: bool) -> Text:
    """The window's tokens as words: the query and its strongest key, each with what context fits around it
    (the query's first), cut with '…' to `room` characters; a gap between them is a '…' too."""
    room = max(room, MIN_CONTEXT) - 6  # up to three '…' marks
    pieces = _pieces(example, colour)
    centre = example.query - example.window_start
    strongest = example.keys[0] - example.window_start if example.keys else centre
    shown = {centre} | ({strongest} if 0 <= strongest < len(pieces) else set())
    used = sum(len(pieces[index][0]) for index in shown)
    for index in _by_priority(centre, strongest, len(pieces)):
        beside = index - 1 in shown or index + 1 in shown  # grown outward only: a word that does not fit ends a side
        if index not in shown and beside and used + len(pieces[index][0]) <= room:
            shown.add(index)
            used += len(pieces[index][0])
    text = Text()
    for index in sorted(shown):
        if index - 1 not in shown and (index > 0 or example.window_start > 0):
            text.append(" …" if text else "…", style="dim")
        word, style = pieces[index]
        if word.startswith(" "):  # the space before a word is not highlighted with it
            text.append(" ")
        text.append(word.lstrip(" "), style=style)
    if max(shown) < len(pieces) - 1 or example.window_start + len(example.tokens) < example.length:
        text.append(" …", style="dim")
    return text


def _by_priority(centre: int, strongest: int, count: int) -> list[int]:
    """Window indices in the order their context is wanted: the key's neighbours, then outward from the query
    (alternating right and left), then outward from the key."""
    around = lambda middle: [middle + sign * step for step in range(1, count) for sign in (1, -1)]  # noqa: E731
    wanted = [strongest - 1, strongest + 1, *around(centre), *around(strongest)]
    return [index for index in wanted if 0 <= index < count]


def _pieces(example: Example, colour: bool) -> list[tuple[str, Style | str]]:
    """Each token of the window as it reads in a sentence (' word', '##ing' glued on), with its highlight."""
    marked = any(token[:1] in SPACE_MARKERS for token in example.tokens)
    weights = dict(zip(example.keys, example.weights))
    scale = Scale.weights()
    pieces = []
    for index, token in enumerate(example.tokens):
        position = example.window_start + index
        word, space = _word(token, marked)
        role = "query" if position == example.query else "key" if position in weights else None
        if role and not colour:
            opening, closing = MARKERS[role]
            word = opening + word + closing
        style: Style | str = ""
        if role == "query":
            style = QUERY_STYLE
        elif role == "key":
            rgb = scale.rgb(weights[position])
            style = Style(
                color="black" if luminance(rgb) > 0.45 else "white",
                bgcolor=scale.colour(weights[position]),
                underline=True,
            )
        pieces.append((((" " if space else "") + word), style))
    return pieces


def _word(token: str, marked: bool) -> tuple[str, bool]:
    """(the token's text, whether a space goes before it) for WordPiece ('##') and BPE/SentencePiece ('Ġ', '▁')."""
    if token.startswith(SUBWORD) and len(token) > len(SUBWORD):
        return printable(token[len(SUBWORD) :]), False
    if token[:1] in SPACE_MARKERS:
        return printable(token[1:]) or "␣", True
    return printable(token), not marked  # a BPE token without a marker continues the word before it


def printable(text: str) -> str:
    return "".join(ch if ch.isprintable() else "↵" if ch == "\n" else "?" for ch in text.replace("Ċ", "↵"))


def short(token: str, limit: int = 8) -> str:
    shown = printable(_word(token, False)[0])
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"
