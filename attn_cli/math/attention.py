"""Attention math as pure functions over tensors. No I/O, no model objects.

Shapes: H heads, T tokens (Tq queries, Tk keys), D head dim.
The readable path on purpose: scores (scoring.scores: q @ kᵀ · scale), mask, softmax, @ v.
"""

from __future__ import annotations

import math

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

    The mask is added as a bias (0 or -inf, the mask's own shape, broadcast over heads): the same scores as
    filling masked cells with -inf wherever those cells are finite (x + 0 = x, x - inf = -inf), in a
    fraction of masked_fill's time on a broadcast mask. A masked cell that is +inf or NaN makes its row NaN
    there, so a NaN sends the row to the exact fill, which decides whether an allowed score caused it.
    """
    if all_true(allowed):  # nothing masked: the same weights without a masked copy of the scores
        weights = torch.softmax(scores, dim=-1)
        check_finite_weights(weights)
        return weights
    zero = scores.new_zeros(())
    bias = torch.where(allowed, zero, zero - math.inf)  # (allowed's shape) 0 or -inf, in one pass
    weights = torch.softmax(scores + bias, dim=-1)
    zero_empty_rows(weights, allowed)
    if _any_nan(weights):  # a score that is not finite: masked (ignored) or allowed (refused)
        weights = torch.softmax(apply_mask(scores, allowed), dim=-1)
        zero_empty_rows(weights, allowed)
        check_finite_weights(weights)
    return weights


def sink_softmax(scores: torch.Tensor, allowed: torch.Tensor, sink: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The softmax over a row's allowed keys and one sink logit per head (a learned attention sink): weights
    (h, Tq, Tk), masked cells 0, and the sink's share p (h, Tq); each row of weights sums to 1 − p.
    scores (h, Tq, Tk), allowed (Tq, Tk) bool, sink (h,) logits. As eager: the sink is one more column."""
    column = sink.to(scores.dtype)[:, None, None].expand(*scores.shape[:-1], 1)  # (h, Tq, 1)
    logits = torch.cat([apply_mask(scores, allowed.expand(scores.shape)), column], dim=-1)  # (h, Tq, Tk + 1)
    probabilities = torch.softmax(logits, dim=-1)
    check_finite_weights(probabilities)
    return probabilities[..., :-1], probabilities[..., -1]


def zero_empty_rows(weights: torch.Tensor, allowed: torch.Tensor) -> None:
    """Rows of weights (..., Tq, Tk) whose allowed row (broadcast to them) has no key become 0, in place.
    Only those rows are written (a padded batch has few), not every cell as a broadcast masked_fill_ would."""
    if allowed.shape[-1] == 0:  # no keys at all: every row is empty
        empty = torch.ones(allowed.shape[:-1], dtype=torch.bool, device=allowed.device)
    else:  # any() over the keys as the max of their bytes (vectorised; bool any() is not)
        empty = allowed.view(torch.uint8).amax(dim=-1) == 0  # allowed's shape less its keys
    if all_true(~empty):
        return
    if not weights.is_contiguous():
        weights.masked_fill_(empty[..., None], 0.0)
        return
    rows = empty.expand(weights.shape[:-1]).reshape(-1).nonzero()[:, 0]  # flat indices of the empty rows
    weights.view(-1, weights.shape[-1]).index_fill_(0, rows, 0.0)


def all_true(mask: torch.Tensor) -> bool:
    """mask.all() for a bool tensor, from the min of its bytes: torch's bool all() and any() are scalar loops on
    the CPU (0.6 ms on a (256, 8192) block of a 16k-token mask), a uint8 min is vectorised (0.02 ms)."""
    return not mask.numel() or bool(mask.view(torch.uint8).min())


def check_finite_weights(weights: torch.Tensor) -> None:
    """AttnError (exit 1) when a row of weights is NaN: an allowed score was +inf or NaN (an allowed -inf only
    gets weight 0, as a finite score that low would)."""
    if _any_nan(weights):
        raise AttnError(
            "attention scores overflowed: q·kᵀ is not finite although q and k are",
            "the weights are too large for float32 (corrupt or badly scaled); check the checkpoint",
        )


def _any_nan(weights: torch.Tensor) -> bool:
    """One reduction, no temporaries: the sum of a tensor with a NaN is NaN (weights in [0, 1] cannot overflow)."""
    return bool(torch.isnan(weights.sum()))


def attend(weights: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The attention output: each query's weighted mix of values. (..., Tq, Tk) @ (..., Tk, D) -> (..., Tq, D)"""
    return weights @ v
