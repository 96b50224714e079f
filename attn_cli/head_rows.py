"""Heads analysed together, a block of query rows at a time: memory O(h·T·(D + rows)), never O(T²).

Every statistic attn reports per head is a function of single rows of S and
softmax(S) (entropy, self-weight, top-k), or a sum over rows (symmetry). Rows
a:b of S are q[a:b]·kᵀ·scale; the same columns, for the symmetry, are
(q·k[a:b]ᵀ·scale)ᵀ. Matrices are kept only for the rows and columns asked for.
All selected heads of a layer go through each block at once (h, c, n), so a
short text costs a few tensor operations per layer, not per head.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from attn_cli import analysis, attention
from attn_cli.analysis import Symmetry
from attn_cli.masks import AttentionMask
from attn_cli.selection import Window

CHUNK_CELLS = 1 << 22  # ~4M scores per block over all heads: 16 MB in float32, a few such temporaries at once


@dataclass
class HeadRows:
    """The statistics of h heads (in the order given)."""

    entropy: torch.Tensor  # (h, T) nats
    self_weight: torch.Tensor  # (h, T)
    top: list[list[list[tuple[int, float]]]]  # (h, T, ≤k) key index and weight, heaviest first
    symmetry: list[Symmetry]  # (h,)
    score_moments: list[tuple[float, float]]  # (h,) mean and variance of the allowed scores, as used (scaled)
    scores: torch.Tensor | None  # (h, rows, cols) the window of S, NaN where masked; None for an empty window
    weights: torch.Tensor | None  # (h, rows, cols) the window of softmax(S)
    output: torch.Tensor | None  # (h, T, D) weights @ v, when asked for


def analyse_rows(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: AttentionMask, score: Callable, *,
    top_k: int, tolerance: float, window: Window, want_output: bool, dot_scale: float | None,
) -> HeadRows:
    """q (h, T, D), and each query head's k and v (h, T, D), float32.

    score(q_rows (h, c, D), keys (h, n, D)) -> (h, c, n): the heads' scoring (LayerCapture.scorer_for).
    dot_scale: the scale when the scores are q·kᵀ·scale (symmetry then comes from a cheaper
    identity), None for learned scorings.
    """
    keep = not window.is_empty
    heads, count = q.shape[0], q.shape[1]
    block = max(1, CHUNK_CELLS // max(count * heads, 1))  # query rows per block
    entropy = torch.empty(heads, count, device=q.device)
    self_weight = torch.empty(heads, count, device=q.device)
    output = torch.empty_like(q) if want_output else None
    top: list[list[list[tuple[int, float]]]] = [[] for _ in range(heads)]
    valid = mask.valid_keys()
    symmetry = (analysis.SymmetryAccumulator(q, k, dot_scale, valid) if dot_scale is not None
                else analysis.BlockSymmetry(q, k, score, valid))
    moments = analysis.ScoreMoments(heads)
    kept_scores, kept_weights = [], []
    for start in range(0, count, block):
        stop = min(start + block, count)
        first, end = mask.key_span(start, stop)  # keys outside are masked for every row here
        if end <= first:  # these rows may attend nothing: one masked column keeps the shapes (weights 0)
            first, end = 0, 1
        scores = score(q[:, start:stop], k[:, first:end])  # (h, c, end - first) of S
        allowed = mask.rows(start, stop, first, end)  # (c, end - first)
        moments.add(scores, allowed)
        weights = attention.masked_softmax(scores, allowed)  # (h, c, end - first); scores stay unmasked
        entropy[:, start:stop] = analysis.row_entropy(weights)
        self_weight[:, start:stop] = analysis.self_weight(weights, offset=start - first)  # w[i, i]
        for head, rows in enumerate(analysis.top_keys(weights, allowed, top_k)):
            top[head] += [[(first + key, weight) for key, weight in row] for row in rows]
        symmetry.add(start, stop)
        if output is not None:
            output[:, start:stop] = attention.attend(weights, v[:, first:end])  # (h, c, D)
        if keep and start < window.rows[1] and stop > window.rows[0]:
            rows = slice(max(start, window.rows[0]) - start, min(stop, window.rows[1]) - start)
            kept_scores.append(_widen(scores[:, rows].masked_fill(~allowed[rows], float("nan")), first, window,
                                      float("nan")))
            kept_weights.append(_widen(weights[:, rows], first, window, 0.0))
    return HeadRows(
        entropy=entropy,
        self_weight=self_weight,
        top=top,
        symmetry=symmetry.result(tolerance),
        score_moments=moments.mean_variance(),
        scores=torch.cat(kept_scores, dim=1) if keep else None,
        weights=torch.cat(kept_weights, dim=1) if keep else None,
        output=output,
    )


def _widen(block: torch.Tensor, first: int, window: Window, fill: float) -> torch.Tensor:
    """Columns first:first + n of some rows (h, r, n), placed into the window's columns (fill where not computed)."""
    start, stop = window.cols
    out = torch.full((*block.shape[:-1], stop - start), fill, dtype=block.dtype, device=block.device)
    lo, hi = max(start, first), min(stop, first + block.shape[-1])
    if lo < hi:
        out[..., lo - start:hi - start] = block[..., lo - first:hi - first]
    return out
