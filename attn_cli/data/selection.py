"""What a run looks at and how it analyses it: plain values, parsed and checked here (no torch).

Selection  which layers and heads, and which part of each head's matrices to keep
Window     that part, resolved for a text of T tokens (whole, a window, or nothing)
Analysis   how each head is analysed: top-k, the symmetry tolerance, vectors, the cell limit
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from attn_cli.data.arguments import shown, whole
from attn_cli.plumbing.errors import BadInput


class Panel(str, Enum):
    """What a view of an inspect report shows (--show): drawn by render/, named on the command line by cli/."""

    grid = "grid"
    overview = "overview"
    weights = "weights"
    scores = "scores"
    q = "q"
    k = "k"
    v = "v"
    symmetry = "symmetry"
    stats = "stats"
    top = "top"


# "all", "3", "0,2", "1-4"; or an index; or a list of indices.
Spec = str | int | Sequence[int]
Span = str | tuple[int, int] | None  # "100:140" or (100, 140)


def parse_selection(spec: Spec, count: int, what: str) -> list[int]:
    """Indices in [0, count) named by `spec`, sorted and without repeats.

    `what` ("layer", "head") names the thing in error messages, which always
    state the valid range so the user can fix the call. An index or a list of
    indices (the Python API's door, arguments.selection, has checked their type)
    is checked as numbers, never joined into a string.
    """
    valid = f"valid {what}s are 0-{count - 1}, a list like 0,2 or a range like 1-3, or 'all'"
    if isinstance(spec, bool) or not isinstance(spec, (str, int, list, tuple, range)):
        raise BadInput(f"--{what} {spec!r} is not a {what} selection", valid)
    if not isinstance(spec, str):
        indices = [spec] if isinstance(spec, int) else list(spec)
        if not indices:
            raise BadInput(f"--{what} [] selects no {what}", valid)
        for index in indices:
            if isinstance(index, bool) or not isinstance(index, int):
                raise BadInput(f"--{what} {spec!r} is not a {what} selection", valid)
            if not 0 <= index < count:
                raise BadInput(f"--{what} {shown(index)} is out of range for this model", valid)
        return sorted(set(indices))
    text = spec.strip().lower()
    if not text:  # '' or an empty list: selecting nothing is a mistake, never a quiet "all"
        raise BadInput(f"--{what} is empty: it selects no {what}", valid)
    if text in ("all", "*"):
        return list(range(count))
    chosen: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        first, dash, last = part.partition("-")
        try:
            start = int(first)
            stop = int(last) if dash else start
        except ValueError:
            raise BadInput(f"--{what} {spec!r} is not a {what} selection", valid) from None
        if start > stop:
            raise BadInput(f"--{what} range {part!r} runs backwards", valid)
        if start < 0 or stop >= count:
            raise BadInput(f"--{what} {part} is out of range for this model", valid)
        chosen.update(range(start, stop + 1))
    return sorted(chosen)


def attention_only(layers: list[int], info) -> list[int]:
    """The selected layers that have an attention matrix (a hybrid's linear-attention or state-space layers have
    none); a selection of none of them is a mistake, said with the layers that have one."""
    other = set(getattr(info, "no_attention_layers", ()))
    if not other:
        return layers
    kept = [layer for layer in layers if layer not in other]
    if not kept:
        named = ", ".join(map(str, layers[:8])) + (" …" if len(layers) > 8 else "")
        raise BadInput(
            f"layer {named} of {info.architecture} has no attention matrix (linear attention / state space)",
            f"its attention layers are {', '.join(map(str, info.attention_layers))}",
        )
    return kept


def parse_heads_of_layers(layers: Spec, heads: Spec, info) -> list[tuple[int, int]]:
    """(layer, head) pairs: every selected head of every selected attention layer, or, where `heads` names
    layers itself ("1.0,1.1,0.2": LAYER.HEAD, the way attn prints a head), exactly those heads."""
    if isinstance(heads, str) and "." in heads:
        if not (isinstance(layers, str) and layers.strip().lower() in ("all", "*")):
            raise BadInput(f"--head {heads!r} names each head's layer", "leave --layer out, or give heads as 0,2")
        valid = f"a head is LAYER.HEAD with layers {_listed(info.attention_layers)} and heads 0-{info.heads - 1}"
        pairs = set()
        for part in heads.split(","):
            layer, dot, head = part.strip().partition(".")
            if not (dot and layer.isdigit() and head.isdigit()):
                raise BadInput(f"--head {part.strip()!r} is not LAYER.HEAD", valid)
            if int(layer) not in info.attention_layers or int(head) >= info.heads:
                raise BadInput(f"--head {part.strip()} is not a head of this model", valid)
            pairs.add((int(layer), int(head)))
        return sorted(pairs)
    chosen = attention_only(parse_selection(layers, info.layers, "layer"), info)
    return [(layer, head) for layer in chosen for head in parse_selection(heads, info.heads, "head")]


def _listed(numbers: list[int]) -> str:
    return (
        f"{numbers[0]}-{numbers[-1]}"
        if numbers == list(range(numbers[0], numbers[-1] + 1))
        else ", ".join(map(str, numbers))
    )


def parse_span(spec: Span, option: str) -> tuple[int, int] | None:
    """ "100:140" → (100, 140); ":200" starts at 0; "100:" runs to the end (a huge stop, clipped later)."""
    if spec is None:
        return None
    if not isinstance(spec, str):
        start, stop = spec
        if start < 0 or stop <= start:
            raise BadInput(f"{option} {start}:{stop} is not a span", "use START:STOP with 0 <= START < STOP")
        return int(start), int(stop)
    first, colon, last = spec.strip().partition(":")
    try:
        start = int(first) if first.strip() else 0
        stop = int(last) if last.strip() else 1 << 62
    except ValueError:
        raise BadInput(f"{option} {spec!r} is not a span", "use START:STOP, e.g. 100:140") from None
    if not colon or start < 0 or stop <= start:
        raise BadInput(f"{option} {spec!r} is not a span", "use START:STOP with 0 <= START < STOP, e.g. 100:140")
    return start, stop


@dataclass(frozen=True)
class Window:
    """The part of a head's (T, T) score and weight matrices that a report keeps.

    Three cases, each explicit: whole (rows and cols are 0:T), a window (part of it),
    and nothing (statistics only: the matrices were past the size limit).
    """

    rows: tuple[int, int]  # query rows start:stop
    cols: tuple[int, int]  # key columns start:stop
    tokens: int  # T (the query tokens)
    keys: int | None = None  # T_key of a rectangular (cross-attention) matrix; None: T, the matrix is square

    @property
    def key_count(self) -> int:
        return self.tokens if self.keys is None else self.keys

    @classmethod
    def whole(cls, tokens: int, keys: int | None = None) -> Window:
        return cls((0, tokens), (0, tokens if keys is None else keys), tokens, keys)

    @classmethod
    def nothing(cls, tokens: int, keys: int | None = None) -> Window:
        return cls((0, 0), (0, 0), tokens, keys)

    @property
    def is_whole(self) -> bool:
        return self.rows == (0, self.tokens) and self.cols == (0, self.key_count)

    @property
    def is_empty(self) -> bool:
        return self.rows[0] == self.rows[1]

    @property
    def is_partial(self) -> bool:
        """Part of the matrix: neither whole nor empty."""
        return not (self.is_whole or self.is_empty)


@dataclass(frozen=True)
class Selection:
    """Which layers and heads a run looks at, and which part of their matrices it keeps."""

    layers: Spec = "all"
    heads: Spec = "all"
    rows: tuple[int, int] | None = None  # keep only query rows start:stop …
    cols: tuple[int, int] | None = None  # … and key columns start:stop
    full: bool = False  # keep whole matrices however large

    def resolve(self, info) -> tuple[list[int], list[int]]:
        """The layer and head indices for a model (ModelInfo): of a hybrid's layers, those with attention."""
        layers = parse_selection(self.layers, info.layers, "layer")
        return attention_only(layers, info), parse_selection(self.heads, info.heads, "head")

    def window(self, tokens: int, heads_selected: int, cell_limit: int, keys: int | None = None) -> Window:
        """The part of each matrix to keep for a text of `tokens` tokens (and `keys` key tokens, where they
        are other tokens: cross-attention).

        rows/cols pick a window; otherwise the whole matrix when `full` or when all selected
        heads together stay within `cell_limit` cells; otherwise nothing (statistics only).
        """
        columns = tokens if keys is None else keys
        if self.rows is not None or self.cols is not None:
            return Window(_clip(self.rows, tokens, "--rows"), _clip(self.cols, columns, "--cols"), tokens, keys)
        if self.full or heads_selected * tokens * columns <= cell_limit:
            return Window.whole(tokens, keys)
        return Window.nothing(tokens, keys)


def _clip(span: tuple[int, int] | None, tokens: int, option: str) -> tuple[int, int]:
    if span is None:
        return 0, tokens
    start, stop = span[0], min(span[1], tokens)
    if not 0 <= start < stop:
        raise BadInput(
            f"{option} {span[0]}:{span[1]} selects nothing of the {tokens} tokens",
            f"use START:STOP with 0 <= START < STOP <= {tokens}",
        )
    return start, stop


@dataclass(frozen=True)
class Analysis:
    """How each selected head is analysed. Defaults: configs/defaults.toml (Analysis.defaults())."""

    top_k: int = 3  # most-attended keys per query row
    tolerance: float = 1e-5  # relative asymmetry ‖S−Sᵀ‖/‖S‖ at or under which S counts as symmetric
    vectors: bool = False  # keep each head's q, k, v and output
    cell_limit: int = 2_000_000  # past this many cells over all selected heads, matrices are left out
    measure: str | None = None  # a registered Measure's name (data/registry.py; --measure norm): its matrix too

    def __post_init__(self):
        whole(self.top_k, "--top-k", minimum=1)

    @classmethod
    def defaults(cls, **given) -> Analysis:
        """configs/defaults.toml, then the values given (None means not given)."""
        from attn_cli.plumbing.config import defaults

        settings = defaults()
        values = {
            "top_k": settings["inspect"]["top_k"],
            "tolerance": settings["symmetry"]["relative_tolerance"],
            "cell_limit": settings["matrices"]["max_cells"],
        }
        values.update({key: value for key, value in given.items() if value is not None})
        return cls(**values)
