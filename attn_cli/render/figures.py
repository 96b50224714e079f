"""Figures for --save: a vector SVG ready for a paper, and one self-contained interactive HTML page.

Both are written by hand from the report's numpy arrays (no plotting library, no network): the SVG
has one <rect> per cell, full token labels on both axes, a colour bar and a title; the HTML page
embeds the weights as JSON and draws them with inline JavaScript (render/page.js, page.css).
Colours come from render/scale.py, the same scales as the terminal: weights 0 → 1 fixed, scores
diverging around 0.
"""

from __future__ import annotations

import dataclasses
import json
from html import escape
from importlib import resources

import numpy as np

from attn_cli.data.registry import Figure, analysis_for
from attn_cli.plumbing.errors import BadInput
from attn_cli.render.page_parts import (
    matrix_for,
    own_span,
    report_title,
    rounded,
    run_json,
    sink_rows,
    svg_title,
)
from attn_cli.render.scale import NEGATIVE, POSITIVE, SEQUENTIAL, Scale, hex_colour
from attn_cli.render.svg import MAX_DETAIL, Heat, Svg, flow, grid_svg

# -- what a report shows ------------------------------------------------------------------------------


def figure_of(report) -> tuple[str, Figure]:
    """The report's command and Figure, from the analysis registered for its type (data/registry.py); a report
    with no figure (attn models' catalog) is one line saying so."""
    spec = analysis_for(report)
    if spec is None or spec.figure is None:
        raise BadInput(f"{type(report).__name__} has no figure", "use --json, or no --save")
    return spec.name, spec.figure


def axis_tokens(report) -> list[str]:
    """An inspect report's matrix labels: its axis (words under --words, else its tokens)."""
    return [unit.text for unit in report.axis]


def token_texts(report) -> list[str]:
    """The report's tokens' texts."""
    return [token.text for token in report.tokens]


def _inspect_panels(report, panels, per_head: bool = False) -> tuple[list[Heat], bool]:
    """The heatmaps to draw in full (a learned sink's weights with their ⟨sink⟩ column), and whether to add the
    all-heads grid."""
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
            if kind == "weights" and head.measured:  # --measure NAME: shown instead, as in the terminal
                for measure, matrix in head.measured.items():
                    matrix = head.masked(matrix)
                    drawn.append(
                        Heat(
                            f"{head_title(layer, head)} · {measure.title}", matrix, Scale.magnitude(matrix), head.window
                        )
                    )
                continue
            matrix = matrix_for(head, kind)
            formula = weights_formula(head) if kind == "weights" else scores_formula(head)
            scale = Scale.weights(matrix, per_head) if kind == "weights" else Scale.scores(matrix)
            sink = sink_rows(head) if kind == "weights" else None
            drawn.append(Heat(f"{head_title(layer, head)} · {kind} = {formula}", matrix, scale, head.window, sink=sink))
    return drawn, grid


def _inspect_extra(report) -> str:
    """What an inspect report's title adds after the model: its variant, and "over words" under --words."""
    extra = f" · {report.variant}" if report.variant else ""
    return extra + (" · over words" if report.words is not None else "")


# -- SVG ----------------------------------------------------------------------------------------------


def svg_figure(report, panels=None, looked_by: str = "inspect", per_head: bool = False) -> str:
    """A vector figure of the report, as its analysis draws it (data/registry.py). An inspect report's title
    names the command it `looked_by` (`attn explore` exports one head of it). per_head: weights coloured on
    each head's own scale (--scale head)."""
    svg = Svg()
    svg_report(svg, 10, 10, report, panels, looked_by, per_head)
    return svg.document(report_text(report))


def report_text(report) -> str:
    """What the report was run on, in a line: its text, unless its figure says otherwise (diff: A's and B's)."""
    _, figure = figure_of(report)
    return figure.text(report) if figure.text is not None else report.text


def svg_report(
    svg: Svg, x: float, y: float, report, panels, looked_by: str = "inspect", per_head: bool = False
) -> float:
    """The report's figure at (x, y), as its analysis's Figure draws it; returns the y below it."""
    command, figure = figure_of(report)
    if figure.svg is not None:
        return figure.svg(svg, x, y, report, panels, looked_by, per_head)
    if figure.items is None:  # a Figure (a plugin's) may give a page and nothing to draw as SVG
        raise BadInput(f"{type(report).__name__} has no SVG figure", "save it as .html, or use --json")
    svg_title(svg, x, y, report_title(report, command))
    tokens = figure.tokens(report) if figure.tokens is not None else []
    return flow(svg, x, y + 34, figure.items(report, per_head), tokens)


def batch_svg(svg: Svg, x: float, y: float, report, panels, looked_by: str, per_head: bool) -> float:
    """Several texts: each one's figure under the last."""
    for single in report.reports:
        y = svg_report(svg, x, y, single, panels, looked_by, per_head) + 20
    return y


def pair_svg(svg: Svg, x: float, y: float, report, panels, looked_by: str, per_head: bool) -> float:
    """An encoder–decoder model's stacks, one after another, each saying what it is."""
    from attn_cli.render.seq2seq_view import stack_title

    for single in report.stacks:
        svg_title(svg, x, y, stack_title(single))
        y = svg_report(svg, x, y + 30, single, panels, looked_by, per_head) + 20
    return y


def compare_svg(svg: Svg, x: float, y: float, report, panels, looked_by: str, per_head: bool) -> float:
    svg_title(svg, x, y, report_title(report, "compare"))
    return flow(svg, x, y + 34, _compare_items(report, per_head), token_texts(report))


def steps_svg(svg: Svg, x: float, y: float, report, panels, looked_by: str, per_head: bool) -> float:
    svg_title(svg, x, y, f"{report_title(report, 'steps')} · layer {report.layer} head {report.head}")
    return flow(svg, x, y + 34, _steps_items(report, per_head), token_texts(report))


def inspect_svg(svg: Svg, x: float, y: float, report, panels, looked_by: str, per_head: bool) -> float:
    """One text's heads: the chosen panels in full, the all-heads grid above them where there are several."""
    tokens = axis_tokens(report)
    svg_title(svg, x, y, report_title(report, looked_by, _inspect_extra(report)))
    drawn, grid = _inspect_panels(report, panels, per_head)
    if report.keys is None:
        items = drawn
    else:  # cross-attention: target rows, source columns
        items = [
            dataclasses.replace(
                item,
                rows=tokens,
                cols=[unit.text for unit in report.keys],
                caption="rows: target tokens (queries) · columns: source tokens (keys)",
            )
            for item in drawn
        ]
    y += 34
    if grid:
        from attn_cli.render.terminal import most_focused

        layers = [(layer.layer, layer.heads) for layer in report.layers]
        mark = None
        if panels is None:
            layer, head = most_focused(report.heads())
            mark = (layer, head.head)
        if any(head.weights is not None for _, heads in layers for head in heads):
            _, height = grid_svg(svg, x, y, layers, Scale.weights(), mark, per_head)
            y += height + 10
    return flow(svg, x, y, items, tokens)


def _compare_items(report, per_head: bool = False):
    from attn_cli.render.compare_view import shown_pairs
    from attn_cli.render.terminal import head_title

    items = []
    for layer_pos, head_pos in shown_pairs(report):
        for name, run in report.runs.items():
            entry = run[layer_pos]
            head = entry.heads[head_pos]
            matrix = matrix_for(head, "weights")
            items.append(
                (f"{name} · {head_title(entry.layer, head)}", matrix, Scale.weights(matrix, per_head), head.window)
            )
    return items


def _steps_items(report, per_head: bool = False):
    items, masked = [], None
    for number, stage in enumerate(report.stages, start=1):
        if stage.name == "mask":
            masked = np.isnan(stage.values)
        if stage.kind != "tokens×tokens":
            continue
        shown = stage.values if masked is None else np.where(masked, np.nan, stage.values)
        scale = Scale.weights(shown, per_head) if stage.name == "softmax" else Scale.scores(shown)
        items.append((f"{number}. {stage.name}", shown, scale, None))
    return items


# -- HTML ---------------------------------------------------------------------------------------------


def page_data(report, per_head: bool = False) -> dict:
    """What the page draws: tokens, and one or more runs of layers × heads × matrices, as the report's analysis
    says (data/registry.py); per_head: weights on each head's own colour scale (--scale head)."""
    command, figure = figure_of(report)
    if figure.one is not None:  # a batch: one page per text; the first (the CLI says so)
        return page_data(figure.one(report), per_head)
    data = {
        "tokens": figure.tokens(report) if figure.tokens is not None else [],
        "model": report.model.name,
        "text": report_text(report),
        "scale": {
            name: [hex_colour(rgb) for rgb in stops]
            for name, stops in (("weights", SEQUENTIAL), ("negative", NEGATIVE), ("positive", POSITIVE))
        },
    }
    if figure.page_data is not None:
        data.update(figure.page_data(report, per_head))
    elif figure.page is not None:
        data["title"] = report_title(report, command)
        data.update(figure.page(report, per_head))
    else:  # drawn only as SVG: html_page puts that SVG in a page instead of asking for this
        raise BadInput(f"{type(report).__name__} has no page, only an SVG figure", "save it as .svg or .html")
    return data


def pair_page(report, per_head: bool) -> dict:
    """A run per stack, each with its own row and column tokens."""
    from attn_cli.render.seq2seq_view import stack_title
    from attn_cli.render.terminal import most_focused

    last = report.stacks[-1]  # the cross-attention, where it was asked for
    layer, head = most_focused(last.heads())
    return {
        "title": report_title(report, "inspect"),
        "runs": [
            {
                **run_json(stack_title(single), single.layers, per_head=per_head),
                "rowTokens": axis_tokens(single),
                "colTokens": [unit.text for unit in single.key_axis],
            }
            for single in report.stacks
        ],
        "start": [layer, head.head],
    }


def compare_page(report, per_head: bool) -> dict:
    first = next(iter(shown_pairs_safe(report)), (0, 0))
    baseline = report.runs["baseline"]
    return {
        "title": report_title(report, "compare"),
        "runs": [run_json(name, layers, per_head=per_head) for name, layers in report.runs.items()],
        "start": [baseline[first[0]].layer, baseline[first[0]].heads[first[1]].head],
    }


def steps_page(report, per_head: bool) -> dict:
    runs = []
    for title, matrix, scale, _ in _steps_items(report, per_head):
        kind = "weights" if not scale.diverging else "scores"
        runs.append(
            {
                "name": title,
                "kind": kind,
                "limit": scale.limit,
                **({"perHead": True} if scale.own else {}),
                "layers": [
                    {
                        "layer": report.layer,
                        "heads": [{"head": report.head, "m": rounded(matrix), **own_span(matrix, kind, scale.own)}],
                    }
                ],
            }
        )
    return {
        "title": f"{report_title(report, 'steps')} · layer {report.layer} head {report.head}",
        "runs": runs,
        "start": [report.layer, report.head],
    }


def inspect_page(report, per_head: bool) -> dict:
    """One run of every selected head, and with --measure NAME a second of that measure's matrices beside it."""
    from attn_cli.render.terminal import most_focused

    runs = [run_json(report.variant, report.layers, per_head=per_head)]
    shown = {measure: None for _, head in report.heads() for measure in head.measured}  # in order, once each
    for measure in shown:  # --measure NAME: beside the weights, coloured 0 → its largest (the page's "norms")
        runs[0]["name"] = "weights" if report.variant == "baseline" else f"weights · {report.variant}"
        runs.append(run_json(measure.title, report.layers, "norms", measure=measure))
    heads = report.heads()
    layer, head = most_focused(heads) if len(heads) > 1 else heads[0]
    return {"title": report_title(report, "inspect", _inspect_extra(report)), "runs": runs, "start": [layer, head.head]}


def shown_pairs_safe(report):
    from attn_cli.render.compare_view import shown_pairs

    return shown_pairs(report)


def script_json(data) -> str:
    """JSON safe inside <script>: no '</' (so no '</script>'), no '<!--', and U+2028/9 escaped."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def html_page(report, per_head: bool = False) -> str:
    """One offline page: the data inline as JSON, the script and style inline, nothing fetched. A figure drawn
    only as SVG (attn routes) is its SVG inside the page: a browser shows each edge's <title> on hover."""
    _, figure = figure_of(report)
    if figure.one is None and figure.page is None and figure.page_data is None:
        return svg_page(report, per_head)
    return html_document(page_data(report, per_head))


def svg_page(report, per_head: bool = False) -> str:
    """A self-contained page holding the report's SVG figure, nothing fetched and no script."""
    title = report_title(report, figure_of(report)[0])
    drawn = svg_figure(report, per_head=per_head)
    drawn = drawn[drawn.index("<svg") :]  # the element, without its XML declaration
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\n"
        f'<title>{escape(title)}</title>\n</head>\n<body style="margin:16px;font-family:sans-serif">\n'
        f"{drawn}\n</body>\n</html>\n"
    )


def html_document(data: dict, script: str = "page.js", style: str = "page.css") -> str:
    """A self-contained page of render/'s `script` and `style` drawing `data` (its title, text and what the
    script reads from <script id="attn-data">): the dashboard page shares this shell with the figures."""
    folder = resources.files("attn_cli.render")
    script = folder.joinpath(script).read_text(encoding="utf-8")
    style = folder.joinpath(style).read_text(encoding="utf-8")
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">\n"
        f"<title>{escape(data['title'])}</title>\n<style>\n{style}</style>\n</head>\n<body>\n"
        f"<h1>{escape(data['title'])}</h1>\n"
        f'<p class="text">{escape(data["text"])}</p>\n'
        '<div id="app"></div>\n'
        f'<script id="attn-data" type="application/json">{script_json(data)}</script>\n'
        f"<script>\n{script}</script>\n</body>\n</html>\n"
    )
