"""--save for an image's report: the image itself (embedded as a data: PNG, so the file stays offline) with a
heat overlay per head, as SVG (and the PNG/PDF drawn from it), or as an HTML page where clicking a patch
makes it the query of every head (image_page.js), and the [CLS] button (or the patches' mean) goes back."""

from __future__ import annotations

import base64
import io

import numpy as np

from attn_cli.analyses.rollout import RolloutReport
from attn_cli.data.image import query_row
from attn_cli.render.image_view import MARK, spread
from attn_cli.render.scale import Scale, hex_colour
from attn_cli.render.svg import Svg

SIDE = 200  # px: each head's picture
GAP = 16
ACROSS = 4  # pictures per row
OPACITY = 0.75  # the heat over the most attended patch; the least gets none


def data_url(pixels: np.ndarray) -> str:
    """(H, W, 3) uint8 → a data: URL of the PNG."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def pictures(report, query) -> list[tuple[str, np.ndarray]]:
    """(title, the query's weights on the grid (rows, cols)) for every head of an inspect report, or the one
    rollout of a rollout report."""
    grid = report.image
    if isinstance(report, RolloutReport):  # a RolloutReport
        row, name = query_row(grid, report.matrix, query)
        return [(f"rollout from {name}", row)]
    drawn = []
    for layer, head in report.heads():
        row, name = query_row(grid, head.weights, query)
        drawn.append((f"L{layer} H{head.head} from {name}", row))
    return drawn


def image_svg(report, query=None) -> str:
    """Every head's picture: the image, a rect per patch in the weights' heat colour, its opacity rising
    from the least to the most attended patch; the query patch (row, col), if any, outlined in MARK."""
    grid = report.image
    svg, url = Svg(), data_url(grid.pixels)
    height = SIDE * grid.pixels.shape[0] / grid.pixels.shape[1]
    scale = Scale("weights", 1.0)
    svg.add(
        svg.text(10, 24, f"{report.model.name} · {grid.source} · {grid.rows} × {grid.cols} patches", 14, weight="bold"),
        400,
        30,
    )
    cell_w, cell_h = SIDE / grid.cols, height / grid.rows
    for index, (title, weights) in enumerate(pictures(report, query)):
        x = 10 + (index % ACROSS) * (SIDE + GAP)
        y = 44 + (index // ACROSS) * (height + GAP + 18)
        shares = spread(weights)
        rects = "".join(
            f'<rect x="{x + c * cell_w:.2f}" y="{y + 18 + r * cell_h:.2f}" width="{cell_w:.2f}" height="{cell_h:.2f}" '
            f'fill="{hex_colour(scale.rgb(float(shares[r, c])))}" fill-opacity="{OPACITY * shares[r, c]:.3f}"/>'
            for r in range(grid.rows)
            for c in range(grid.cols)
        )
        if query is not None and not isinstance(report, RolloutReport):
            rects += (
                f'<rect x="{x + query[1] * cell_w + 1:.2f}" y="{y + 18 + query[0] * cell_h + 1:.2f}" '
                f'width="{cell_w - 2:.2f}" height="{cell_h - 2:.2f}" fill="none" stroke="{hex_colour(MARK)}" '
                'stroke-width="2"/>'
            )
        svg.add(
            svg.text(x, y + 13, title, 12)
            + f'<image x="{x}" y="{y + 18}" width="{SIDE}" height="{height:.2f}" href="{url}" '
            f'preserveAspectRatio="none"/>' + rects,
            x + SIDE,
            y + 18 + height,
        )
    return svg.document(f"attn · {grid.source}")


LEVELS = 255  # a query row's weights on the patches, each a byte: 0 the row's smallest, 255 its largest


def coded_rows(grid, weights) -> dict:
    """A head's (T, T) weights as the page draws them, compact: each query row's weights on the patches, plus (as
    the last row) the mean of the patches' rows, the query of a model without [CLS] — (T + 1, P) — coded per row in
    one byte each (0 its smallest, 255 its largest), base64; and each row's smallest and largest, (T + 1, 2)
    little-endian float32, base64. The page spreads a row from its smallest to its largest weight, so the bytes
    are what it shows; decoded, low + code / 255 · (high − low) is within (high − low) / 510 of the weight."""
    weights = np.nan_to_num(np.asarray(weights, dtype=np.float64))
    first = len(grid.specials)
    rows = np.vstack([weights[:, first:], weights[first:, first:].mean(axis=0, keepdims=True)])  # (T + 1, P)
    low, high = rows.min(axis=1, keepdims=True), rows.max(axis=1, keepdims=True)  # (T + 1, 1) each
    span = np.where(high > low, high - low, 1.0)
    codes = np.rint((rows - low) / span * LEVELS).astype(np.uint8)  # (T + 1, P)
    ranges = np.hstack([low, high]).astype("<f4")  # (T + 1, 2)
    return {
        "codes": base64.b64encode(codes.tobytes()).decode("ascii"),
        "ranges": base64.b64encode(ranges.tobytes()).decode("ascii"),
    }


def image_page_data(report, query=None) -> dict:
    """What image_page.js draws: the image, the grid, every head's query rows on the patches (coded_rows), and
    the query patch it opens on ([row, col], or None for [CLS])."""
    grid = report.image
    if isinstance(report, RolloutReport):
        heads = [{"title": "rollout", **coded_rows(grid, report.matrix)}]
    else:
        heads = [
            {"title": f"L{layer} H{head.head}", **coded_rows(grid, head.weights)} for layer, head in report.heads()
        ]
    return {
        "title": f"attn · {report.model.name}",
        "text": grid.source,
        "image": data_url(grid.pixels),
        "rows": grid.rows,
        "cols": grid.cols,
        "specials": list(grid.specials),
        "heads": heads,
        "query": None if query is None or isinstance(report, RolloutReport) else list(query),
        "colours": [hex_colour(Scale("weights", 1.0).rgb(level / 32)) for level in range(33)],
    }


def image_html(report, query=None) -> str:
    from attn_cli.render.figures import html_document

    return html_document(image_page_data(report, query), script="image_page.js")
