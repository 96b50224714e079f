"""The lab decoder's loss curve as an SVG (docs/lab-loss.svg), drawn with attn's own Svg helper."""

from __future__ import annotations

import math

from attn_cli.render.svg import Svg

WIDTH, HEIGHT = 640, 300  # px of the plot area
LEFT, TOP = 60, 50  # px: room for the y labels and the title
SMOOTH = 50  # steps in the running mean drawn over the per-step losses


def running_mean(values: list[float], window: int = SMOOTH) -> list[float]:
    """Mean of the last `window` values at each step (fewer at the start)."""
    out, total = [], 0.0
    for index, value in enumerate(values):
        total += value
        if index >= window:
            total -= values[index - window]
        out.append(total / min(index + 1, window))
    return out


SCORE_COLOURS = ("#2ca02c", "#ff7f0e")  # the scores' lines, in the order given


def loss_svg(
    losses: list[float], chance: float, title: str, scores: dict[str, list[tuple[int, float]]] | None = None
) -> str:
    """Per-step loss (light) and its running mean (dark) against the step; a dashed line at `chance`,
    the loss of a model that only knows the tokens are uniform (log of their count). scores: name →
    (step, value in 0..1) points, drawn against the right-hand axis (the best head's probe scores)."""
    svg = Svg()
    top = math.ceil(max(max(losses), chance) + 0.5)
    x = lambda step: LEFT + WIDTH * step / max(1, len(losses) - 1)  # noqa: E731
    y = lambda loss: TOP + HEIGHT * (1 - loss / top)  # noqa: E731
    parts = [
        svg.text(LEFT, 22, title, 15, weight="bold"),
        svg.text(
            LEFT,
            40,
            f"cross-entropy on the copied tokens per step (light) and its mean over {SMOOTH} steps (dark), nats",
            11,
            extra=' fill="#555"',
        ),
    ]
    for tick in range(0, top + 1):
        parts.append(f'<line x1="{LEFT}" y1="{y(tick):.1f}" x2="{LEFT + WIDTH}" y2="{y(tick):.1f}" stroke="#eee"/>')
        parts.append(svg.text(LEFT - 8, y(tick) + 4, str(tick), 11, "end"))
    every = _tick_step(len(losses))
    for step in range(0, len(losses) + 1, every):
        parts.append(svg.text(x(min(step, len(losses) - 1)), TOP + HEIGHT + 18, f"{step:,}", 11, "middle"))
    parts.append(svg.text(LEFT + WIDTH / 2, TOP + HEIGHT + 38, "training step", 12, "middle"))
    parts.append(
        f'<line x1="{LEFT}" y1="{y(chance):.1f}" x2="{LEFT + WIDTH}" y2="{y(chance):.1f}" '
        'stroke="#c33" stroke-dasharray="5 4"/>'
    )
    parts.append(
        svg.text(
            LEFT + WIDTH - 4,
            y(chance) - 6,
            f"log {round(math.exp(chance))} = {chance:.2f}: no copying",
            11,
            "end",
            extra=' fill="#c33"',
        )
    )
    parts.append(_polyline([(x(i), y(v)) for i, v in enumerate(losses)], "#9ecae1", 0.7))
    parts.append(_polyline([(x(i), y(v)) for i, v in enumerate(running_mean(losses))], "#08519c", 1.8))
    parts.extend(_scores(svg, scores or {}, x, len(losses)))
    parts.append(f'<rect x="{LEFT}" y="{TOP}" width="{WIDTH}" height="{HEIGHT}" fill="none" stroke="#888"/>')
    svg.add("\n".join(parts), LEFT + WIDTH + (150 if scores else 10), TOP + HEIGHT + (60 if scores else 44))
    return svg.document(title)


def _scores(svg: Svg, scores: dict[str, list[tuple[int, float]]], x, steps: int) -> list[str]:
    """The right-hand axis (0 to 1) and one line per score, named at its end."""
    if not scores:
        return []
    y = lambda value: TOP + HEIGHT * (1 - value)  # noqa: E731
    parts = [svg.text(LEFT + WIDTH + 8, y(tick) + 4, f"{tick:.1f}", 11) for tick in (0, 0.2, 0.4, 0.6, 0.8, 1.0)]
    parts.append(svg.text(LEFT + WIDTH + 8, TOP - 8, "probe score", 11))
    for (name, points), colour in zip(scores.items(), SCORE_COLOURS):
        parts.append(_polyline([(x(step - 1), y(value)) for step, value in points], colour, 1.8))
        step, value = points[-1]
        parts.append(svg.text(LEFT + WIDTH + 40, y(value) + 4, f"{name} {value:.2f}", 11, extra=f' fill="{colour}"'))
    first = next(iter(scores.values()))
    every = first[1][0] - first[0][0] if len(first) > 1 else first[0][0]  # steps between reports
    parts.append(
        svg.text(
            LEFT,
            TOP + HEIGHT + 56,
            "green, orange: the best head's induction and previous-token "
            f"score from attn heads --probe induction, every {every} steps",
            11,
            extra=' fill="#555"',
        )
    )
    return parts


def _polyline(points: list[tuple[float, float]], colour: str, width: float) -> str:
    coordinates = " ".join(f"{px:.1f},{py:.1f}" for px, py in points)
    return f'<polyline points="{coordinates}" fill="none" stroke="{colour}" stroke-width="{width}"/>'


def _tick_step(steps: int) -> int:
    """A round step between x labels: about 5-10 of them."""
    for every in (1, 2, 5, 10, 20, 50, 100, 200, 250, 500, 1000, 2000, 5000):
        if steps / every <= 10:
            return every
    return 10_000
