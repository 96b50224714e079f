"""The orders, ranks, lookups and sums the fold's kept lists and totals are built with (math/partials.py): each
equals a numpy definition written beside it (np.lexsort, np.searchsorted, Python integers), and is faster on the
shapes a fold makes: lists that arrive as sorted runs, small groups, few distinct texts. Pure numpy; the tests
(tests/test_partials_fast.py) check each against its definition, ties included.
"""

from __future__ import annotations

import numpy as np


def group_value_order(group: np.ndarray, value: np.ndarray, text_id: np.ndarray) -> np.ndarray:
    """np.lexsort((text_id, -value, group)), sooner: one stable sort of a uint64 key, the group in the high 32 bits
    and the value's float32 bits reversed below (a non-negative float's bits order as it does), where every value
    is a float32 (the scores and weights are) and no value is negative; lexsort otherwise. Rows tying on (group,
    value) are then put in text_id order, among themselves only."""
    if (
        len(group) < 2
        or group.min() < 0
        or group.max() >= 1 << 32
        or not np.all(value >= 0)
        or not np.array_equal(value.astype(np.float32), value)
    ):
        return np.lexsort((text_id, -value, group))
    bits = (value + 0.0).astype(np.float32).view(np.uint32)  # + 0.0: -0.0 becomes 0.0, whose bits are 0
    key = (group.astype(np.uint64) << np.uint64(32)) | (np.uint64(0xFFFFFFFF) - bits.astype(np.uint64))
    order = np.argsort(key, kind="stable")
    ordered = key[order]
    tied = ordered[1:] == ordered[:-1]
    if tied.any():
        rows = np.zeros(len(order), dtype=bool)
        rows[1:] |= tied
        rows[:-1] |= tied
        at = np.flatnonzero(rows)  # the tied rows' places: runs of one key each, already in key order
        order[at] = order[at][np.lexsort((text_id[order[at]], ordered[at]))]
    return order


def group_hash_order(group: np.ndarray, hashes: np.ndarray) -> np.ndarray:
    """np.lexsort((hashes, group)), sooner: one stable sort of a single uint64 key, the group in the high bits
    and the hash's leading bits below it. A merge's lists arrive as sorted runs, which the stable sort (timsort)
    merges in linear time, where lexsort sorts each key afresh. Where two keys tie (the same group and leading
    hash bits: a chance of ~n²/2^(64-group bits)), or the groups need too many bits, lexsort decides."""
    if len(group) < 2:
        return np.lexsort((hashes, group))
    bits = int(group.max()).bit_length()
    if group.min() < 0 or bits > 32:
        return np.lexsort((hashes, group))
    shift = np.uint64(64 - bits)
    key = (group.astype(np.uint64) << shift) | (hashes >> np.uint64(bits)) if bits else hashes
    order = np.argsort(key, kind="stable")
    ordered = key[order]
    if np.any(ordered[1:] == ordered[:-1]):
        return np.lexsort((hashes, group))
    return order


def places(keys: np.ndarray, wanted: np.ndarray, layers_heads: int) -> np.ndarray:
    """The index in keys (sorted, unique; text_id · LH + pair) of each wanted key, all of which must be there.
    Bisecting every wanted key (tens of thousands a batch, among a few thousand views) is the slow way: where
    the views' texts span a range and hold heads dense enough (tables no larger than a few times the views),
    two table lookups find each key: its text's row, then the pair's place in it."""
    if len(keys) == 0 or len(wanted) == 0:
        if len(wanted):
            raise ValueError("a kept list refers to a view the partial does not hold")
        return np.zeros(0, dtype=np.int64)
    room = 4 * len(keys) + 4096  # the tables' most entries: bounded by the views, never by the corpus
    key_text, wanted_text = keys // layers_heads, wanted // layers_heads
    texts = np.unique(key_text)  # sorted
    low, span = int(texts[0]), int(texts[-1] - texts[0]) + 1
    if span <= room and len(texts) * layers_heads <= room:
        row_of = np.full(span + 1, len(texts), dtype=np.int64)  # text - low -> its row; the last: not a view's
        row_of[texts - low] = np.arange(len(texts))
        table = np.full((len(texts) + 1, layers_heads), -1, dtype=np.int64)  # the last row: -1, no such text
        table[row_of[key_text - low], keys % layers_heads] = np.arange(len(keys))
        inside = (wanted_text >= low) & (wanted_text - low < span)
        found = table[row_of[np.where(inside, wanted_text - low, span)], wanted % layers_heads]
    else:
        found = np.searchsorted(keys, wanted).clip(max=len(keys) - 1)
        found = np.where(keys[found] == wanted, found, -1)
    if np.any(found < 0):
        raise ValueError("a kept list refers to a view the partial does not hold")
    return found


def run_rank(keys: np.ndarray) -> np.ndarray:
    """Each element's place in its run of equal keys (keys sorted): [5, 5, 7, 9, 9, 9] -> [0, 1, 0, 0, 1, 2]."""
    starts = np.r_[0, np.flatnonzero(np.diff(keys)) + 1] if len(keys) else np.zeros(0, dtype=np.int64)
    return np.arange(len(keys)) - np.repeat(starts, np.diff(np.r_[starts, len(keys)]))


def place_in_cell(cell: np.ndarray, value: np.ndarray, text_id: np.ndarray) -> np.ndarray:
    """Each row's place among the rows of its cell in (value, text_id) order. The samples are stored sorted by
    cell (_keep's order), a cell holds `samples` rows at most: compared all pairs within a cell at once, not
    sorted (a 4-key lexsort of every sample was most of the examples table's time)."""
    if len(cell) == 0:
        return np.zeros(0, dtype=np.int64)
    if np.any(np.diff(cell) < 0):  # not in cell order: sort it, and give the places back in the given order
        order = np.argsort(cell, kind="stable")
        place = np.empty(len(cell), dtype=np.int64)
        place[order] = place_in_cell(cell[order], value[order], text_id[order])
        return place
    within = run_rank(cell)  # (n,)
    run = np.cumsum(within == 0) - 1  # (n,) the run (cell) of each row
    width = int(within.max()) + 1
    if width > 64:  # large cells: the pairs would outgrow a sort
        order = np.lexsort((text_id, value, cell))
        place = np.empty(len(cell), dtype=np.int64)
        place[order] = run_rank(cell[order])
        return place
    values = np.full((run[-1] + 1, width), np.inf)  # (cells, width), padding +inf …
    texts = np.full(values.shape, np.iinfo(np.int64).max)
    real = np.zeros(values.shape, dtype=bool)  # … and marked, so it never counts
    values[run, within], texts[run, within], real[run, within] = value, text_id, True
    other_value, other_text = values[run], texts[run]  # (n, width): the row's cell
    before = (other_value < value[:, None]) | ((other_value == value[:, None]) & (other_text < text_id[:, None]))
    return (before & real[run]).sum(1)


def square_sums(units: np.ndarray) -> np.ndarray:
    """Σ a² over axis 0 of units (n, ...) int64, exact, as Python ints (…) object. a² reaches 2^64, past int64,
    so a = hi·2^16 + lo and a² = hi²·2^32 + hi·lo·2^17 + lo², each part summed in int64 (every term is at most
    2^32, a batch far fewer than 2^31 texts) and joined in Python ints once per cell, not once per text."""
    hi, lo = units >> 16, units & 0xFFFF
    parts = ((hi * hi).sum(0), (hi * lo).sum(0), (lo * lo).sum(0))
    return (parts[0].astype(object) << 32) + (parts[1].astype(object) << 17) + parts[2].astype(object)
