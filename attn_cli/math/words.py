"""Subword pieces merged into words (--words): pure tensor functions over a grouping of token positions.

A grouping is a list of words, each the token positions (pieces) that make it, in order, covering every
token once. Following Clark et al. 2019 ("What does BERT look at?"): attention *to* a word is the sum of
the attention to its pieces (the key columns add up), attention *from* a word is the mean of its pieces'
rows, so each merged row is again a distribution: rows still sum to 1 (with a learned sink, with the word's
share of it, the mean of its pieces' shares: merge_rows).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def word_of(groups: Sequence[Sequence[int]], tokens: int, device="cpu") -> torch.Tensor:
    """(T,) long: the word each token position belongs to (the groups cover every token once)."""
    owner = torch.empty(tokens, dtype=torch.long)
    for word, pieces in enumerate(groups):
        owner[list(pieces)] = word
    return owner.to(device)


def merge_weights(weights: torch.Tensor, groups: Sequence[Sequence[int]]) -> torch.Tensor:
    """Token weights (..., T, T) -> word weights (..., W, W): column sums, then row means.

    merged[a, b] = (1/|a|) · Σ_{i ∈ a} Σ_{j ∈ b} weights[i, j]. Two scatter-adds, O(T²) (no T × T × W
    product), in float64 so the rows of a long text still sum to 1 once cast back to the input's dtype.
    """
    owner = word_of(groups, weights.shape[-1], weights.device)  # (T,)
    count = len(groups)
    to_words = weights.new_zeros(*weights.shape[:-1], count, dtype=torch.float64)
    to_words.index_add_(-1, owner, weights.double())  # (..., T, W): each row's weight per key word
    merged = to_words.new_zeros(*weights.shape[:-2], count, count).index_add_(-2, owner, to_words)  # (..., W, W)
    sizes = torch.tensor([len(pieces) for pieces in groups], dtype=torch.float64, device=weights.device)  # (W,)
    return (merged / sizes[:, None]).to(weights.dtype)


def merge_rows(values: torch.Tensor, groups: Sequence[Sequence[int]]) -> torch.Tensor:
    """A value per query token (..., T) -> per word (..., W): the mean over the word's pieces, as its row is
    (merge_weights). For a learned sink's share p (a row's weights sum to 1 − p), a word's row then sums to
    1 − mean(p) over its pieces: with its merged share, again to 1."""
    owner = word_of(groups, values.shape[-1], values.device)  # (T,)
    sums = values.new_zeros(*values.shape[:-1], len(groups), dtype=torch.float64).index_add_(-1, owner, values.double())
    sizes = torch.tensor([len(pieces) for pieces in groups], dtype=torch.float64, device=values.device)  # (W,)
    return (sums / sizes).to(values.dtype)  # (..., W)


def merge_mask(allowed: torch.Tensor, groups: Sequence[Sequence[int]]) -> torch.Tensor:
    """Token mask (T, T) bool, True = query i may attend key j -> word mask (W, W) bool.

    Word a may attend word b when any piece of a may attend any piece of b. Under a causal mask a
    word may so attend itself and the words before it, never a later one (all its pieces come after).
    """
    owner = word_of(groups, allowed.shape[-1], allowed.device)  # (T,)
    count = len(groups)
    to_words = allowed.new_zeros(allowed.shape[0], count, dtype=torch.int64).index_add_(-1, owner, allowed.long())
    return to_words.new_zeros(count, count).index_add_(0, owner, to_words) > 0  # (W, W)
