"""What --save draws for `attn heads`, `generate`, `rollout` and `diff`: their matrices as Heat items for
the SVG (render/svg.py) and as runs for the HTML page (render/page.js), the same drawing code as inspect's.

heads: one layers × heads grid per score; generate: the recorded rows (generated tokens × every token
they could see); rollout: the rolled-out matrix; diff: A, B and B − A of a head.
"""

from __future__ import annotations

import numpy as np

from attn_cli.data.selection import Window
from attn_cli.render.page_parts import matrix_for, one_run, own_span, rounded, run_json
from attn_cli.render.scale import Scale
from attn_cli.render.svg import MAX_DETAIL, Heat

HEADS_CAPTION = "rows: layers · columns: heads"
# what a hovered token's row and column say on a page of one matrix over layers (rollout, attribute)
OVER_LAYERS = ["comes from", "goes into"]


def _tokens(report) -> list[str]:
    return [token.text for token in report.tokens]


# -- heads ----------------------------------------------------------------------------------------------


def heads_grids(report) -> tuple[list[str], list[str], dict[str, np.ndarray]]:
    """Row labels (L0 …; an encoder–decoder model's "encoder L0" … "cross L1", a row per stack and layer), column
    labels (h0 …), and per score its (rows, heads) means, NaN where undefined."""
    names = report.score_names
    order = {None: 0, "encoder": 1, "decoder": 2, "cross": 3}
    layers = sorted(
        {(profile.stack, profile.layer) for profile in report.heads}, key=lambda row: (order[row[0]], row[1])
    )
    heads = sorted({profile.head for profile in report.heads})
    grids = {name: np.full((len(layers), len(heads)), np.nan) for name in names}
    for profile in report.heads:
        for name in names:
            value = profile.scores[name]
            if value is not None:
                grids[name][layers.index((profile.stack, profile.layer)), heads.index(profile.head)] = value
    if np.isnan(grids["retrieval"]).all():  # defined only on --probe retrieval: no empty grid otherwise
        del grids["retrieval"]
    rows = [f"L{layer}" if stack is None else f"{stack} L{layer}" for stack, layer in layers]
    return rows, [f"h{head}" for head in heads], grids


def _score_title(name: str) -> str:
    from attn_cli.render.heads_view import KINDS, kind_of

    if name in KINDS:
        return f"{KINDS[name][2]} score"
    title = kind_of(name)[2]  # a plugin's, as it wrote it, and its name, which --score takes
    return title if title == name else f"{title} ({name})"


def heads_items(report, per_head: bool = False) -> list[Heat]:
    """Each score's layers × heads grid on the fixed 0 → 1 scale (scores, not weights: per_head is not theirs)."""
    rows, cols, grids = heads_grids(report)
    return [
        Heat(_score_title(name), grid, Scale.weights(), rows=rows, cols=cols, caption=HEADS_CAPTION, noun="score")
        for name, grid in grids.items()
    ]


def heads_page(report, per_head: bool = False) -> dict:
    rows, cols, grids = heads_grids(report)
    runs = [
        one_run(
            _score_title(name), grid, rowTokens=rows, colTokens=cols, noun="score ", lines=False, axes=["layer", "head"]
        )
        for name, grid in grids.items()
    ]
    layers = "layers" if all(profile.stack is None for profile in report.heads) else "layers of the stacks"
    return {"runs": runs, "start": [0, 0], "caption": f"{len(rows)} {layers} × {len(cols)} heads, each score 0 → 1"}


# -- generate -------------------------------------------------------------------------------------------


def _generated_window(report) -> Window:
    total = len(report.tokens)
    return Window((report.prompt_tokens, total), (0, total), total)  # rows: the generated tokens


def generate_items(report, per_head: bool = False) -> list[Heat]:
    from attn_cli.render.terminal import most_focused

    pairs = [(layer.layer, head) for layer in report.layers for head in layer.heads]
    if len(pairs) > MAX_DETAIL:
        pairs = [most_focused(pairs)]
    window = _generated_window(report)
    return [
        Heat(
            f"layer {layer} · head {head.head} (kv head {head.kv_head})",
            head.weights,
            Scale.weights(head.weights, per_head),
            window,
            caption="rows: generated tokens · columns: every token they saw",
        )
        for layer, head in pairs
    ]


def generate_page(report, per_head: bool = False) -> dict:
    from attn_cli.render.terminal import most_focused

    window = _generated_window(report)
    run = {
        "name": "generated tokens (rows) over every token they saw",
        "kind": "weights",
        "limit": 1.0,
        **({"perHead": True} if per_head else {}),
        "layers": [
            {
                "layer": layer.layer,
                "heads": [
                    {
                        "head": head.head,
                        "m": rounded(head.weights),
                        "rows": list(window.rows),
                        "cols": list(window.cols),
                        **own_span(head.weights, per_head=per_head),
                    }
                    for head in layer.heads
                ],
            }
            for layer in report.layers
        ],
    }
    layer, head = most_focused([(layer.layer, head) for layer in report.layers for head in layer.heads])
    return {"runs": [run], "start": [layer, head.head]}


# -- rollout --------------------------------------------------------------------------------------------


def rollout_title(report) -> str:
    span = f"layers {report.layers[0]}-{report.layers[-1]}" if len(report.layers) > 1 else f"layer {report.layers[0]}"
    if report.model.no_attention_layers:  # a hybrid: the chain skips what has no attention matrix
        span += f" (attention layers only: {', '.join(map(str, report.layers))})"
    return f"rollout over {span}, heads fused by {report.head_fusion} (rows sum to 1)"


def rollout_items(report, per_head: bool = False) -> list[Heat]:
    return [
        Heat(
            rollout_title(report),
            report.matrix,
            Scale.weights(report.matrix, per_head),
            caption="rows: output tokens · columns: the input tokens they trace back to",
            noun="share",
        )
    ]


def rollout_page(report, per_head: bool = False) -> dict:
    return {
        "runs": [one_run("rollout", report.matrix, per_head=per_head, noun="share ")],
        "start": [0, 0],
        "caption": rollout_title(report),
        "unit": "matrix",
        "verbs": OVER_LAYERS,
    }


# -- attribute ------------------------------------------------------------------------------------------


def attribution_items(report, per_head: bool = False) -> list[Heat]:
    """The raw attention rollout (with --vs attention) and the method's, side by side on one scale."""
    from attn_cli.render.attribution_view import UNNORMALISED, attention_title, attribution_scale, attribution_title

    caption = "rows: output tokens · columns: the input tokens they come from"
    items = [
        Heat(
            attribution_title(report),
            report.matrix,
            attribution_scale(report, report.matrix, per_head),
            caption=caption,
            noun="relevancy" if report.method in UNNORMALISED else "share",
        )
    ]
    if report.attention is not None:
        items.insert(
            0,
            Heat(
                attention_title(report),
                report.attention,
                Scale.weights(report.attention, per_head),
                caption=caption,
                noun="share",
            ),
        )
    return items


def attribution_page(report, per_head: bool = False) -> dict:
    """One run per matrix, drawn side by side: the attention rollout (with --vs attention), then the method's,
    in the terminal's and the SVG's order."""
    from attn_cli.render.attribution_view import UNNORMALISED, attention_title, attribution_title, sources_title

    # the unnormalised relevancy: coloured 0 → its largest value, as norms are
    kind, noun = ("norms", "relevancy ") if report.method in UNNORMALISED else ("weights", "share ")
    runs = [one_run(attribution_title(report), report.matrix, kind, per_head=per_head, noun=noun)]
    if report.attention is not None:
        runs.insert(0, one_run(attention_title(report), report.attention, per_head=per_head, noun="share "))
    caption = sources_title(report) + (", beside the attention rollout" if report.attention is not None else "")
    return {"runs": runs, "start": [0, 0], "caption": caption, "unit": "matrix", "verbs": OVER_LAYERS}


# -- diff -----------------------------------------------------------------------------------------------


def diff_items(report, per_head: bool = False) -> list[Heat]:
    """A, B and (when the rows match) B − A of the most changed head, as the terminal shows them."""
    from attn_cli.render.diff_view import paired_tokens

    top = report.heads[0]
    head_a, head_b = report.a.head(top.layer, top.head), report.b.head(top.layer, top.head)
    title = f"layer {top.layer} · head {top.head}"
    weights_a, weights_b = matrix_for(head_a, "weights"), matrix_for(head_b, "weights")
    items = [
        Heat(f"A · {title}", weights_a, Scale.weights(weights_a, per_head), rows=_tokens(report.a)),
        Heat(f"B · {title}", weights_b, Scale.weights(weights_b, per_head), rows=_tokens(report.b)),
    ]
    if report.comparable:
        change = head_b.weights - head_a.weights
        items.append(
            Heat(f"B − A · {title}", change, Scale.scores(change), rows=paired_tokens(report), noun="weight change")
        )
    return items


def diff_page(report, per_head: bool = False) -> dict:
    """Runs A, B and B − A over every selected head (one diverging scale for all of B − A)."""
    from attn_cli.render.diff_view import paired_tokens

    runs = [
        {**run_json("A", report.a.layers, per_head=per_head), "rowTokens": _tokens(report.a)},
        {**run_json("B", report.b.layers, per_head=per_head), "rowTokens": _tokens(report.b)},
    ]
    if report.comparable:
        changes = [
            [b.weights - a.weights for a, b in zip(la.heads, lb.heads)]
            for la, lb in zip(report.a.layers, report.b.layers)
        ]
        limit = Scale.scores(*[change for layer in changes for change in layer]).limit
        runs.append(
            {
                "name": "B − A",
                "kind": "scores",
                "limit": limit,
                "rowTokens": paired_tokens(report),
                "noun": "weight change ",
                "lines": False,
                "layers": [
                    {
                        "layer": layer.layer,
                        "heads": [
                            {"head": head.head, "m": rounded(change)}
                            for head, change in zip(layer.heads, layer_changes)
                        ],
                    }
                    for layer, layer_changes in zip(report.a.layers, changes)
                ],
            }
        )
    top = report.heads[0]
    return {"runs": runs, "start": [top.layer, top.head]}


# -- diagnose -----------------------------------------------------------------------------------------


def diagnose_grids(report) -> tuple[list[str], list[str], dict[str, np.ndarray]]:
    """Row labels, column labels, and the (layers, heads) grids: each head's first-token weight α, and
    (over several texts) the share of texts where α > ε."""
    epsilon = report.thresholds["sink_epsilon"]
    layers = [layer for layer in report.layers if layer.sink_rate is not None]  # a hybrid's attention layers
    grids = {"first-token weight α (mean over rows)": np.array([layer.first_token for layer in layers])}
    if report.texts > 1:
        grids[f"share of texts with α > {epsilon:g}"] = np.array([layer.sinking for layer in layers])
    rows = [f"L{layer.layer} {layer.sink_rate:.2f}" for layer in layers]  # the layer's sink rate beside it
    return rows, [f"h{head}" for head in range(report.model.heads)], grids


def diagnose_items(report, per_head: bool = False) -> list[Heat]:
    """α on the fixed 0 → 1 scale (a mean weight, compared across heads: per_head is not its)."""
    rows, cols, grids = diagnose_grids(report)
    caption = (
        f"rows: layers and their sink rate (share of heads with α > {report.thresholds['sink_epsilon']:g}) · "
        f"columns: heads · model sink rate {report.sink_rate:.2f}"
    )
    return [
        Heat(title, grid, Scale.weights(), rows=rows, cols=cols, caption=caption, noun="weight")
        for title, grid in grids.items()
    ]


def diagnose_page(report, per_head: bool = False) -> dict:
    rows, cols, grids = diagnose_grids(report)
    runs = [
        one_run(title, grid, rowTokens=rows, colTokens=cols, noun="", lines=False, axes=["layer", "head"])
        for title, grid in grids.items()
    ]
    return {
        "runs": runs,
        "start": [0, 0],
        "caption": f"{len(rows)} layers × {len(cols)} heads · model sink rate {report.sink_rate:.2f}",
    }
