"""Pure functions from scores and weights to the numbers attn reports."""

from __future__ import annotations

import torch

from dataclasses import dataclass


@dataclass(frozen=True)
class Symmetry:
    max_abs_diff: float  # max |S_ij - S_ji|
    relative: float  # ||S - Sᵀ||_F / ||S||_F
    symmetric: bool  # relative <= tolerance


class SymmetryAccumulator:
    """‖S − Sᵀ‖_F / ‖S‖_F and max |S − Sᵀ| over pairs of valid tokens, for S = scale·Q·Kᵀ.

    Never builds S. The antisymmetric part comes a block of rows at a time from one
    product: S_ij − S_ji = scale·[q_i, k_i]·[k_j, −q_j], over columns j ≥ the block's
    first row only (the pair (j, i) has the same |difference|). ‖S‖²_F = scale²·Σ(QᵀQ ∘ KᵀK),
    a D × D computation, in float64. The causal mask is ignored on purpose: symmetry is a
    property of the bilinear form q_iᵀ k_j, which a causal model computes for every pair.
    """

    def __init__(self, q: torch.Tensor, k: torch.Tensor, scale: float, valid: torch.Tensor):
        self.valid = None if bool(valid.all()) else valid  # (T,) bool: non-padding tokens
        self.left = torch.cat([q, k], dim=-1)  # (T, 2D) rows [q_i, k_i]
        self.right = torch.cat([k, -q], dim=-1)  # (T, 2D) rows [k_j, -q_j]
        self.scale = scale
        q64, k64 = q[valid].double(), k[valid].double()
        self.scores_squared = scale**2 * float(((q64.T @ q64) * (k64.T @ k64)).sum())
        self.diff_squared = 0.0
        self.max_abs_diff = 0.0

    def add(self, start: int, stop: int) -> None:
        """Pairs (i, j) with start <= i < stop and j >= start."""
        diff = (self.left[start:stop] @ self.right[start:].T) * self.scale  # (c, T - start): S_ij − S_ji
        if self.valid is not None:
            pair = self.valid[start:stop, None] & self.valid[None, start:]
            diff = diff.masked_fill_(~pair, 0.0)
        block = stop - start
        inside = float(diff[:, :block].square().sum())  # both orders of each pair inside the block
        beyond = float(diff[:, block:].square().sum())  # each pair once: (j, i) is not in any block
        self.diff_squared += inside + 2 * beyond
        if diff.numel():
            self.max_abs_diff = max(self.max_abs_diff, float(diff.abs().max()))

    def result(self, tolerance: float) -> Symmetry:
        relative = (self.diff_squared / self.scores_squared) ** 0.5 if self.scores_squared > 0 else 0.0
        return Symmetry(self.max_abs_diff, relative, relative <= tolerance)


class BlockSymmetry:
    """The same measures for any scoring function score(q_rows, keys) -> (c, n), from blocks of S.

    Rows start:stop of S and the same columns (turned into rows) are computed directly,
    over columns j >= start, and ‖S‖² from the whole rows. Twice the work of the dot form.
    """

    def __init__(self, q: torch.Tensor, k: torch.Tensor, score, valid: torch.Tensor):
        self.q, self.k, self.score, self.valid = q, k, score, valid
        self.diff_squared = self.scores_squared = self.max_abs_diff = 0.0

    def add(self, start: int, stop: int) -> None:
        pair = self.valid[start:stop, None] & self.valid[None, :]  # (c, T)
        rows = self.score(self.q[start:stop], self.k).masked_fill(~pair, 0.0)  # S[start:stop, :]
        columns = self.score(self.q[start:], self.k[start:stop]).T  # S[start:, start:stop]ᵀ
        diff = (rows[:, start:] - columns).masked_fill_(~pair[:, start:], 0.0)
        block = stop - start
        self.scores_squared += float(rows.square().sum())
        self.diff_squared += float(diff[:, :block].square().sum()) + 2 * float(diff[:, block:].square().sum())
        if diff.numel():
            self.max_abs_diff = max(self.max_abs_diff, float(diff.abs().max()))

    result = SymmetryAccumulator.result


class ScoreMoments:
    """Mean and variance of the allowed scores, summed block by block (for the √d argument)."""

    def __init__(self):
        self.count, self.total, self.squares = 0, 0.0, 0.0

    def add(self, scores: torch.Tensor, allowed: torch.Tensor) -> None:
        kept = scores[allowed].double()
        self.count += kept.numel()
        self.total += float(kept.sum())
        self.squares += float(kept.square().sum())

    def mean_variance(self) -> tuple[float, float]:
        if not self.count:
            return 0.0, 0.0
        mean = self.total / self.count
        return mean, max(self.squares / self.count - mean * mean, 0.0)


def row_entropy(weights: torch.Tensor) -> torch.Tensor:
    """Entropy of each weight row in nats, with 0·log 0 = 0. (..., Tq, Tk) -> (..., Tq)"""
    return -torch.special.xlogy(weights, weights).sum(dim=-1)


def self_weight(weights: torch.Tensor, offset: int = 0) -> torch.Tensor:
    """How much each token attends to itself: the diagonal. (T, T) -> (T,)

    For a block (c, n) of the matrix whose row i is token i + r and column j is key j + f,
    offset = r - f: w[i, i + offset], 0 where that key lies outside the block's columns.
    """
    rows = torch.arange(weights.shape[0], device=weights.device)
    columns = rows + offset
    inside = (columns >= 0) & (columns < weights.shape[1])
    diagonal = torch.zeros(weights.shape[0], dtype=weights.dtype, device=weights.device)
    diagonal[inside] = weights[rows[inside], columns[inside]]
    return diagonal


def top_keys(weights: torch.Tensor, allowed: torch.Tensor, k: int) -> list[list[tuple[int, float]]]:
    """Per query row, the k most-attended allowed keys as (key index, weight), heaviest first.

    weights, allowed (Tq, Tk). Masked keys never appear, even when a row has fewer than k allowed.
    """
    k = min(k, weights.shape[-1])
    values, indices = weights.topk(k, dim=-1)  # (Tq, k); masked keys have weight exactly 0 …
    keep = allowed.gather(-1, indices)  # … so drop any that were picked to fill a short row
    return [
        [(i, w) for i, w, ok in zip(row_i, row_w, row_ok) if ok]
        for row_i, row_w, row_ok in zip(indices.tolist(), values.tolist(), keep.tolist())
    ]


def js_divergence(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Jensen–Shannon divergence between matching rows of two weight matrices, in nats (0 to ln 2).

    (..., T, T), (..., T, T) -> (..., T)
    """
    m = (p + q) / 2
    kl_pm = (torch.special.xlogy(p, p) - torch.special.xlogy(p, m)).sum(-1)
    kl_qm = (torch.special.xlogy(q, q) - torch.special.xlogy(q, m)).sum(-1)
    return (kl_pm + kl_qm) / 2


def top1_agreement(p: torch.Tensor, q: torch.Tensor) -> float:
    """Share of query rows whose most-attended key is the same in both weight matrices. (T, T) each."""
    return float((p.argmax(-1) == q.argmax(-1)).float().mean())


def score_variance(scores: torch.Tensor, allowed: torch.Tensor) -> float:
    """Population variance of the unmasked scores (≈ d unscaled, ≈ 1 scaled, for unit-variance q and k)."""
    return float(scores[allowed].var(unbiased=False)) if allowed.any() else 0.0
