"""The route graph as an SVG (--save x.svg, .png, .pdf): layers up, positions across, one line per kept
edge, its width its weight; hovering an edge or a node in a browser shows what it is (an SVG <title>)."""

from __future__ import annotations

from html import escape

from attn_cli.render.page_parts import report_title, svg_title
from attn_cli.render.svg import Svg

COLUMN = 26.0  # px per position: 100 tokens make a 2.6k-wide figure whose labels still do not overlap
ROW = 56.0  # px per residual stage (embedding, then each layer's attention and output)
COLOURS = {"attention": "#2b6cb0", "residual": "#a0aec0", "ffn": "#dd6b20"}


ALL_COLUMNS = 40  # up to this many tokens every one has its column; past it, only the route's positions do


def columns(report) -> dict[int, float]:
    """position -> its column (a float: a gap of skipped positions takes half a column, drawn as ⋯)."""
    count = len(report.tokens)
    if count <= ALL_COLUMNS:
        return {position: float(position) for position in range(count)}
    shown = sorted({describe_position(name) for edge in report.edges for name in (edge.source, edge.target)})
    shown = sorted(set(shown) | {report.position})
    placed, at, last = {}, 0.0, -1
    for position in shown:
        if position > last + 1:
            at += 0.5  # the gap's ⋯
        placed[position] = at
        at, last = at + 1, position
    return placed


def describe_position(name: str) -> int:
    return int(name.split("_")[1])


def _place(name: str, x0: float, bottom: float, placed: dict[int, float]) -> tuple[float, float]:
    """A node's centre: X0_p at the bottom, A{l}_p and I{l}_p a row higher each, M{l}_p between them, to the
    right of its column."""
    layer, position = (int(part) for part in name[1:].split("_"))
    stage = {"X": 0.0, "A": 1 + 2 * layer, "M": 1.5 + 2 * layer, "I": 2 + 2 * layer}[name[0]]
    shift = 0.35 if name[0] == "M" else 0.0
    return x0 + (placed[position] + 0.5 + shift) * COLUMN, bottom - stage * ROW


def routes_svg(svg: Svg, x: float, y: float, report, panels, looked_by, per_head) -> float:
    """Figure.svg for a RoutesReport; returns the y below it."""
    from attn_cli.render.routes_view import node_label

    tokens = [token.text for token in report.tokens]
    title = report_title(report, "routes")
    svg_title(svg, x, y, title)
    about = f"routes of the prediction at position {report.position} ({tokens[report.position]!r})"
    if report.target is not None:
        about += f", which produced {report.target!r}"
    about += f"; edges above {report.threshold:g}, width = weight"
    if len(tokens) > ALL_COLUMNS:
        about += "; only the positions the route passes (⋯ the others)"
    svg.add(svg.text(x, y + 40, about, 12), x + len(about) * 7.5, y + 46)
    left, top = x + 70, y + 70
    bottom = top + (2 * report.layers) * ROW + 10
    placed = columns(report)
    right = left + (max(placed.values()) + 1) * COLUMN
    for stage in range(2 * report.layers + 1):  # the stage names down the left, a faint line across each
        label = "embedding" if stage == 0 else f"L{(stage - 1) // 2} {'attn' if stage % 2 else 'out'}"
        level = bottom - stage * ROW
        svg.add(svg.text(x, level + 4, label, 11, extra=' fill="#4a5568"'), x + 60, level)
        svg.add(
            f'<line x1="{left:.1f}" y1="{level:.1f}" x2="{right:.1f}" y2="{level:.1f}" stroke="#edf2f7"/>', right, level
        )
    for edge in sorted(report.edges, key=lambda edge: edge.weight):  # the heaviest drawn last, on top
        (x1, y1), (x2, y2) = _place(edge.source, left, bottom, placed), _place(edge.target, left, bottom, placed)
        hover = f"{node_label(edge.source, tokens)} → {node_label(edge.target, tokens)}: {edge.kind} {edge.weight:.3f}"
        if edge.heads:
            hover += "; heads " + " ".join(f"H{head} {share:.2f}" for head, share in enumerate(edge.heads))
        svg.add(
            f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{COLOURS[edge.kind]}" '
            f'stroke-width="{1 + 7 * edge.weight:.2f}" stroke-linecap="round" stroke-opacity="0.8">'
            f"<title>{escape(hover)}</title></line>",
            right,
            bottom,
        )
    for item in report.nodes():
        cx, cy = _place(item["id"], left, bottom, placed)
        svg.add(
            f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="4" fill="white" stroke="#1a202c">'
            f"<title>{escape(node_label(item['id'], tokens))}</title></circle>",
            right,
            bottom,
        )
    previous = -1
    for position, column in placed.items():  # the tokens under their columns, slanted so long ones fit
        token = f"{position}:{tokens[position]}" if len(placed) < len(tokens) else tokens[position]
        cx = left + (column + 0.5) * COLUMN
        if position > previous + 1:  # positions left out: the route does not pass them
            svg.add(svg.text(cx - 0.75 * COLUMN, bottom + 4, "⋯", 12, anchor="middle"), cx, bottom + 8)
        previous = position
        weight = "bold" if position == report.position else "normal"
        shown = token if len(token) <= 14 else token[:13] + "…"
        svg.add(
            svg.text(
                cx,
                bottom + 16,
                shown,
                11,
                anchor="end",
                weight=weight,
                extra=f' transform="rotate(-50 {cx:.1f} {bottom + 16:.1f})"',
            ),
            right + 10,
            bottom + 16 + 8 * min(len(shown), 14),
        )
    legend = bottom + 16 + 8 * 16 + 10
    for index, (kind, colour) in enumerate(COLOURS.items()):
        at = x + 70 + index * 110
        svg.add(
            f'<line x1="{at}" y1="{legend}" x2="{at + 24}" y2="{legend}" stroke="{colour}" stroke-width="4"/>',
            at + 24,
            legend,
        )
        svg.add(svg.text(at + 30, legend + 4, kind, 11), at + 100, legend + 8)
    return legend + 12
