"""The single heatmap (query rows × key columns) and the helpers every terminal view shares: literal token
text, row labels, legends.

Each renderable here and in render/grid.py and render/layout.py reads the width it is given (`options.max_width` in `__rich_console__`, as rich's own `Bar`
does) and picks the richest form that fits: numbers, then shade cells two characters wide, then one
character wide; below that it prints one line saying what to do. Nothing here is ever cut with '…'.
"""

from __future__ import annotations

import math

import numpy as np
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.style import Style
from rich.text import Text

from attn_cli.data.selection import Window
from attn_cli.data.unknown import UNKNOWN_TOKENS
from attn_cli.render.scale import CellFormat, Scale, luminance

NUMBER_CELL = 4  # '1.00', '-1.4', '.40'
LABEL_TOKEN = 12  # characters of a token in a row label before it is clipped
WINDOW_HINT = "window"  # the message names --rows/--cols; otherwise it says to widen the terminal
ABSENT = "absent"  # no matrix exists at all (a weights-only model's scores): the title alone says why
LIST_LIMIT = 64  # key tokens listed under a heatmap
SINK = "⟨sink⟩"  # a learned sink logit's column of the softmax (GPT-OSS's s_aux): no token, so set apart
SINK_RULE = "│"  # what sets the ⟨sink⟩ column apart from the keys, one character wide
SINK_HEAD = "sink"  # the ⟨sink⟩ column's head; past a narrower cell into the free columns after it, the last
SINK_LETTER = "s"  # its head where those columns are too few (the key list then says what "s" is)


def literal(text: str, style: str | Style = "") -> Text:
    """User text made safe to show: control characters escaped, markup never parsed."""
    shown = "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)
    return Text(shown, style=style)


# The tokenizer's stand-in for a piece its vocabulary lacks (data/unknown.py): not a word of the text, so it is
# drawn dim and italic wherever tokens are listed, never bold like a word.


def token_text(token: str, style: str = "bold") -> Text:
    """A token as a word of the text is drawn (style), or dim italic when it is the unknown-token stand-in."""
    return literal(token, "dim italic" if token in UNKNOWN_TOKENS else style)


def clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(1, width - 1)] + "…"


def row_label(index: int, token: str, digits: int = 0) -> Text:
    """'7 [SEP]'; digits right-aligns the index among larger ones (' 7 [SEP]' beside '12 cat')."""
    shown = clip(token, LABEL_TOKEN)
    return Text.assemble((f"{index:>{digits}} ", "dim"), token_text(shown, "") if shown == token else literal(shown))


def legend(scale: Scale, width: int, what: str | None = None, extra: str = "", unit: str = "head") -> Text:
    """'weight 0 ░░▒▒▓▓██ 1 · fixed scale, brighter = more' cut to whole phrases that fit `width`. unit: what
    the matrix is: a head (whose fixed scale is every head's), or, for rollout and attribute, a whole matrix."""
    what = what or {"weights": "weight", "scores": "score"}.get(scale.kind, "value")
    text = Text()
    text.append(f"{what} ", style="dim")
    text.append(f"{scale.low_label} ")
    for value in scale.stops(9 if scale.diverging else 8):
        text.append(scale.shade(value), style=Style(color=scale.colour(value)))
    text.append(f" {scale.high_label}")
    shared = ["the same scale for every head"] if unit == "head" else []
    phrases = {"weights": shared + ["brighter = more"], "scores": ["centred on 0", "brighter = further from 0"]}.get(
        scale.kind, ["brighter = more"]
    )
    if scale.own:  # --scale head: said first (its range is at the ends), never taken for the fixed scale
        phrases = [f"per-{unit} scale: this {unit}'s min → max", "brighter = more"]
    if extra:
        phrases.append(extra)
    for phrase in phrases:
        if text.cell_len + 3 + len(phrase) > width:
            break
        text.append(f" · {phrase}", style="dim")
    return text


class Heatmap:
    """Query tokens as rows, key tokens as columns; masked (NaN) cells blank.

    matrix: the (rows, cols) part of the whole T × T that `window` names (None: the whole matrix).
    keys: the column tokens where they are not the row tokens (cross-attention: target rows × source columns).
    sink: (rows,) the learned sink's share of each shown row, drawn as one more column after the keys, set apart
    by a rule and headed "sink" (⟨sink⟩ in the key list): with it each row sums to 1. None: no sink column.
    """

    def __init__(
        self,
        matrix: np.ndarray | None,
        tokens: list[str],
        title: str,
        scale: Scale | None = None,
        window: Window | None = None,
        hint: str = WINDOW_HINT,
        label: str | None = None,
        keys: list[str] | None = None,
        unit: str = "head",
        sink: np.ndarray | None = None,
    ):
        self.matrix = None if matrix is None else np.asarray(matrix, dtype=np.float64)
        self.tokens = tokens
        self.keys = tokens if keys is None else keys
        self.title = title
        self.scale = scale or Scale.weights()
        self.window = window if window is not None and window.is_partial else None
        self.hint = hint
        self.label = label  # what the legend calls the values ("weight", "score" by the scale)
        self.unit = unit  # what the matrix is, in the legend: a head, or a whole matrix (rollout, attribute)
        self.row0, self.col0 = (self.window.rows[0], self.window.cols[0]) if self.window else (0, 0)
        self.sink = None if sink is None or matrix is None else np.asarray(sink, dtype=np.float64)
        if self.matrix is not None:
            rows, cols = self.matrix.shape
            self.digits = len(str(self.row0 + rows - 1))
            self.label_width = max(
                (row_label(i, tokens[i], self.digits).cell_len for i in range(self.row0, self.row0 + rows)), default=1
            )
            self.cols = cols

    # -- sizes ---------------------------------------------------------------------------------------
    def width_for(self, cell: int, gap: int) -> int:
        return self.label_width + 1 + (self.cols + self.sink_columns) * (cell + gap) + self.sink_columns

    @property
    def sink_columns(self) -> int:
        """1 where a ⟨sink⟩ column is drawn (it takes a cell, its gap and the rule before it), else 0."""
        return 0 if self.sink is None else 1

    @property
    def numbers_width(self) -> int:
        return self.width_for(NUMBER_CELL, 1)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        if self.matrix is None:
            return Measurement(20, options.max_width)
        return Measurement(min(self.width_for(1, 0), options.max_width), self.numbers_width)

    # -- rendering -----------------------------------------------------------------------------------
    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        if self.matrix is None and self.hint == ABSENT:
            yield Text(f"{self.title}", style="yellow")
            return
        if self.matrix is None:
            yield Text(
                f"{self.title}: not kept for {len(self.tokens)} tokens (past the matrix size limit); pick a "
                "window with --rows A:B --cols C:D, or pass --full",
                style="yellow",
            )
            return
        rows, cols = self.matrix.shape
        place = (
            f" · rows {self.row0}-{self.row0 + rows - 1}, keys {self.col0}-{self.col0 + cols - 1}"
            if self.window
            else ""
        )
        for cell, gap in ((NUMBER_CELL, 1), (2, 0), (1, 0)):
            if self.width_for(cell, gap) <= width:
                break
        else:
            yield self.too_narrow(width)
            return
        yield Text(self.title + place, style="bold")
        numbers = gap == 1
        fmt = CellFormat.choose(self.matrix, self.scale, NUMBER_CELL) if numbers else None
        sink_head = self.sink_head(cell, gap, width)
        yield from self.header_lines(cell, gap, sink_head)
        for offset, row in enumerate(self.matrix.tolist()):
            index = self.row0 + offset
            line = row_label(index, self.tokens[index], self.digits)
            line.pad_right(self.label_width - line.cell_len)
            line.append(" ")
            for value in row:
                line.append_text(self.cell(value, cell, fmt))
                if gap:
                    line.append(" " * gap)
            if self.sink is not None:  # the softmax's own column, after a rule: not a key of the text
                line.append(SINK_RULE, style="dim")
                line.append_text(self.cell(float(self.sink[offset]), cell, fmt))
            line.rstrip()
            yield line
        yield self.key_list(width, sink_head)
        extra = fmt.note if fmt and fmt.note else ("" if numbers else f"{self.numbers_width} columns show numbers")
        yield legend(self.scale, width, self.label, extra=extra, unit=self.unit)

    def cell(self, value: float, cell: int, fmt: CellFormat | None) -> Text:
        if not math.isfinite(value):
            return Text(" " * cell)
        if fmt is not None:
            rgb = self.scale.rgb(value)
            ink = "black" if luminance(rgb) > 0.45 else "white"
            return Text(fmt.text(value).rjust(cell), style=Style(color=ink, bgcolor=self.scale.colour(value)))
        return Text(self.scale.shade(value) * cell, style=Style(color=self.scale.colour(value)))

    def sink_head(self, cell: int, gap: int, width: int) -> str:
        """The ⟨sink⟩ column's head: "sink", even over a cell of 1 or 2 characters (the column is the last, so
        the word runs on into the columns after it) when `width` leaves room for it; else "s"."""
        spare = width - self.width_for(cell, gap)  # columns free after the ⟨sink⟩ cell
        return SINK_HEAD if len(SINK_HEAD) <= cell + spare else SINK_LETTER

    def header_lines(self, cell: int, gap: int, sink: str = SINK_HEAD) -> list[Text]:
        """Key column numbers: in line with the cells when they fit, else written downwards; `sink` heads the
        ⟨sink⟩ column, left-aligned after its rule when wider than a cell."""
        indices = [str(self.col0 + i) for i in range(self.cols)]
        digits = max(len(index) for index in indices)
        tag = "key →" if self.label_width >= 5 else "k→"
        if digits < cell + gap:  # a space between neighbours
            line = Text(tag.rjust(self.label_width) + " ", style="dim")
            line.append("".join(index.rjust(cell) + " " * gap for index in indices).rstrip(), style="bold")
            if self.sink is not None:
                line.append(" " * gap + SINK_RULE, style="dim")
                line.append(sink.rjust(cell), style="bold")
            return [line]
        lines = []
        for place in range(digits):
            label = tag if place == digits - 1 else ""
            line = Text(label.rjust(self.label_width) + " ", style="dim")
            heads = "".join(index.rjust(digits)[place].rjust(cell) + " " * gap for index in indices)
            if self.sink is None:
                line.append(heads.rstrip(), style="bold")
            else:  # its head on the last line, beside the keys' last digits
                line.append(heads, style="bold")
                line.append(SINK_RULE, style="dim")
                line.append((sink if place == digits - 1 else "").rjust(cell), style="bold")
                line.rstrip()
            lines.append(line)
        return lines

    def key_list(self, width: int, sink: str = SINK_HEAD) -> Text:
        """The key tokens in full, numbered as the columns are; then the ⟨sink⟩ column, by its head `sink`."""
        text = Text("keys ", style="dim")
        shown = min(self.cols, LIST_LIMIT)
        for i in range(self.col0, self.col0 + shown):
            text.append(f"{i}:", style="dim")
            text.append_text(token_text(self.keys[i]))
            text.append("  ")
        if shown < self.cols:
            text.append(f"… {self.cols - shown} more (the header lists every token)", style="dim")
        if self.sink is not None:
            text.append(f"{SINK_RULE} {sink}: ", style="dim")
            text.append(SINK, style="bold")
            text.append(" (the learned sink logit's share)", style="dim")
        text.rstrip()
        return text

    def too_narrow(self, width: int) -> Text:
        fits = max(1, width - self.label_width - 1)
        need = self.width_for(1, 0)
        if self.hint == WINDOW_HINT:
            rows = 0 if self.matrix is None else len(self.matrix)  # drawn for a kept matrix only
            advice = (
                f"pick a window, e.g. --rows {self.row0}:{self.row0 + min(rows, 40)} "
                f"--cols {self.col0}:{self.col0 + fits}"
            )
        else:
            advice = "widen the terminal"
        return Text(
            f"{self.title}: {self.cols} key columns need {need} columns, the terminal has {width}; {advice}",
            style="yellow",
        )
