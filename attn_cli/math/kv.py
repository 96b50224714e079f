"""How much of a head's attention a KV cache policy keeps: per query row, from a block of its softmax weights.

Every function reads a block of rows the way the corpus engine hands them over (analyses/heads.py): weights
(B, h, c, T) of c query rows starting at row `start`, masked cells 0, and returns one value per row (B, h, c).
Row i's keys are its allowed ones (a causal row: keys 0 … i). A policy keeps a set of keys for each row; what
it keeps is the sum of the row's weights on them (1: nothing lost).

sink_mass          the weight on the first `sinks` keys (attention sinks)
window_mass        the weight on keys less than `window` positions from the row (i − window < j ≤ i causally)
keys_for_mass      the fewest keys, largest first, whose weights add up to at least p (the budget a row needs)
streaming_kept     StreamingLLM (Xiao et al. 2024): the first `sinks` keys and the most recent ones, `budget` in all
heavy_hitter_kept  H2O (Zhang et al. 2023): `budget` / 2 most recent keys, and the `budget` / 2 older keys with the
                   most attention accumulated by the rows before this one (its heavy hitters)
snapkv_kept        SnapKV (Li et al. 2024): the keys the last rows of a text (its observation window) vote for, and
                   the window's own; read for the window's rows, once a text is whole
"""

from __future__ import annotations

import torch


def _offsets(weights: torch.Tensor, start: int) -> torch.Tensor:
    """(c, T) row − key for the block's rows: 0 on the diagonal, positive for keys before the row."""
    rows = torch.arange(start, start + weights.shape[-2], device=weights.device)[:, None]
    keys = torch.arange(weights.shape[-1], device=weights.device)[None, :]
    return rows - keys


def sink_mass(weights: torch.Tensor, sinks: int) -> torch.Tensor:
    return weights[..., :sinks].sum(-1)


def band_mass(weights: torch.Tensor, start: int, low: int, high: int) -> torch.Tensor:
    """The weight on keys j with low ≤ row − j < high (how far back the key is; negative: ahead of the row),
    read from the slice of keys the block's rows can reach, not the whole row (a 16k-token row: a few keys)."""
    count, keys = weights.shape[-2], weights.shape[-1]
    first, last = max(0, start - high + 1), min(keys, start + count - low)
    if first >= last:
        return weights.new_zeros(weights.shape[:-1])
    rows = torch.arange(start, start + count, device=weights.device)[:, None]
    offsets = rows - torch.arange(first, last, device=weights.device)[None, :]  # (c, last − first)
    return (weights[..., first:last] * ((offsets >= low) & (offsets < high))).sum(-1)


def window_mass(weights: torch.Tensor, start: int, window: int) -> torch.Tensor:
    return band_mass(weights, start, 1 - window, window)  # |row − key| < window; a causal row has none ahead


def keys_for_mass(weights: torch.Tensor, masses: tuple[float, ...]) -> torch.Tensor:
    """(len(masses), B, h, c) the fewest keys whose weights reach each p of the row (a row with no weight: 0),
    from one sort of the rows. The comparison allows float32 round-off (1e-6), so a row of one key needs 1 key
    for p = 1; p is of what the row holds (a learned sink's row holds less than 1)."""
    ordered = weights.sort(-1, descending=True).values.cumsum_(-1)  # (B, h, c, T)
    total = ordered[..., -1:]
    held = total[..., 0] > 0
    return torch.stack([torch.where(held, (ordered < (p - 1e-6) * total).sum(-1) + 1, 0) for p in masses])


def streaming_kept(weights: torch.Tensor, start: int, sinks: int, budget: int) -> torch.Tensor:
    recent = budget - sinks
    both = band_mass(weights[..., :sinks], start, 0, recent)  # a sink that is also recent, counted once
    return sink_mass(weights, sinks) + band_mass(weights, start, 0, recent) - both


def heavy_hitter_kept(
    weights: torch.Tensor, start: int, budget: int, accumulated: torch.Tensor, rows: torch.Tensor | None = None
) -> torch.Tensor:
    """H2O's kept share per row (B, h, c), or per row of `rows` (local indices, (s,): (B, h, s)). accumulated:
    (B, h, T) the attention every key received from the rows before the block, updated in place with the
    block's own rows (pass the blocks in row order)."""
    recent = budget - budget // 2
    heavy = budget // 2
    offsets = _offsets(weights, start)
    if rows is None:
        before = accumulated[:, :, None] + weights.cumsum(-2) - weights  # (B, h, c, T) attention from earlier rows
    else:  # each chosen row's earlier rows: the block's rows summed in groups that end before it, then accumulated
        group = torch.bucketize(torch.arange(weights.shape[-2], device=weights.device), rows, right=True)  # (c,)
        sums = weights.new_zeros(*weights.shape[:2], len(rows) + 1, weights.shape[-1])
        sums.index_add_(2, group, weights)  # (B, h, s + 1, T): the rows before the first chosen one, then after each
        before = accumulated[:, :, None] + sums.cumsum(2)[:, :, : len(rows)]  # (B, h, s, T)
        weights, offsets = weights[:, :, rows], offsets[rows]
    accumulated += weights.sum(-2) if rows is None else sums.sum(2)
    kept = (offsets >= 0) & (offsets < recent)  # (c, T) the most recent keys
    if heavy:
        older = offsets >= recent  # (c, T) the keys the heavy hitters are chosen from
        ranked = torch.where(older, before, torch.finfo(before.dtype).min)
        count = min(heavy, weights.shape[-1])
        top = ranked.topk(count, dim=-1).indices  # (B, h, c, count)
        chosen = torch.zeros_like(weights, dtype=torch.bool).scatter_(-1, top, True) & older
        kept = kept | chosen
    return (weights * kept).sum(-1)


def snapkv_kept(window_rows: torch.Tensor, budget: int, kernel: int = 5) -> torch.Tensor:
    """SnapKV (Li et al. 2024), for one text: window_rows (h, w, L) are its last w query rows (the observation
    window) over its L keys. Their summed attention votes for each earlier key, smoothed by an average pool of
    `kernel` keys; the budget − w keys with the most votes are kept, with the window's own keys.
    -> (h, w) what each window row keeps of its attention."""
    heads, window, keys = window_rows.shape
    prefix = keys - window
    votes = window_rows[..., :prefix].sum(-2)  # (h, prefix)
    pooled = torch.nn.functional.avg_pool1d(votes[:, None], kernel, stride=1, padding=kernel // 2)[:, 0, :prefix]
    chosen = pooled.topk(min(budget - window, prefix), dim=-1).indices  # (h, budget − w)
    kept = torch.zeros(heads, keys, dtype=torch.bool, device=window_rows.device)
    kept.scatter_(-1, chosen, True)
    kept[:, prefix:] = True
    return (window_rows * kept[:, None]).sum(-1)
