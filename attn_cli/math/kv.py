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
    from one sort of the rows. The m largest weights hold p of the row exactly when the n − m smallest hold at
    most 1 − p of it, so the rows are sorted ascending and summed from their smallest weights (in float64: no
    large partial sum swallows a small weight). The comparison allows 1e-6 of round-off, so a row of one key
    needs 1 key for p = 1; p is of what the row holds (a learned sink's row holds less than 1)."""
    smallest_first = ascending(weights).double().cumsum_(-1)  # (B, h, c, T)
    total = smallest_first[..., -1:]
    held = total[..., 0] > 0
    keys = weights.shape[-1]
    return torch.stack(
        [torch.where(held, keys - (smallest_first <= (1 - p + 1e-6) * total).sum(-1), 0) for p in masses]
    )


def ascending(weights: torch.Tensor) -> torch.Tensor:
    """weights (…, T), each row sorted smallest first. On the CPU by numpy's sort of the float32 bits as int32
    (the same order for weights ≥ 0, and numpy's vectorised integer sort is several times torch's), the rows
    split over torch's threads (numpy lets go of the GIL while it sorts)."""
    if weights.device.type != "cpu" or weights.dtype != torch.float32 or weights.numel() == 0:
        return weights.sort(-1).values
    import numpy as np

    rows = weights.detach().contiguous().numpy().view(np.int32).reshape(-1, weights.shape[-1])
    parts = np.array_split(rows, max(1, min(torch.get_num_threads(), len(rows) // 16)))
    if len(parts) == 1:
        ordered = np.sort(rows, -1)
    else:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(len(parts)) as pool:
            ordered = np.concatenate(list(pool.map(lambda part: np.sort(part, -1), parts)))
    return torch.from_numpy(ordered.view(np.float32)).reshape(weights.shape)


def streaming_kept(weights: torch.Tensor, start: int, sinks: int, budget: int) -> torch.Tensor:
    recent = budget - sinks
    both = band_mass(weights[..., :sinks], start, 0, recent)  # a sink that is also recent, counted once
    return sink_mass(weights, sinks) + band_mass(weights, start, 0, recent) - both


def heavy_hitter_kept(weights: torch.Tensor, start: int, budget: int, accumulated: torch.Tensor) -> torch.Tensor:
    """H2O's kept share per row (B, h, c). accumulated: (B, h, T) the attention every key received from the rows
    before the block, updated in place with the block's own rows (pass the blocks in row order; a row of zeros
    neither votes nor keeps)."""
    recent = budget - budget // 2
    heavy = budget // 2
    kept = band_mass(weights, start, 0, recent)  # the most recent keys
    stop = start + weights.shape[-2]
    before = accumulated[:, :, None, :stop] + weights[..., :stop].cumsum(-2) - weights[..., :stop]  # (B, h, c, stop)
    accumulated += weights.sum(-2)
    if heavy and stop > recent:  # the heavy hitters, of the keys before the recent ones (none past the rows)
        offsets = _offsets(weights[..., :stop], start)  # (c, stop)
        older = offsets >= recent
        # a key no earlier row has attended yet (a sample's rows leave some: analyses/kv.py) ranks below every
        # attended one, the more recent first, so a tie at 0 is broken the same way every time
        unseen = -offsets.to(before.dtype)  # ≤ −recent on the older keys: below any attention
        ranked = torch.where(older, torch.where(before > 0, before, unseen), torch.finfo(before.dtype).min)
        top = ranked.topk(min(heavy, stop), dim=-1).indices  # (B, h, c, heavy)
        chosen = older[torch.arange(len(older), device=older.device)[:, None], top]  # a row with fewer older keys
        kept = kept + (weights.gather(-1, top) * chosen).sum(-1)
    return kept


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
