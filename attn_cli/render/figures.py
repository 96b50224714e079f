"""Figures for --save: a vector SVG ready for a paper, and one self-contained interactive HTML page.

Both are written by hand from the report's numpy arrays (no plotting library, no network): the SVG
has one <rect> per cell, full token labels on both axes, a colour bar and a title; the HTML page
embeds the weights as JSON and draws them with inline JavaScript (render/page.js, page.css).
Colours come from render/scale.py, the same scales as the terminal: weights 0 → 1 fixed, scores
diverging around 0.
"""

from __future__ import annotations

import json
import math
from html import escape
from importlib import resources

import numpy as np

from attn_cli.render.scale import NEGATIVE, POSITIVE, SEQUENTIAL, CellFormat, Scale, hex_colour, luminance

FONT = "DejaVu Sans, Helvetica, Arial, sans-serif"
MAX_CELL, MIN_CELL = 28, 6  # px per heatmap cell
TARGET = 560  # px a heatmap aims for
GRID_TARGET = 900  # px across the all-heads grid
MAX_DETAIL = 16  # heads drawn in full in one SVG; more are shown in the all-heads grid
BAR_MIN = 80  # px: a colour bar is never shorter, whatever the rows
BAR_LABEL = 14  # px from a colour bar's bottom to its label's baseline


# -- what a report shows ------------------------------------------------------------------------------

def _tokens(report) -> list[str]:
    return [token.text for token in report.tokens]


NORMS_TITLE = "value-weighted norms ‖α·v·W_Oʰ‖"


def _matrix_for(head, kind: str):
    """The head's matrix of a kind (weights, scores, norms), masked cells NaN; None where it was not kept."""
    if kind == "scores":
        return head.scores
    matrix = head.norms if kind == "norms" else head.weights
    if matrix is None:
        return None
    return matrix if head.scores is None else np.where(np.isnan(head.scores), np.nan, matrix)


def _inspect_panels(report, panels) -> tuple[list[tuple[str, np.ndarray, Scale, object]], bool]:
    """[(title, matrix, scale, window)] to draw in full, and whether to add the all-heads grid."""
    from attn_cli.render.terminal import Panel, head_title, most_focused, scores_formula, weights_formula

    heads = report.heads()
    if panels is None:
        chosen = [most_focused(heads)] if len(heads) > 1 else heads[:1]
        kinds = ["weights"]
        grid = len(heads) > 1
    else:
        chosen = heads[:MAX_DETAIL]
        kinds = [kind for kind in ("weights", "scores") if Panel(kind) in panels] or ["weights"]
        grid = Panel.grid in panels or len(heads) > MAX_DETAIL
    drawn = []
    for layer, head in chosen:
        for kind in kinds:
            if kind == "weights" and head.norms is not None:  # --measure norm: shown instead, as in the terminal
                matrix = _matrix_for(head, "norms")
                drawn.append((f"{head_title(layer, head)} · {NORMS_TITLE}", matrix, Scale.magnitude(matrix),
                              head.window))
                continue
            matrix = _matrix_for(head, kind)
            formula = weights_formula(head) if kind == "weights" else scores_formula(head)
            scale = Scale.weights() if kind == "weights" else Scale.scores(matrix)
            drawn.append((f"{head_title(layer, head)} · {kind} = {formula}", matrix, scale, head.window))
    return drawn, grid


def _report_title(report, command: str) -> str:
    model = report.model
    variant = getattr(report, "variant", None)
    extra = f" · {variant}" if variant else ""
    layers = f"{model.layers} layer" + ("s" if model.layers != 1 else "")
    heads = f"{model.heads} head" + ("s" if model.heads != 1 else "")
    return f"attn {command} · {model.name} ({model.architecture}, {layers} × {heads}){extra}"


# -- SVG ----------------------------------------------------------------------------------------------

def _text_width(text: str, size: float) -> float:
    """A generous estimate of a label's width in px (wide characters count double)."""
    return sum(2 if ord(ch) > 0x2e80 else 1 for ch in text) * size * 0.62


class _Svg:
    def __init__(self):
        self.parts: list[str] = []
        self.width = 0.0
        self.height = 0.0

    def add(self, fragment: str, right: float, bottom: float) -> None:
        self.parts.append(fragment)
        self.width = max(self.width, right)
        self.height = max(self.height, bottom)

    def text(self, x, y, content, size=12, anchor="start", weight="normal", extra="") -> str:
        return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
                f'font-weight="{weight}"{extra}>{escape(content)}</text>')

    def document(self, title: str) -> str:
        width, height = math.ceil(self.width + 20), math.ceil(self.height + 20)
        return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
                f'viewBox="0 0 {width} {height}" font-family="{FONT}">\n<title>{escape(title)}</title>\n'
                f'<rect width="100%" height="100%" fill="white"/>\n' + "\n".join(self.parts) + "\n</svg>\n")


def _heatmap_svg(svg: _Svg, x0: float, y0: float, title: str, matrix, tokens: list[str], scale: Scale,
                 window=None) -> tuple[float, float]:
    """One heatmap at (x0, y0) with full labels and its colour bar; returns its (width, height)."""
    if matrix is None:
        svg.add(svg.text(x0, y0 + 14, f"{title}: not kept (past the matrix size limit)", 13), x0 + 400, y0 + 20)
        return 400, 24
    rows, cols = matrix.shape
    row0, col0 = (window.rows[0], window.cols[0]) if window is not None and window.is_partial else (0, 0)
    row_tokens = [f"{tokens[row0 + i]}" for i in range(rows)]
    col_tokens = [f"{tokens[col0 + j]}" for j in range(cols)]
    cell = max(MIN_CELL, min(MAX_CELL, TARGET / max(rows, cols)))
    size = max(7.0, min(13.0, cell * 0.55))
    left = max(_text_width(token, size) for token in row_tokens) + 8
    top = max(_text_width(token, size) for token in col_tokens) * 0.75 + 10
    # the title on two lines, head then formula, so neighbouring heatmaps' titles never overlap
    head_part, _, formula = title.partition(" · weights = ") if " · weights = " in title else title.partition(
        " · scores = ")
    kind = "weights = " if " · weights = " in title else "scores = " if formula else ""
    lines = [head_part] + ([kind + formula] if formula else [])
    out = [svg.text(x0, y0 + 15 + 17 * index, line, 14 if index == 0 else 12, weight="bold" if index == 0 else "normal")
           for index, line in enumerate(lines)]
    title_width = max(_text_width(line, 14) for line in lines)
    gx, gy = x0 + left, y0 + 26 + 17 * (len(lines) - 1) + top
    for j, token in enumerate(col_tokens):  # key labels, slanted up-right, reading from the column
        cx = gx + (j + 0.5) * cell
        out.append(svg.text(cx, gy - 5, token, size,
                            extra=f' transform="rotate(-50 {cx:.1f} {gy - 5:.1f})"'))
    for i, token in enumerate(row_tokens):
        out.append(svg.text(gx - 5, gy + (i + 0.5) * cell + size * 0.35, token, size, anchor="end"))
    numbers = cell >= 22
    for i in range(rows):
        for j in range(cols):
            value = float(matrix[i, j])
            if not math.isfinite(value):
                continue
            colour = scale.colour(value)
            out.append(f'<rect x="{gx + j * cell:.2f}" y="{gy + i * cell:.2f}" width="{cell:.2f}" '
                       f'height="{cell:.2f}" fill="{colour}"><title>{escape(row_tokens[i])} → '
                       f'{escape(col_tokens[j])}: {value:.4g}</title></rect>')
            if numbers:
                ink = "black" if luminance(scale.rgb(value)) > 0.45 else "white"
                label = CellFormat(2, True).text(value) if not scale.diverging else f"{value:.1f}"
                out.append(svg.text(gx + (j + 0.5) * cell, gy + (i + 0.5) * cell + 3.5, label, 9, "middle",
                                    extra=f' fill="{ink}"'))
    out.append(f'<rect x="{gx:.2f}" y="{gy:.2f}" width="{cols * cell:.2f}" height="{rows * cell:.2f}" '
               'fill="none" stroke="#888" stroke-width="0.6"/>')
    bar_x = gx + cols * cell + 18
    bar_h = max(BAR_MIN, rows * cell)
    out.append(_colour_bar(svg, bar_x, gy, bar_h, scale))
    # The caption goes under the cells and under the colour bar's own label (a bar taller than a few rows
    # of cells ends lower than they do), so the two never share a line.
    caption = "rows: queries · columns: keys"
    caption_y = gy + max(rows * cell, bar_h + BAR_LABEL) + 13
    out.append(svg.text(gx, caption_y, caption, 9, extra=' fill="#666"'))
    width = max(bar_x + 60 - x0, title_width, gx + _text_width(caption, 9) - x0)
    height = caption_y + 9 - y0
    svg.add("\n".join(out), x0 + width, y0 + height)
    return width, height


_bar_ids = iter(range(1, 1 << 30))


def _colour_bar(svg: _Svg, x: float, y: float, height: float, scale: Scale) -> str:
    gradient = f"bar{next(_bar_ids)}"
    stops = scale.stops(11)
    stop_tags = "".join(f'<stop offset="{index / 10:.2f}" stop-color="{scale.colour(value)}"/>'
                        for index, value in enumerate(reversed(stops)))
    out = [f'<defs><linearGradient id="{gradient}" x1="0" y1="0" x2="0" y2="1">{stop_tags}</linearGradient></defs>',
           f'<rect x="{x:.1f}" y="{y:.1f}" width="12" height="{height:.1f}" fill="url(#{gradient})" '
           'stroke="#888" stroke-width="0.5"/>']
    ticks = [(stops[-1], scale.high_label), (stops[len(stops) // 2], scale.middle_label), (stops[0], scale.low_label)]
    for index, (_, label) in enumerate(ticks):
        ty = y + height * index / 2
        out.append(f'<line x1="{x + 12:.1f}" y1="{ty:.1f}" x2="{x + 16:.1f}" y2="{ty:.1f}" stroke="#444"/>')
        out.append(svg.text(x + 18, ty + 4, label, 10))
    noun = {"weights": "weight", "scores": "score", "magnitude": "norm"}[scale.kind]
    out.append(svg.text(x + 6, y + height + BAR_LABEL, noun, 9, "middle",
                        extra=' fill="#666"'))
    return "\n".join(out)


def _grid_svg(svg: _Svg, x0: float, y0: float, layers, scale: Scale, mark=None) -> tuple[float, float]:
    """Every head as a thumbnail: layers down, heads across, labelled."""
    across = max(len(heads) for _, heads in layers)
    first = next(head.weights for _, heads in layers for head in heads if head.weights is not None)
    rows, cols = first.shape
    thumb = max(24.0, min(96.0, GRID_TARGET / across - 8))
    cell_w, cell_h = thumb / cols, thumb / cols
    height = cell_h * rows
    out = [svg.text(x0, y0 + 15, "Every head's weights (query rows ↓, key columns →); same colour scale", 14,
                    weight="bold")]
    gx, gy = x0 + 30, y0 + 40
    for index in range(across):
        out.append(svg.text(gx + index * (thumb + 8) + thumb / 2, gy - 6, f"h{layers[0][1][index].head}"
                            if index < len(layers[0][1]) else "", 11, "middle"))
    for row, (layer, heads) in enumerate(layers):
        ty = gy + row * (height + 8)
        out.append(svg.text(gx - 6, ty + height / 2 + 4, f"L{layer}", 11, "end"))
        for index, head in enumerate(heads):
            tx = gx + index * (thumb + 8)
            matrix = head.weights
            if matrix is None:
                continue
            out.append(f'<g><title>layer {layer} head {head.head}</title>'
                       f'<rect x="{tx:.1f}" y="{ty:.1f}" width="{thumb:.1f}" height="{height:.1f}" '
                       f'fill="{scale.colour(0)}"/>')
            for i in range(matrix.shape[0]):
                for j in range(matrix.shape[1]):
                    value = float(matrix[i, j])
                    if math.isfinite(value) and scale.share(value) >= 0.02:
                        out.append(f'<rect x="{tx + j * cell_w:.2f}" y="{ty + i * cell_h:.2f}" '
                                   f'width="{cell_w + 0.05:.2f}" height="{cell_h + 0.05:.2f}" '
                                   f'fill="{scale.colour(value)}"/>')
            stroke = ' stroke="#1a73e8" stroke-width="2"' if mark == (layer, head.head) else ' stroke="#bbb" stroke-width="0.5"'
            out.append(f'<rect x="{tx:.1f}" y="{ty:.1f}" width="{thumb:.1f}" height="{height:.1f}" fill="none"{stroke}/></g>')
    bottom = gy + len(layers) * (height + 8)
    right = gx + across * (thumb + 8)
    out.append(_colour_bar(svg, right + 10, gy, min(bottom - gy - 8, 200), scale))
    svg.add("\n".join(out), right + 70, bottom + 16)
    return right + 70 - x0, bottom + 16 - y0


def _flow(svg: _Svg, x0: float, y0: float, items, tokens, limit: float = 1500) -> float:
    """Heatmaps left to right, wrapping at `limit` px; returns the y below them."""
    x, y, line = x0, y0, 0.0
    for title, matrix, scale, window in items:
        probe = _Svg()
        width, height = _heatmap_svg(probe, 0, 0, title, matrix, tokens, scale, window)
        if x > x0 and x + width > limit:
            x, y, line = x0, y + line + 24, 0.0
        _heatmap_svg(svg, x, y, title, matrix, tokens, scale, window)
        x += width + 30
        line = max(line, height)
    return y + line + 24


def svg_figure(report, panels=None) -> str:
    """A vector figure of the report (inspect, a batch, compare or steps)."""
    svg = _Svg()
    _svg_report(svg, 10, 10, report, panels)
    return svg.document(getattr(report, "text", "attn"))


def _svg_report(svg: _Svg, x: float, y: float, report, panels) -> float:
    kind = type(report).__name__
    if kind == "InspectBatch":
        for single in report.reports:
            y = _svg_report(svg, x, y, single, panels) + 20
        return y
    tokens = _tokens(report)
    if kind == "CompareReport":
        svg.add(svg.text(x, y + 16, _report_title(report, "compare"), 16, weight="bold"), x + 600, y + 24)
        items = _compare_items(report)
        return _flow(svg, x, y + 34, items, tokens)
    if kind == "StepsReport":
        svg.add(svg.text(x, y + 16, f"{_report_title(report, 'steps')} · layer {report.layer} head {report.head}",
                         16, weight="bold"), x + 600, y + 24)
        return _flow(svg, x, y + 34, _steps_items(report), tokens)
    svg.add(svg.text(x, y + 16, _report_title(report, "inspect"), 16, weight="bold"), x + 600, y + 24)
    items, grid = _inspect_panels(report, panels)
    y += 34
    if grid:
        from attn_cli.render.terminal import most_focused

        layers = [(layer.layer, layer.heads) for layer in report.layers]
        mark = None
        if panels is None:
            layer, head = most_focused(report.heads())
            mark = (layer, head.head)
        if any(head.weights is not None for _, heads in layers for head in heads):
            _, height = _grid_svg(svg, x, y, layers, Scale.weights(), mark)
            y += height + 10
    return _flow(svg, x, y, items, tokens)


def _compare_items(report):
    from attn_cli.render.compare_view import shown_pairs
    from attn_cli.render.terminal import head_title

    items = []
    for layer_pos, head_pos in shown_pairs(report):
        for name, run in report.runs.items():
            entry = run[layer_pos]
            head = entry.heads[head_pos]
            items.append((f"{name} · {head_title(entry.layer, head)}", _matrix_for(head, "weights"), Scale.weights(),
                          head.window))
    return items


def _steps_items(report):
    items, masked = [], None
    for number, stage in enumerate(report.stages, start=1):
        if stage.name == "mask":
            masked = np.isnan(stage.values)
        if stage.kind != "tokens×tokens":
            continue
        shown = stage.values if masked is None else np.where(masked, np.nan, stage.values)
        scale = Scale.weights() if stage.name == "softmax" else Scale.scores(shown)
        items.append((f"{number}. {stage.name}", shown, scale, None))
    return items


# -- HTML ---------------------------------------------------------------------------------------------

def _rounded(matrix) -> list | None:
    if matrix is None:
        return None
    return [[None if not math.isfinite(v) else round(v, 4) for v in row] for row in np.asarray(matrix, float).tolist()]


def _head_json(head, kind: str = "weights") -> dict:
    window = head.window
    matrix = _matrix_for(head, kind)
    record = {"head": head.head, "m": _rounded(matrix)}
    if kind == "norms" and matrix is not None:  # each head's norms coloured 0 → its own largest, as in the terminal
        record["limit"] = Scale.magnitude(matrix).limit
    if window.is_partial:
        record["rows"], record["cols"] = list(window.rows), list(window.cols)
    return record


def _run_json(name: str, layers, kind: str = "weights", limit: float = 1.0) -> dict:
    return {"name": name, "kind": kind, "limit": limit,
            "layers": [{"layer": layer.layer, "heads": [_head_json(head, kind) for head in layer.heads]}
                       for layer in layers]}


def page_data(report) -> dict:
    """What the page draws: tokens, and one or more runs of layers × heads × matrices."""
    kind = type(report).__name__
    if kind == "InspectBatch":
        report = report.reports[0]  # one page per text; the first (the CLI says so)
        kind = "InspectReport"
    data = {"tokens": _tokens(report), "model": report.model.name, "text": report.text,
            "scale": {name: [hex_colour(rgb) for rgb in stops]
                      for name, stops in (("weights", SEQUENTIAL), ("negative", NEGATIVE), ("positive", POSITIVE))}}
    if kind == "CompareReport":
        data["title"] = _report_title(report, "compare")
        data["runs"] = [_run_json(name, layers) for name, layers in report.runs.items()]
        first = next(iter(shown_pairs_safe(report)), (0, 0))
        baseline = report.runs["baseline"]
        data["start"] = [baseline[first[0]].layer, baseline[first[0]].heads[first[1]].head]
    elif kind == "StepsReport":
        data["title"] = f"{_report_title(report, 'steps')} · layer {report.layer} head {report.head}"
        runs = []
        for title, matrix, scale, _ in _steps_items(report):
            runs.append({"name": title, "kind": "weights" if not scale.diverging else "scores", "limit": scale.limit,
                         "layers": [{"layer": report.layer, "heads": [{"head": report.head, "m": _rounded(matrix)}]}]})
        data["runs"] = runs
        data["start"] = [report.layer, report.head]
    else:
        from attn_cli.render.terminal import most_focused

        data["title"] = _report_title(report, "inspect")
        data["runs"] = [_run_json(getattr(report, "variant", "baseline"), report.layers)]
        if any(head.norms is not None for _, head in report.heads()):  # --measure norm: beside the weights
            variant = getattr(report, "variant", "baseline")
            data["runs"][0]["name"] = "weights" if variant == "baseline" else f"weights · {variant}"
            data["runs"].append(_run_json(NORMS_TITLE, report.layers, "norms"))
        heads = report.heads()
        layer, head = most_focused(heads) if len(heads) > 1 else heads[0]
        data["start"] = [layer, head.head]
    return data


def shown_pairs_safe(report):
    from attn_cli.render.compare_view import shown_pairs

    return shown_pairs(report)


def script_json(data) -> str:
    """JSON safe inside <script>: no '</' (so no '</script>'), no '<!--', and U+2028/9 escaped."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def html_page(report) -> str:
    """One offline page: the data inline as JSON, the script and style inline, nothing fetched."""
    data = page_data(report)
    folder = resources.files("attn_cli.render")
    script = folder.joinpath("page.js").read_text(encoding="utf-8")
    style = folder.joinpath("page.css").read_text(encoding="utf-8")
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
        "style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">\n"
        f"<title>{escape(data['title'])}</title>\n<style>\n{style}</style>\n</head>\n<body>\n"
        f"<h1>{escape(data['title'])}</h1>\n"
        f"<p class=\"text\">{escape(data['text'])}</p>\n"
        "<div id=\"app\"></div>\n"
        f"<script id=\"attn-data\" type=\"application/json\">{script_json(data)}</script>\n"
        f"<script>\n{script}</script>\n</body>\n</html>\n"
    )
