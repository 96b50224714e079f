"""Pure functions from scores and weights to the numbers attn reports.

Shapes: h heads analysed together, T tokens, c query rows of a block, n key columns.
The accumulators sum over blocks of query rows, per head, so no (T, T) need exist.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attn_cli.math.attention import all_true


@dataclass(frozen=True)
class Symmetry:
    max_abs_diff: float  # max |S_ij - S_ji|
    relative: float  # ||S - Sᵀ||_F / ||S||_F
    symmetric: bool | None  # relative <= tolerance; None where symmetry does not apply (`reason`)
    reason: str | None = None  # why S has no symmetry to measure (a cross-attention head's queries and keys
    #                            are different tokens); the numbers are then NaN


def cross_tokens(queries: int, keys: int) -> str:
    """Why a cross-attention head has no symmetry and no self-weight: its queries and keys are other tokens."""
    return f"cross-attention: queries are the {queries} target tokens and keys the {keys} source tokens"


def not_applicable(heads: int, queries: int, keys: int) -> list[Symmetry]:
    """Symmetry of a cross-attention head: S_ij and S_ji pair target token i with source token j and target j
    with source i, different tokens, so S − Sᵀ measures nothing (and is not defined when T_q ≠ T_k)."""
    reason = f"{cross_tokens(queries, keys)}, so S_ij and S_ji are not a pair of the same two tokens"
    return [Symmetry(float("nan"), float("nan"), None, reason)] * heads


class _SymmetrySums:
    """The sums both accumulators keep, per head (h,) float64, and the Symmetry they make."""

    scores_squared: torch.Tensor  # ‖S‖²_F
    diff_squared: torch.Tensor  # ‖S − Sᵀ‖²_F
    max_abs_diff: torch.Tensor  # max |S_ij − S_ji|

    def result(self, tolerance: float) -> list[Symmetry]:
        """One Symmetry per head."""
        relative = torch.where(self.scores_squared > 0, (self.diff_squared / self.scores_squared).sqrt(), 0.0)
        return [
            Symmetry(float(peak), float(rel), float(rel) <= tolerance)
            for peak, rel in zip(self.max_abs_diff.tolist(), relative.tolist())
        ]


class SymmetryAccumulator(_SymmetrySums):
    """‖S − Sᵀ‖_F / ‖S‖_F and max |S − Sᵀ| over pairs of valid tokens, per head, for S = scale·Q·Kᵀ.

    Never builds S. The antisymmetric part comes a block of rows at a time from one
    product: S_ij − S_ji = scale·[q_i, k_i]·[k_j, −q_j], over columns j ≥ the block's
    first row only (the pair (j, i) has the same |difference|). ‖S‖²_F = scale²·Σ(QᵀQ ∘ KᵀK),
    a D × D computation, in float64. The causal mask is ignored on purpose: symmetry is a
    property of the bilinear form q_iᵀ k_j, which a causal model computes for every pair.
    """

    def __init__(self, q: torch.Tensor, k: torch.Tensor, scale: float, valid: torch.Tensor):
        """q, k (h, T, D); valid (T,) bool: the non-padding tokens."""
        self.valid = None if bool(valid.all()) else valid
        self.left = torch.cat([q, k], dim=-1)  # (h, T, 2D) rows [q_i, k_i]
        self.right = torch.cat([k, -q], dim=-1)  # (h, T, 2D) rows [k_j, -q_j]
        self.scale = scale
        q64, k64 = (q.double(), k.double()) if self.valid is None else (q[:, valid].double(), k[:, valid].double())
        gram = (q64.transpose(-2, -1) @ q64) * (k64.transpose(-2, -1) @ k64)  # (h, D, D)
        self.scores_squared = scale**2 * gram.sum((-2, -1))  # (h,)
        self.diff_squared = torch.zeros_like(self.scores_squared)
        self.max_abs_diff = torch.zeros_like(self.scores_squared)

    def add(self, start: int, stop: int) -> None:
        """Pairs (i, j) with start <= i < stop and j >= start."""
        diff = self.left[:, start:stop] @ self.right[:, start:].transpose(-2, -1)  # (h, c, T - start)
        diff.mul_(self.scale)
        if self.valid is not None:
            pair = self.valid[start:stop, None] & self.valid[None, start:]
            diff = diff.masked_fill_(~pair, 0.0)
        _accumulate(self, diff, stop - start)


def _accumulate(accumulator, diff: torch.Tensor, block: int) -> None:
    """Add a block's S_ij − S_ji (h, c, T - start) to the sums: both orders of each pair inside the block
    are in it; a pair beyond it is there once ((j, i) falls in no block)."""
    inside = _float64(diff[..., :block]).square_().sum((-2, -1))  # (h,)
    beyond = _float64(diff[..., block:]).square_().sum((-2, -1))
    accumulator.diff_squared += inside + 2 * beyond
    if diff.numel():  # max |d| as max(max d, −min d): no |diff| temporary, the same number. Two reductions,
        # not torch.aminmax(dim=-1): on CPU that is ~40x slower than amax and amin (4.8 ms vs 0.11 ms on a
        # (1, 256, 8192) block; 0.3 s of a 16k-token inspect)
        flat = diff.flatten(-2)  # (h, c·n)
        high, low = flat.amax(-1), flat.amin(-1)  # (h,) each
        accumulator.max_abs_diff = torch.maximum(accumulator.max_abs_diff, torch.maximum(high, -low).double())


class BlockSymmetry(_SymmetrySums):
    """The same measures for any scoring function score(q_rows, keys) -> (h, c, n), from blocks of S.

    Rows start:stop of S and the same columns (turned into rows) are computed directly,
    over columns j >= start, and ‖S‖² from the whole rows. Twice the work of the dot form.
    """

    def __init__(self, q: torch.Tensor, k: torch.Tensor, score, valid: torch.Tensor):
        self.q, self.k, self.score, self.valid = q, k, score, valid
        self.scores_squared = torch.zeros(q.shape[0], dtype=torch.float64, device=q.device)
        self.diff_squared = torch.zeros_like(self.scores_squared)
        self.max_abs_diff = torch.zeros_like(self.scores_squared)

    def add(self, start: int, stop: int) -> None:
        pair = self.valid[start:stop, None] & self.valid[None, :]  # (c, T)
        rows = self.score(self.q[:, start:stop], self.k).masked_fill(~pair, 0.0)  # (h, c, T): S[start:stop, :]
        columns = self.score(self.q[:, start:], self.k[:, start:stop]).transpose(-2, -1)  # S[start:, start:stop]ᵀ
        diff = (rows[..., start:] - columns).masked_fill_(~pair[:, start:], 0.0)  # (h, c, T - start)
        self.scores_squared += rows.double().square().sum((-2, -1))
        _accumulate(self, diff, stop - start)


def dense_symmetry(scores: torch.Tensor, valid: torch.Tensor, tolerance: float) -> list[Symmetry]:
    """The same measures from a whole S (h, T, T) already computed: analyse_rows' scores when one block of rows
    holds all of S, and scores that are not a bilinear form of q and k (T5 adds its relative position bias,
    itself not symmetric: bias(i − j) ≠ bias(j − i)). valid (T,): non-padding tokens.

    S − Sᵀ in float32 (each S_ij − S_ji rounded once); ‖S − Sᵀ‖² and ‖S‖² as float32 sums of squares
    (torch's cascaded sum over a contiguous row: ~1e-7 relative, the float32 precision the result is
    shown with). S − Sᵀ is antisymmetric, so its largest entry is max |S_ij − S_ji|: one reduction.
    """
    diff = scores - scores.transpose(-2, -1)  # (h, T, T)
    if not bool(valid.all()):
        pair = valid[:, None] & valid[None, :]  # (T, T)
        diff.masked_fill_(~pair, 0.0)
        scores = scores.masked_fill(~pair, 0.0)
    diff_squared, scores_squared = (_sum_of_squares(x).double() for x in (diff, scores))  # (h,) each
    relative = torch.where(scores_squared > 0, (diff_squared / scores_squared).sqrt(), 0.0)
    peaks = diff.amax((-2, -1)) if diff.numel() else torch.zeros(len(scores))
    return [
        Symmetry(float(peak), float(rel), float(rel) <= tolerance)
        for peak, rel in zip(peaks.tolist(), relative.tolist())
    ]


class ScoreMoments:
    """Mean and variance of the allowed scores per head, summed block by block (for the √d argument)."""

    def __init__(self, heads: int):
        self.count = 0
        self.total = torch.zeros(heads, dtype=torch.float64)
        self.squares = torch.zeros(heads, dtype=torch.float64)

    def add(self, scores: torch.Tensor, allowed: torch.Tensor) -> None:
        """scores (h, c, n), allowed (c, n)."""
        # Masked cells to 0 in float32, then one float64 copy: a third of the time of zeroing them in the float64
        # copy (2.0 ms vs 5.6 ms on a (1, 256, 8192) block of a 16k-token text), the same sums; and the count
        # by count_nonzero, since a bool tensor's sum() is a scalar loop on the CPU
        if not all_true(allowed):
            scores = torch.where(allowed, scores, 0.0)  # (h, c, n)
        kept = _float64(scores).flatten(-2)  # (h, c·n)
        self.count += int(torch.count_nonzero(allowed))
        self.total += kept.sum(-1).cpu()
        self.squares += kept.square_().sum(-1).cpu()

    def mean_variance(self) -> list[tuple[float, float]]:
        """(mean, variance) per head."""
        if not self.count:
            return [(0.0, 0.0)] * len(self.total)
        mean = self.total / self.count
        variance = (self.squares / self.count - mean.square()).clamp_min(0.0)
        return list(zip(mean.tolist(), variance.tolist()))


def _sum_of_squares(matrices: torch.Tensor) -> torch.Tensor:
    """Σ x² over each matrix: (h, T, T) -> (h,), one contiguous row per matrix (a cascaded float32 sum)."""
    flat = matrices.reshape(matrices.shape[0], -1)  # (h, T·T)
    return torch.linalg.vecdot(flat, flat)


def head_variance(x: torch.Tensor) -> torch.Tensor:
    """Each head's population variance over all its values: (h, T, D) -> (h,), in x's dtype.

    Two passes in float64 (mean, then the mean squared deviation), rounded once to x's dtype: the value a
    float32 `x.var(dim=(-2, -1), unbiased=False)` aims at (it may differ from torch's in the last bit), and
    a quarter of its time (torch's float32 variance over several dimensions is a scalar Welford loop).
    """
    wide = x.double()  # (h, T, D)
    deviation = wide - wide.mean(dim=(-2, -1), keepdim=True)
    return deviation.square_().mean(dim=(-2, -1)).to(x.dtype)


def _float64(tensor: torch.Tensor) -> torch.Tensor:
    """A float64 copy that may be changed in place (`.double()` of a float64 tensor would be the tensor itself)."""
    return tensor.to(torch.float64, copy=True)


def row_entropy(weights: torch.Tensor) -> torch.Tensor:
    """Entropy of each weight row in nats, with 0·log 0 = 0. (..., Tq, Tk) -> (..., Tq)

    Never below 0: a one-key row would give -0.0 (shown "-0.00"), and a merged row (--words) summing to
    1 + round-off a hair below 0; both are 0 nats.
    A weight of 0 contributes 0·log(tiny) = 0 (tiny: the smallest normal number of the dtype; a weight
    below it adds under 1e-36): the same sum as xlogy's, without its per-element case for 0.
    """
    logs = weights.clamp_min(torch.finfo(weights.dtype).tiny).log_()  # (..., Tq, Tk); NaN stays NaN
    entropy = -logs.mul_(weights).sum(dim=-1)
    return entropy.clamp_min(0.0) + 0.0  # NaN stays NaN; -0.0 + 0.0 is +0.0


def self_weight(weights: torch.Tensor, offset: int = 0) -> torch.Tensor:
    """How much each token attends to itself: the diagonal. (..., T, T) -> (..., T)

    For a block (..., c, n) of the matrix whose row i is token i + r and column j is key j + f,
    offset = r - f: w[i, i + offset], 0 where that key lies outside the block's columns.
    """
    count = weights.shape[-2]
    rows = torch.arange(count, device=weights.device)
    columns = rows + offset
    inside = (columns >= 0) & (columns < weights.shape[-1])
    diagonal = torch.zeros(*weights.shape[:-1], dtype=weights.dtype, device=weights.device)
    diagonal[..., inside] = weights[..., rows[inside], columns[inside]]
    return diagonal


@dataclass(frozen=True)
class TopKeyTensors:
    """Per query row, the k most-attended keys, heaviest first, as tensors (..., Tq, k) each.

    A row with fewer than k allowed keys is filled up with entries whose `kept` is False (masked keys
    that topk picked to make up k, or padding past the last key); `pairs` leaves them out.
    """

    indices: torch.Tensor  # (..., Tq, k) int64 key index
    weights: torch.Tensor  # (..., Tq, k)
    kept: torch.Tensor  # (..., Tq, k) bool: an allowed key

    def __getitem__(self, index) -> TopKeyTensors:
        """The same leading index of every field: top[h] is head h's (Tq, k)."""
        return TopKeyTensors(self.indices[index], self.weights[index], self.kept[index])

    def pairs(self) -> list:
        """Nested lists (..., Tq, ≤k) of (key index, weight), the entries not kept left out."""
        return _pairs(self.indices.tolist(), self.weights.tolist(), self.kept.tolist(), self.indices.dim() - 2)


def top_key_tensors(
    weights: torch.Tensor, allowed: torch.Tensor, k: int, offset: int = 0, keys: int | None = None
) -> TopKeyTensors:
    """Per query row, the k most-attended allowed keys: (..., Tq, min(k, keys)) each, filled up where a row has fewer.

    weights (..., Tq, Tk), allowed broadcasting to it. offset: added to the key indices (a block of
    columns whose first is key `offset`). keys: how many keys the whole matrix has (default Tk): blocks of
    columns are filled up to min(k, keys), one width for all, never to a k larger than there are keys.
    Masked keys are never kept.
    """
    width = min(k, weights.shape[-1] if keys is None else keys)
    picked = min(width, weights.shape[-1])
    values, indices = weights.topk(picked, dim=-1)  # (..., Tq, picked); masked keys have weight exactly 0 …
    kept = allowed.expand_as(weights).gather(-1, indices)  # … so mark any that were picked to fill a short row
    if picked < width:  # a block narrower than the width: fill up to it, so blocks of rows concatenate
        fill = (*indices.shape[:-1], width - picked)
        indices = torch.cat([indices, indices.new_zeros(fill)], -1)
        values = torch.cat([values, values.new_zeros(fill)], -1)
        kept = torch.cat([kept, kept.new_zeros(fill)], -1)
    return TopKeyTensors(indices + offset if offset else indices, values, kept)


def cat_top_keys(blocks: list[TopKeyTensors]) -> TopKeyTensors:
    """Blocks of query rows (..., c, k) -> (..., Tq, k), in order."""
    if len(blocks) == 1:
        return blocks[0]
    return TopKeyTensors(
        *(torch.cat([getattr(b, name) for b in blocks], dim=-2) for name in ("indices", "weights", "kept"))
    )


def top_keys(weights: torch.Tensor, allowed: torch.Tensor, k: int) -> list:
    """Per query row, the k most-attended allowed keys as (key index, weight), heaviest first.

    weights (..., Tq, Tk), allowed broadcasting to it; nested lists (..., Tq, ≤k). Masked keys
    never appear, even when a row has fewer than k allowed.
    """
    return top_key_tensors(weights, allowed, k).pairs()


def _pairs(indices: list, values: list, keep: list, leading: int) -> list:
    if leading:
        return [_pairs(i, v, ok, leading - 1) for i, v, ok in zip(indices, values, keep)]
    return [
        [(i, w) for i, w, ok in zip(row_i, row_w, row_ok) if ok] for row_i, row_w, row_ok in zip(indices, values, keep)
    ]


def value_norms(v: torch.Tensor, w_o: torch.Tensor, heads: list[int]) -> torch.Tensor:
    """‖f(x_j)‖ = ‖v_j · W_Oʰᵀ‖ per head and key token: what token j can hand over through head h.

    v (h, T, D) each query head's values (its kv head's under grouped-query attention);
    w_o (d_model, H·D), head h's slice the columns h·D:(h+1)·D. -> (h, T). The value bias is
    inside v; the output bias b_O is added once after the heads are summed and belongs to no
    token, so it is left out (as Kobayashi et al. 2020 do).
    """
    d = v.shape[-1]
    slices = torch.stack([w_o[:, h * d : (h + 1) * d] for h in heads]).to(v)  # (h, d_model, D)
    return (v @ slices.transpose(-2, -1)).norm(dim=-1)  # (h, T, d_model) -> (h, T)


HEAD_FUSIONS = ("mean", "max", "min")


def fuse_heads(weights: torch.Tensor, how: str = "mean") -> torch.Tensor:
    """One layer's heads as one matrix: their mean, max or min. (H, T, T) -> (T, T)"""
    if how == "mean":
        return weights.mean(0)
    return weights.amax(0) if how == "max" else weights.amin(0)


def attention_rollout(layers: list[torch.Tensor]) -> torch.Tensor:
    """Abnar & Zuidema 2020: Â_l = 0.5·A_l + 0.5·I, rows renormalised; rollout = Â_L ⋯ Â_1.

    layers: each layer's fused weights (T, T), first layer first. Row i of the result says how much
    of output token i traces back to each input token, counting the residual path as half of each
    layer. -> (T, T)
    """
    count = layers[0].shape[-1]
    rolled = torch.eye(count, dtype=torch.float64, device=layers[0].device)
    for weights in layers:
        rolled = residual_mixed(weights) @ rolled  # later layers apply after earlier ones
    return rolled.float()


def residual_mixed(weights: torch.Tensor) -> torch.Tensor:
    """Â = 0.5·A + 0.5·I, rows renormalised: a layer's attention with its residual path (rollout, flow).

    (T, T) -> (T, T) float64, rows summing to 1
    """
    count = weights.shape[-1]
    mixed = 0.5 * weights.double() + 0.5 * torch.eye(count, dtype=torch.float64, device=weights.device)
    return mixed / mixed.sum(-1, keepdim=True)


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
