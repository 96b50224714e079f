"""Figures for --save: a vector SVG ready for a paper, and one self-contained interactive HTML page.

Both are written by hand from the report's numpy arrays (no plotting library, no network): the SVG
has one <rect> per cell, full token labels on both axes, a colour bar and a title; the HTML page
embeds the weights as JSON and draws them with inline JavaScript (render/page.js, page.css).
Colours come from render/scale.py, the same scales as the terminal: weights 0 → 1 fixed, scores
diverging around 0.
"""

from __future__ import annotations

import json
from html import escape
from importlib import resources

import numpy as np

from attn_cli.render.command_figures import FIGURES, own_span, rounded
from attn_cli.render.scale import NEGATIVE, POSITIVE, SEQUENTIAL, Scale, hex_colour
from attn_cli.render.svg import MAX_DETAIL, Heat, Svg, flow, grid_svg, text_width

# -- what a report shows ------------------------------------------------------------------------------

PAGE_KINDS = (
    "InspectReport",
    "InspectBatch",
    "PairReport",
    "CompareReport",
    "StepsReport",
    *FIGURES,
)  # reports with a page


def report_kind(report) -> str | None:
    """The report's class name, or the nearest base class that has a figure (attn heads --store's report is a
    HeadsReport): None for a report with no figure of its own (attn models' catalog)."""
    return next((cls.__name__ for cls in type(report).__mro__ if cls.__name__ in PAGE_KINDS), None)


def _tokens(report) -> list[str]:
    """The matrices' row and column labels: an inspect report's axis (words under --words), else its tokens."""
    return [unit.text for unit in getattr(report, "axis", report.tokens)]


def _token_list(report) -> list[str]:
    """The report's tokens; none for attn heads (its `tokens` counts a corpus's) and diff (A's and B's differ)."""
    return _tokens(report) if isinstance(getattr(report, "tokens", None), list) else []


NORMS_TITLE = "value-weighted norms ‖α·v·W_Oʰ‖"


def _matrix_for(head, kind: str):
    """The head's matrix of a kind (weights, scores, norms), masked cells NaN; None where it was not kept."""
    if kind == "scores":
        return head.scores
    return head.masked(head.norms if kind == "norms" else head.weights)


def _inspect_panels(report, panels, per_head: bool = False) -> tuple[list[tuple[str, np.ndarray, Scale, object]], bool]:
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
                drawn.append(
                    (f"{head_title(layer, head)} · {NORMS_TITLE}", matrix, Scale.magnitude(matrix), head.window)
                )
                continue
            matrix = _matrix_for(head, kind)
            formula = weights_formula(head) if kind == "weights" else scores_formula(head)
            scale = Scale.weights(matrix, per_head) if kind == "weights" else Scale.scores(matrix)
            drawn.append((f"{head_title(layer, head)} · {kind} = {formula}", matrix, scale, head.window))
    return drawn, grid


def _svg_title(svg: Svg, x: float, y: float, title: str) -> None:
    """The figure's bold title line; the figure is at least as wide as it (a long title was cut at the edge)."""
    svg.add(svg.text(x, y + 16, title, 16, weight="bold"), x + text_width(title, 16), y + 24)


def _report_title(report, command: str) -> str:
    model = report.model
    variant = getattr(report, "variant", None)
    extra = f" · {variant}" if variant else ""
    if getattr(report, "words", None) is not None:  # --words: the matrices are over words
        extra += " · over words"
    layers = f"{model.layers} layer" + ("s" if model.layers != 1 else "")
    heads = f"{model.heads} head" + ("s" if model.heads != 1 else "")
    return f"attn {command} · {model.name} ({model.architecture}, {layers} × {heads}){extra}"


# -- SVG ----------------------------------------------------------------------------------------------


def svg_figure(report, panels=None, looked_by: str = "inspect", per_head: bool = False) -> str:
    """A vector figure of the report (inspect, a batch, compare, steps, heads, diagnose, generate, rollout
    or diff). An inspect report's title names the command it `looked_by` (`attn explore` exports one head of
    it). per_head: weights coloured on each head's own scale (--scale head)."""
    svg = Svg()
    _svg_report(svg, 10, 10, report, panels, looked_by, per_head)
    return svg.document(_report_text(report))


def _report_text(report) -> str:
    """What the report was run on, in a line: its text (A's and B's for diff, the prompt for generate)."""
    kind = report_kind(report)
    if kind == "DiffReport":
        return f"A: {report.a.text}  ·  B: {report.b.text}" if report.mode == "texts" else report.a.text
    if kind == "GenerateReport":
        return report.prompt + report.text
    if kind == "CircuitsReport":
        return "from the weights: no text is run"
    if kind == "HeadsReport":
        return report.probe["text"] if report.probe else f"{report.texts:,} texts, {report.tokens:,} tokens"
    if kind == "DiagnoseReport":
        return f"{report.texts:,} text{'s' if report.texts != 1 else ''}, {report.tokens:,} tokens"
    return getattr(report, "text", "attn")


def _svg_report(
    svg: Svg, x: float, y: float, report, panels, looked_by: str = "inspect", per_head: bool = False
) -> float:
    kind = report_kind(report)
    if kind == "InspectBatch":
        for single in report.reports:
            y = _svg_report(svg, x, y, single, panels, looked_by, per_head) + 20
        return y
    if kind == "PairReport":  # an encoder–decoder model's stacks, one after another, each saying what it is
        from attn_cli.render.seq2seq_view import stack_title

        for single in report.stacks:
            _svg_title(svg, x, y, stack_title(single))
            y = _svg_report(svg, x, y + 30, single, panels, looked_by, per_head) + 20
        return y
    if kind in FIGURES:  # heads, generate, rollout, diff
        command, items, _ = FIGURES[kind]
        _svg_title(svg, x, y, _report_title(report, command))
        return flow(svg, x, y + 34, items(report, per_head), _token_list(report))
    tokens = _tokens(report)
    if kind == "CompareReport":
        _svg_title(svg, x, y, _report_title(report, "compare"))
        items = _compare_items(report, per_head)
        return flow(svg, x, y + 34, items, tokens)
    if kind == "StepsReport":
        _svg_title(svg, x, y, f"{_report_title(report, 'steps')} · layer {report.layer} head {report.head}")
        return flow(svg, x, y + 34, _steps_items(report, per_head), tokens)
    _svg_title(svg, x, y, _report_title(report, looked_by))
    items, grid = _inspect_panels(report, panels, per_head)
    if getattr(report, "keys", None) is not None:  # cross-attention: target rows, source columns
        items = [
            Heat(
                *item,
                rows=tokens,
                cols=[unit.text for unit in report.keys],
                caption="rows: target tokens (queries) · columns: source tokens (keys)",
            )
            for item in items
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
            matrix = _matrix_for(head, "weights")
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


def _head_json(head, kind: str = "weights", per_head: bool = False) -> dict:
    window = head.window
    matrix = _matrix_for(head, kind)
    record = {"head": head.head, "m": rounded(matrix), **own_span(matrix, kind, per_head)}
    if window.is_partial:
        record["rows"], record["cols"] = list(window.rows), list(window.cols)
    return record


def _run_json(name: str, layers, kind: str = "weights", limit: float = 1.0, per_head: bool = False) -> dict:
    """A page run; per_head: its weights coloured on each head's own scale (the head records say its range)."""
    own = {"perHead": True} if per_head and kind == "weights" else {}
    return {
        "name": name,
        "kind": kind,
        "limit": limit,
        **own,
        "layers": [
            {"layer": layer.layer, "heads": [_head_json(head, kind, per_head) for head in layer.heads]}
            for layer in layers
        ],
    }


def page_data(report, per_head: bool = False) -> dict:
    """What the page draws: tokens, and one or more runs of layers × heads × matrices; per_head: weights
    on each head's own colour scale (--scale head)."""
    kind = report_kind(report)
    if kind == "InspectBatch":
        report = report.reports[0]  # one page per text; the first (the CLI says so)
        kind = "InspectReport"
    data = {
        "tokens": _token_list(report),
        "model": report.model.name,
        "text": _report_text(report),
        "scale": {
            name: [hex_colour(rgb) for rgb in stops]
            for name, stops in (("weights", SEQUENTIAL), ("negative", NEGATIVE), ("positive", POSITIVE))
        },
    }
    if kind in FIGURES:  # heads, generate, rollout, diff
        command, _, page = FIGURES[kind]
        data["title"] = _report_title(report, command)
        data.update(page(report, per_head))
    elif kind == "PairReport":  # a run per stack, each with its own row and column tokens
        from attn_cli.render.seq2seq_view import stack_title
        from attn_cli.render.terminal import most_focused

        data["title"] = _report_title(report, "inspect")
        data["runs"] = [
            {
                **_run_json(stack_title(single), single.layers, per_head=per_head),
                "rowTokens": _tokens(single),
                "colTokens": [unit.text for unit in single.key_axis],
            }
            for single in report.stacks
        ]
        last = report.stacks[-1]  # the cross-attention, where it was asked for
        layer, head = most_focused(last.heads())
        data["start"] = [layer, head.head]
    elif kind == "CompareReport":
        data["title"] = _report_title(report, "compare")
        data["runs"] = [_run_json(name, layers, per_head=per_head) for name, layers in report.runs.items()]
        first = next(iter(shown_pairs_safe(report)), (0, 0))
        baseline = report.runs["baseline"]
        data["start"] = [baseline[first[0]].layer, baseline[first[0]].heads[first[1]].head]
    elif kind == "StepsReport":
        data["title"] = f"{_report_title(report, 'steps')} · layer {report.layer} head {report.head}"
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
        data["runs"] = runs
        data["start"] = [report.layer, report.head]
    else:
        from attn_cli.render.terminal import most_focused

        data["title"] = _report_title(report, "inspect")
        data["runs"] = [_run_json(getattr(report, "variant", "baseline"), report.layers, per_head=per_head)]
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
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def html_page(report, per_head: bool = False) -> str:
    """One offline page: the data inline as JSON, the script and style inline, nothing fetched."""
    return html_document(page_data(report, per_head))


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
