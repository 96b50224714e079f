"""What --save draws for `attn circuits`: the Q-, K- and V-composition grids (rows: reading heads, columns:
writing heads, one colour scale for the three) and the copying score and position share of every head as
layers × heads grids; the same matrices as SVG heatmaps (render/svg.py) and as page runs (render/page.js).
"""

from __future__ import annotations

import numpy as np

from attn_cli.analyses.circuits import MODE_NAMES
from attn_cli.render.circuits_view import FORMULAS, reader_grid
from attn_cli.render.page_parts import rounded
from attn_cli.render.scale import Scale
from attn_cli.render.svg import Heat

SVG_ROWS = 256  # reading heads drawn one a row in the figures; past that, layer pairs (as the terminal)
COMPOSITION_CAPTION = "rows: the reading head · columns: the writing head (layer.head)"
HEADS_CAPTION = "rows: layers · columns: heads"


def _per_head(report, value) -> np.ndarray:
    """(layers, heads) of value(head), NaN where it is None."""
    grid = np.full((report.model.layers, report.model.heads), np.nan)
    for head in report.heads:
        number = value(head)
        if number is not None:
            grid[head.layer, head.head] = number
    return grid


def _grids(report) -> list[tuple[str, np.ndarray, Scale, list[str], list[str], str, str]]:
    """(title, matrix, scale, row labels, column labels, caption, noun) of every picture."""
    pictures = []
    if report.model.layers > 1:
        grids = {mode: reader_grid(report, mode, SVG_ROWS) for mode in ("q", "k", "v")}
        scale = Scale.magnitude(*(grid[0] for grid in grids.values()))
        for mode, (matrix, rows, cols, pooled) in grids.items():
            caption = COMPOSITION_CAPTION + (" · a cell: the strongest head pair of two layers" if pooled else "")
            pictures.append((f"{MODE_NAMES[mode]} {FORMULAS[mode]}", matrix, scale, rows, cols, caption, "score"))
    layers = [f"L{layer}" for layer in range(report.model.layers)]
    heads = [f"h{head}" for head in range(report.model.heads)]
    if report.copying_note is None:
        pictures.append(
            (
                "OV copying score Σλ/Σ|λ|",
                _per_head(report, lambda head: head.copying),
                Scale("scores", 1.0),
                layers,
                heads,
                HEADS_CAPTION,
                "copying",
            )
        )
    if any(head.split is not None for head in report.heads):
        share = _per_head(report, lambda head: head.split and head.split["position"])
        pictures.append(("QK position·position share", share, Scale.weights(), layers, heads, HEADS_CAPTION, "share"))
    return pictures


def circuits_items(report, per_head: bool = False) -> list[Heat]:
    """per_head (--scale head) does not apply: these grids are scores and shares on fixed scales."""
    return [
        Heat(title, matrix, scale, rows=rows, cols=cols, caption=caption, noun=noun)
        for title, matrix, scale, rows, cols, caption, noun in _grids(report)
    ]


def circuits_page(report, per_head: bool = False) -> dict:

    kinds = {"scores": "scores", "weights": "weights", "magnitude": "norms"}  # norms: coloured 0 → limit
    runs = [
        {
            "name": title,
            "kind": kinds[scale.kind],
            "limit": scale.limit,
            "rowTokens": rows,
            "colTokens": cols,
            "noun": noun + " ",
            "lines": False,
            "axes": ["reader", "writer"] if "composition" in title else ["layer", "head"],
            "layers": [{"layer": 0, "heads": [{"head": 0, "m": rounded(matrix)}]}],
        }
        for title, matrix, scale, rows, cols, _, noun in _grids(report)
    ]
    return {
        "runs": runs,
        "start": [0, 0],
        "caption": "composition: rows read, columns write; copying and position share: layers × heads",
    }
