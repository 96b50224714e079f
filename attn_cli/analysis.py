"""Pure functions from scores and weights to the numbers attn reports."""

from __future__ import annotations

import torch

from attn_cli.report import Symmetry


def symmetry_report(scores: torch.Tensor, valid: torch.Tensor, tolerance: float) -> Symmetry:
    """How far a score matrix is from its transpose, over pairs of valid (non-padding) tokens.

    scores (T, T) unmasked q·kᵀ·scale; valid (T,) bool. The causal mask is
    ignored on purpose: symmetry is a property of the bilinear form q_iᵀ k_j,
    which a causal model computes for every pair before masking the future.
    """
    pair = valid[:, None] & valid[None, :]  # (T, T)
    s = torch.where(pair, scores, torch.zeros_like(scores))
    diff = s - s.T
    norm = torch.linalg.matrix_norm(s)
    relative = float(torch.linalg.matrix_norm(diff) / norm) if norm > 0 else 0.0
    return Symmetry(float(diff.abs().max()), relative, relative <= tolerance)


def row_entropy(weights: torch.Tensor) -> torch.Tensor:
    """Entropy of each weight row in nats, with 0·log 0 = 0. (..., Tq, Tk) -> (..., Tq)"""
    return -torch.special.xlogy(weights, weights).sum(dim=-1)


def self_weight(weights: torch.Tensor) -> torch.Tensor:
    """How much each token attends to itself: the diagonal. (..., T, T) -> (..., T)"""
    return weights.diagonal(dim1=-2, dim2=-1)


def top_keys(weights: torch.Tensor, allowed: torch.Tensor, k: int) -> list[list[tuple[int, float]]]:
    """Per query row, the k most-attended allowed keys as (key index, weight), heaviest first.

    weights, allowed (Tq, Tk). Masked keys never appear, even when a row has fewer than k allowed.
    """
    k = min(k, weights.shape[-1])
    values, indices = torch.where(allowed, weights, torch.full_like(weights, -1.0)).topk(k, dim=-1)  # (Tq, k)
    return [
        [(int(i), float(w)) for i, w in zip(row_i.tolist(), row_w.tolist()) if w >= 0]
        for row_i, row_w in zip(indices, values)
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
    """Population variance of the unmasked scores (concepts.md §3: ≈ d unscaled, ≈ 1 scaled)."""
    return float(scores[allowed].var(unbiased=False)) if allowed.any() else 0.0
