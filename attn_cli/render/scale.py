"""Colour scales, shade glyphs and number formats shared by every view (terminal, SVG, HTML).

One rule everywhere: brighter means more. Weights use one fixed sequential scale, 0 → 1, the same
for every head and every view, so colours compare across heads; or, with --scale head, each head's own
scale from its smallest to its largest weight, so a broad head is not one flat dark square. Scores (any real number) use a
diverging scale centred on 0: the further from 0, the brighter; blue below 0, orange above.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# Near-black through grey-violet to red, orange and pale yellow, each stop brighter (higher luminance)
# than the one before, so brightness rises all the way (an inferno-like scale; its low quarter greyish
# so that 256-colour terminals, which have few dark colours, keep it dark).
SEQUENTIAL = ((34, 32, 38), (96, 80, 110), (210, 80, 60), (245, 140, 30), (252, 250, 170))
# dark at 0, brightening towards blue (negative) and orange (positive), equally bright at equal |score|.
NEGATIVE = ((38, 38, 46), (50, 100, 190), (130, 190, 255))
POSITIVE = ((38, 38, 46), (170, 80, 30), (255, 170, 90))
SHADES = "░▒▓█"  # ink rising with the value; below SHADE_FLOOR nothing is drawn


def _interpolate(stops, share: float) -> tuple[int, int, int]:
    share = min(1.0, max(0.0, share))
    position = share * (len(stops) - 1)
    index = min(int(position), len(stops) - 2)
    part = position - index
    low, high = stops[index], stops[index + 1]
    red, green, blue = (int(round(a + (b - a) * part)) for a, b in zip(low, high))
    return red, green, blue


def hex_colour(rgb: tuple[int, int, int]) -> str:
    return "#{:02x}{:02x}{:02x}".format(*rgb)


def luminance(rgb: tuple[int, int, int]) -> float:
    red, green, blue = (channel / 255 for channel in rgb)
    return 0.2126 * red + 0.7152 * green + 0.0722 * blue


@dataclass(frozen=True)
class Scale:
    """How values become colours and glyphs. kind: "weights" (fixed 0 → 1, or one head's own low → limit),
    "scores" (±limit around 0) or "magnitude" (0 → limit)."""

    kind: str
    limit: float = 1.0  # scores: the largest |value| shown at full brightness; others: the brightest value
    low: float = 0.0  # weights on a head's own scale: its smallest weight, shown darkest
    own: bool = False  # weights on one head's own scale (--scale head), not the fixed 0 → 1

    @classmethod
    def weights(cls, matrix=None, per_head: bool = False) -> Scale:
        """The fixed 0 → 1 scale; per_head: the matrix's own smallest → largest finite weight (NaN: masked,
        left out). A matrix of one value (a single allowed key) keeps 0 → that value."""
        if not per_head or matrix is None:
            return cls("weights", 1.0)
        finite = np.asarray(matrix, dtype=np.float64)
        finite = finite[np.isfinite(finite)]
        if not finite.size:
            return cls("weights", 1.0)
        low, high = float(finite.min()), float(finite.max())
        if high - low < SPAN_FLOOR:
            low = 0.0 if high > 0 else low
            high = high if high > 0 else 1.0
        return cls("weights", high, low, own=True)

    @classmethod
    def scores(cls, *matrices) -> Scale:
        """A diverging scale centred on 0 reaching the largest |finite value| of the matrices."""
        limit = 0.0
        for matrix in matrices:
            if matrix is None:
                continue
            finite = np.abs(np.asarray(matrix, dtype=np.float64))
            finite = finite[np.isfinite(finite)]
            if finite.size:
                limit = max(limit, float(finite.max()))
        return cls("scores", limit or 1.0)

    @classmethod
    def magnitude(cls, *matrices) -> Scale:
        """Non-negative values (norms): the weights' colours from 0 up to the largest finite value."""
        return cls("magnitude", cls.scores(*matrices).limit)

    @property
    def diverging(self) -> bool:
        return self.kind == "scores"

    def share(self, value: float) -> float:
        """Brightness in [0, 1]: the weight itself (or its place between the head's low and limit), or
        |score| / limit, or a magnitude / limit."""
        if self.diverging:
            return min(1.0, abs(value) / self.limit)
        return min(1.0, max(0.0, (value - self.low) / (self.limit - self.low)))

    def shares(self, matrix) -> np.ndarray:
        """share() of every cell of a matrix (NaN stays NaN): the picture the fixed 0 → 1 colours draw."""
        values = np.asarray(matrix, dtype=np.float64)
        if self.diverging:
            return np.minimum(1.0, np.abs(values) / self.limit)
        return np.clip((values - self.low) / (self.limit - self.low), 0.0, 1.0)

    def rgb(self, value: float) -> tuple[int, int, int]:
        if self.diverging:
            return _interpolate(POSITIVE if value >= 0 else NEGATIVE, self.share(value))
        return _interpolate(SEQUENTIAL, self.share(value))

    def colour(self, value: float) -> str:
        return hex_colour(self.rgb(value))

    def shade(self, value: float) -> str:
        """A glyph whose ink grows with brightness: ' ' (nothing), ░, ▒, ▓, █."""
        share = self.share(value)
        if share < SHADE_FLOOR:
            return " "
        return SHADES[min(len(SHADES) - 1, int(share * len(SHADES)))]

    @property
    def low_label(self) -> str:
        return stat(-self.limit) if self.diverging else weight_label(self.low) if self.own else "0"

    @property
    def high_label(self) -> str:
        if self.kind == "weights":
            return weight_label(self.limit) if self.own else "1"
        return stat(self.limit)

    @property
    def middle_label(self) -> str:
        if self.diverging:
            return "0"
        if self.kind == "weights":
            return weight_label((self.low + self.limit) / 2) if self.own else "0.5"
        return stat(self.limit / 2)

    def stops(self, count: int) -> list[float]:
        """count values evenly across the scale, low to high (for legends and colour bars)."""
        low, high = (-self.limit, self.limit) if self.diverging else (self.low, self.limit)
        return [low + (high - low) * index / (count - 1) for index in range(count)]


SHADE_FLOOR = 0.02  # a weight under 2% draws no ink
SPAN_FLOOR = 1e-6  # a head whose weights span less than this has no range of its own to stretch


def weight_label(value: float) -> str:
    """A weight at a scale's end, 3 decimals at most: 0.007, 0.44, 1 (never '7.0e-3' beside '0.44')."""
    return f"{value:.3f}".rstrip("0").rstrip(".") or "0"


NO_ATTENTION = "no attention matrix (linear attention / state space)"


def no_attention_note(info) -> str | None:
    """A hybrid's layers without softmax attention, named by their true index: 'layers 0, 2: no attention matrix
    (linear attention / state space); attention layers 1, 3'. None for a model whose every layer has attention."""
    other = tuple(getattr(info, "no_attention_layers", ()))
    if not other:
        return None
    named = ", ".join(map(str, other[:16])) + (f" … ({len(other)})" if len(other) > 16 else "")
    attention = info.attention_layers
    shown = ", ".join(map(str, attention[:16])) + (" …" if len(attention) > 16 else "")
    return f"{'layer' if len(other) == 1 else 'layers'} {named}: {NO_ATTENTION}; attention layers {shown}"


def stat(value: float | None) -> str:
    """A statistic in a table or sentence, one format everywhere: at most 4 significant digits, no '+', no '-0'.

    0.1234 → '0.12', 5.104 → '5.10', 11.94 → '11.9', 110.4 → '110', 3531 → '3531', 52000 → '5.2e4',
    0.0042 → '4.2e-3', 5.2e-08 → '5.2e-8'.
    """
    if value is None or not math.isfinite(value):
        return "—"
    if value == 0:
        return "0"
    size = abs(value)
    if size >= 1e4 or size < 0.01:
        mantissa, exponent = f"{value:.1e}".split("e")
        return f"{mantissa}e{int(exponent)}"
    for limit, decimals in ((9.995, 2), (99.95, 1), (math.inf, 0)):  # by the rounded size: 99.996 → '100'
        if size < limit:
            text = f"{value:.{decimals}f}"
            break
    return "0" if float(text) == 0 else text


@dataclass(frozen=True)
class CellFormat:
    """How a heatmap's numbers are written in CELL characters: one number of decimals for the whole matrix.

    Weights: '1.00', '.40', '.05', '0' for under 0.005. Scores: two decimals ('-1.42') while every value fits,
    else two without the leading zero where every |value| is under 1 ('-.21', '.05', '0': a weight change,
    B − A), else one decimal ('-1.4', '2.9', '0.3'), else whole numbers ('-14', '290'), else whole numbers of
    a power of ten named in the legend.
    """

    decimals: int
    weights: bool
    exponent: int = 0  # scores shown divided by 10**exponent
    bare: bool = False  # scores under 1 in size: no leading zero ('-.21'), '0' where they round to 0

    @classmethod
    def choose(cls, matrix: np.ndarray, scale: Scale, width: int) -> CellFormat:
        if scale.kind == "weights":
            return cls(2, True)
        finite = np.asarray(matrix, dtype=np.float64)
        finite = finite[np.isfinite(finite)]
        if not finite.size:
            return cls(1, False)
        extremes = (finite.min(), finite.max())
        small = max(abs(finite.min()), abs(finite.max())) < 0.995
        formats = [cls(2, False)] + ([cls(2, False, bare=True)] if small else []) + [cls(1, False), cls(0, False)]
        for fmt in formats:  # the most decimals every value of the matrix fits in
            if all(len(fmt.text(value)) <= width for value in extremes):
                return fmt
        exponent = 1
        while len(str(int(round(max(abs(finite.min()), abs(finite.max())) / 10**exponent)))) + 1 > width:
            exponent += 1
        return cls(0, False, exponent)

    def text(self, value: float) -> str:
        if not math.isfinite(value):
            return ""
        if self.weights:
            if value < 0.005:
                return "0"
            return f"{value:.2f}" if value >= 0.995 else f"{value:.2f}".lstrip("0")
        value = value / 10**self.exponent
        text = f"{value:.{self.decimals}f}"
        if self.bare:
            return "0" if float(text) == 0 else text.replace("0.", ".", 1)
        if float(text) == 0:  # never '-0.0'
            text = f"{0:.{self.decimals}f}"
        return text

    @property
    def note(self) -> str:
        return f"numbers ×10^{self.exponent}" if self.exponent else ""
