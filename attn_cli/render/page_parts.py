"""What every figure is made of: a head's matrix of a kind, a page's runs of layers × heads (the JSON that
render/page.js draws, numbers rounded for the page), their colour ranges, and the figure's title line.

Every command's figure (render/figures.py, command_figures.py, circuits_figures.py) builds on these, so
they sit below all of them.
"""

from __future__ import annotations

import numpy as np

from attn_cli.render.scale import Scale
from attn_cli.render.svg import Svg, text_width

NORMS_TITLE = "value-weighted norms ‖α·v·W_Oʰ‖"


def rounded(matrix) -> list | None:
    """A matrix as JSON for the page: 4 decimals, NaN (masked, undefined) as null."""
    if matrix is None:
        return None
    return [[None if not np.isfinite(v) else round(v, 4) for v in row] for row in np.asarray(matrix, float).tolist()]


def own_span(matrix, kind: str = "weights", per_head: bool = False) -> dict:
    """A head's own colour range on the page, where it has one: norms always (0 → its largest, as in the
    terminal), weights with per_head (--scale head: its smallest → largest); else {} (the run's range)."""
    if matrix is None:
        return {}
    if kind == "norms":
        return {"limit": Scale.magnitude(matrix).limit}
    if kind == "weights" and per_head:
        scale = Scale.weights(matrix, per_head=True)
        return {"low": round(scale.low, 6), "limit": round(scale.limit, 6)}
    return {}


def one_run(name: str, matrix, kind: str = "weights", per_head: bool = False, **extra) -> dict:
    """A page run of one matrix (no layer or head to pick): layer 0, head 0."""
    return {
        "name": name,
        "kind": kind,
        "limit": 1.0,
        **extra,
        **({"perHead": True} if per_head else {}),
        "layers": [{"layer": 0, "heads": [{"head": 0, "m": rounded(matrix), **own_span(matrix, kind, per_head)}]}],
    }


def matrix_for(head, kind: str, measure=None):
    """The head's matrix of a kind (weights, scores, or a Measure's: kind "norms", the magnitudes' colours),
    masked cells NaN; None where it was not kept."""
    if kind == "scores":
        return head.scores
    return head.masked(head.weights if measure is None else head.measured.get(measure))


def sink_rows(head) -> np.ndarray | None:
    """(rows,) a learned sink's share of each row the head's matrices keep (its ⟨sink⟩ column), or None where
    the head has no sink or keeps no matrix."""
    sink = getattr(head, "sink", None)
    if sink is None or head.weights is None:
        return None
    return np.asarray(sink)[slice(*head.window.rows)]


def head_json(head, kind: str = "weights", per_head: bool = False, measure=None) -> dict:
    window = head.window
    matrix = matrix_for(head, kind, measure)
    record = {"head": head.head, "m": rounded(matrix), **own_span(matrix, kind, per_head)}
    if window.is_partial:
        record["rows"], record["cols"] = list(window.rows), list(window.cols)
    sink = sink_rows(head) if kind == "weights" and measure is None else None
    if sink is not None:  # the ⟨sink⟩ column the page draws after the keys: each row sums to 1 with it
        record["sink"] = [None if not np.isfinite(v) else round(v, 4) for v in sink.astype(float).tolist()]
    return record


def run_json(
    name: str, layers, kind: str = "weights", limit: float = 1.0, per_head: bool = False, measure=None
) -> dict:
    """A page run; per_head: its weights coloured on each head's own scale (the head records say its range);
    measure: a Measure's matrices (data/registry.py) instead of the weights."""
    own = {"perHead": True} if per_head and kind == "weights" else {}
    return {
        "name": name,
        "kind": kind,
        "limit": limit,
        **own,
        "layers": [
            {"layer": layer.layer, "heads": [head_json(head, kind, per_head, measure) for head in layer.heads]}
            for layer in layers
        ],
    }


def svg_title(svg: Svg, x: float, y: float, title: str) -> None:
    """The figure's bold title line; the figure is at least as wide as it (a long title was cut at the edge)."""
    svg.add(svg.text(x, y + 16, title, 16, weight="bold"), x + text_width(title, 16), y + 24)


def report_title(report, command: str, extra: str = "") -> str:
    """attn COMMAND · model (architecture, layers × heads), then what the command adds (a variant, "over words")."""
    model = report.model
    layers = f"{model.layers} layer" + ("s" if model.layers != 1 else "")
    heads = f"{model.heads} head" + ("s" if model.heads != 1 else "")
    return f"attn {command} · {model.name} ({model.architecture}, {layers} × {heads}){extra}"
