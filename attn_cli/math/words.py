"""Subword pieces merged into words (--words): pure tensor functions over a grouping of token positions.

A grouping is a list of words, each the token positions (pieces) that make it, in order, covering every
token once. Following Clark et al. 2019 ("What does BERT look at?"): attention *to* a word is the sum of
the attention to its pieces (the key columns add up), attention *from* a word is the mean of its pieces'
rows, so each merged row is again a distribution: rows still sum to 1.
"""

from __future__ import annotations

from typing import Sequence

import torch


def membership(groups: Sequence[Sequence[int]], tokens: int, dtype=torch.float32, device="cpu") -> torch.Tensor:
    """M (W, T): M[w, t] = 1 where token t is a piece of word w, else 0."""
    matrix = torch.zeros(len(groups), tokens, dtype=dtype, device=device)
    for word, pieces in enumerate(groups):
        matrix[word, list(pieces)] = 1
    return matrix


def merge_weights(weights: torch.Tensor, groups: Sequence[Sequence[int]]) -> torch.Tensor:
    """Token weights (..., T, T) -> word weights (..., W, W): column sums, then row means.

    merged[a, b] = (1/|a|) · Σ_{i ∈ a} Σ_{j ∈ b} weights[i, j]. Computed in float64 so the rows of a
    long text still sum to 1 within float32 round-off once cast back to the input's dtype.
    """
    tokens = weights.shape[-1]
    pieces = membership(groups, tokens, torch.float64, weights.device)  # (W, T)
    mean_rows = pieces / pieces.sum(-1, keepdim=True)  # (W, T) each word's rows averaged
    merged = mean_rows @ weights.double() @ pieces.transpose(0, 1)  # (W, T) @ (..., T, T) @ (T, W)
    return merged.to(weights.dtype)


def merge_mask(allowed: torch.Tensor, groups: Sequence[Sequence[int]]) -> torch.Tensor:
    """Token mask (T, T) bool, True = query i may attend key j -> word mask (W, W) bool.

    Word a may attend word b when any piece of a may attend any piece of b. Under a causal mask a
    word may so attend itself and the words before it, never a later one (all its pieces come after).
    """
    pieces = membership(groups, allowed.shape[-1], torch.float32, allowed.device)  # (W, T)
    return (pieces @ allowed.float() @ pieces.transpose(0, 1)) > 0  # (W, W)
