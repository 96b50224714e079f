"""Attention math as pure functions over tensors. No I/O, no model objects.

Shapes: H heads, T tokens (Tq queries, Tk keys), D head dim.
The readable path on purpose: scores (scoring.scores: q @ kᵀ · scale), mask, softmax, @ v.
"""

from __future__ import annotations

import torch

from attn_cli.plumbing.errors import AttnError


def expand_kv(kv: torch.Tensor, heads: int) -> torch.Tensor:
    """Repeat grouped key/value heads so query head h reads kv head h // (H / H_kv).

    (..., H_kv, T, D) -> (..., H, T, D)
    """
    groups = heads // kv.shape[-3]
    return kv if groups == 1 else kv.repeat_interleave(groups, dim=-3)


def apply_mask(scores: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """Masked positions become -inf, so softmax gives them exactly 0. allowed broadcasts to scores."""
    return scores.masked_fill(~allowed, float("-inf"))


def masked_softmax(scores: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """Row softmax over allowed keys only. (..., Tq, Tk) -> (..., Tq, Tk)

    Masked weights are exactly 0; a row with every key masked is all zeros, never NaN.
    (torch's fused softmax gives such a row NaN, so it is zeroed after.)
    Every path to weights comes here (inspect, compare, heads, generate, steps, the toy's forward), so this
    is where a score that is not finite is refused: q and k can be finite while q·k overflows float32, and
    softmax would turn the row into NaN that JSON writes as null and the terminal as a blank heatmap.
    """
    if bool(allowed.all()):  # nothing masked: the same weights without a masked copy of the scores
        weights = torch.softmax(scores, dim=-1)
    else:
        weights = torch.softmax(apply_mask(scores, allowed), dim=-1)
        weights.masked_fill_(~allowed.any(dim=-1, keepdim=True), 0.0)
    check_finite_weights(weights)
    return weights


def check_finite_weights(weights: torch.Tensor) -> None:
    """AttnError (exit 1) when a row of weights is NaN: an allowed score was +inf or NaN (an allowed -inf only
    gets weight 0, as a finite score that low would). One reduction over the weights, no temporaries: the
    sum of a tensor with a NaN is NaN, and weights in [0, 1] cannot overflow it."""
    if bool(torch.isnan(weights.sum())):
        raise AttnError("attention scores overflowed: q·kᵀ is not finite although q and k are",
                        "the weights are too large for float32 (corrupt or badly scaled); check the checkpoint")


def attend(weights: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The attention output: each query's weighted mix of values. (..., Tq, Tk) @ (..., Tk, D) -> (..., Tq, D)"""
    return weights @ v
