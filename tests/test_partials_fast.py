"""The fold's fast paths equal their definitions: the sorts, lookups and sums the store's lists and totals are
built with (math/orders.py), and the writer's string gather (data/arrow_columns.py)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attn_cli.data import arrow_columns as arrow
from attn_cli.math import orders, partials


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 400), st.integers(0, 2**20), st.integers(0, 2**32 - 1), st.booleans())
def test_the_group_hash_order_is_lexsorts(count, groups, seed, clash):
    rng = np.random.default_rng(seed)
    group = rng.integers(0, groups + 1, count)
    hashes = partials.text_hash(rng.permutation(10 * count)[:count])
    if clash and count > 1:  # two rows of one group whose hashes share their leading bits: lexsort decides
        group[1], hashes[1] = group[0], hashes[0] ^ np.uint64(1)
    assert np.array_equal(orders.group_hash_order(group, hashes), np.lexsort((hashes, group)))


@settings(max_examples=80, deadline=None)
@given(
    st.integers(1, 300),
    st.integers(0, 2**12),
    st.integers(0, 2**32 - 1),
    st.sampled_from(["float32", "ties", "float64", "negative"]),
)
def test_the_group_value_order_is_lexsorts(count, groups, seed, values):
    rng = np.random.default_rng(seed)
    group, text_id = rng.integers(0, groups + 1, count), rng.permutation(5 * count)[:count]
    value = rng.random(count).astype(np.float32).astype(np.float64)  # scores: float32 values as float64
    if values == "ties":  # equal values, and -0.0 beside 0.0: text_id decides
        value = rng.choice([0.0, -0.0, 0.5, 1.0], count)
    elif values == "float64":
        value = rng.random(count)
    elif values == "negative":
        value = value - 0.5
    assert np.array_equal(orders.group_value_order(group, value, text_id), np.lexsort((text_id, -value, group)))


def test_the_group_hash_order_of_groups_too_wide_for_one_key_is_lexsorts():
    group = np.array([2**40, 3, 2**40, 0])
    hashes = partials.text_hash(np.arange(4))
    assert np.array_equal(orders.group_hash_order(group, hashes), np.lexsort((hashes, group)))


@settings(max_examples=80, deadline=None)
@given(
    st.integers(1, 30),
    st.integers(1, 200),
    st.integers(0, 2**32 - 1),
    st.sampled_from([0.05, 0.5, 1.0]),
    st.integers(0, 10**7),
)
def test_a_views_places_are_bisections(layers_heads, texts, seed, density, offset):
    rng = np.random.default_rng(seed)
    text = offset + rng.choice(10 * texts, texts, replace=False)
    keys = np.unique((text[:, None] * layers_heads + np.arange(layers_heads)).ravel())
    keys = keys[rng.random(len(keys)) < density] if density < 1 else keys  # sparse: the bisection path
    wanted = rng.choice(keys, 3 * len(keys) + 1) if len(keys) else keys
    if len(keys) == 0:
        return
    assert np.array_equal(orders.places(keys, wanted, layers_heads), np.searchsorted(keys, wanted))
    gaps = keys[:-1][np.diff(keys) > 1] + 1  # keys the views lack: in a gap, and past the last
    for absent in (*gaps[:1], keys[-1] + 1):
        with pytest.raises(ValueError, match="does not hold"):
            orders.places(keys, np.r_[wanted, absent], layers_heads)


def _places_by_sort(cell, value, text_id):
    order = np.lexsort((text_id, value, cell))
    place = np.empty(len(cell), dtype=np.int64)
    place[order] = np.arange(len(cell)) - np.searchsorted(cell[order], cell[order])
    return place


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 300), st.integers(1, 80), st.integers(0, 2**32 - 1), st.booleans())
def test_a_samples_place_in_its_cell_is_the_sorts(count, cells, seed, shuffled):
    rng = np.random.default_rng(seed)
    cell = np.sort(rng.integers(0, cells, count))
    value = rng.choice([0.0, 0.25, 0.5, 1.0], count) if seed % 2 else rng.random(count)  # ties: text_id decides
    text_id = rng.permutation(count)
    if shuffled:  # not in cell order
        order = rng.permutation(count)
        cell, value, text_id = cell[order], value[order], text_id[order]
    assert np.array_equal(orders.place_in_cell(cell, value, text_id), _places_by_sort(cell, value, text_id))


def test_a_samples_place_in_a_cell_too_wide_for_pairs_is_the_sorts():
    rng = np.random.default_rng(0)
    cell, value, text_id = np.zeros(100, dtype=np.int64), rng.random(100), np.arange(100)
    assert np.array_equal(orders.place_in_cell(cell, value, text_id), _places_by_sort(cell, value, text_id))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-(2**33), 2**32), min_size=1, max_size=40), st.integers(1, 4))
def test_the_square_sums_are_exact(values, width):
    units = np.array(values * width, dtype=np.int64).reshape(width, len(values)).T  # (n, width)
    expected = [sum(int(a) ** 2 for a in units[:, column]) for column in range(width)]
    assert orders.square_sums(units).tolist() == expected
    assert orders.square_sums(np.full((3, 1), 1 << 32, dtype=np.int64)).tolist() == [3 << 64]  # x = 1.0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.none(), st.text(max_size=6)), min_size=1, max_size=8), st.data())
def test_picked_strings_are_takes(items, data):
    index = np.array(data.draw(st.lists(st.integers(0, len(items) - 1), max_size=20)), dtype=np.int64)
    picked = arrow.picked(items, index)
    assert picked.equals(arrow.strings(items).take(pa.array(index, pa.int64())))
    assert picked.to_pylist() == [items[i] for i in index]


@settings(max_examples=60, deadline=None)
@given(
    st.dictionaries(
        st.tuples(st.integers(0, 2), st.integers(0, 2), st.integers(0, 4), st.sampled_from(["[CLS]", ".", "a"])),
        st.integers(1, 4),
        max_size=30,
    )
)
def test_every_heads_sink_key_at_once_is_each_ones(tally):
    from collections import Counter

    part = partials.Partial((3, 3), 2, 2, sinks=Counter(tally))
    for layer in range(3):
        for head in range(3):
            mine = [((p, t), n) for (l, h, p, t), n in tally.items() if (l, h) == (layer, head)]
            expected = None
            if mine:
                (position, token), texts = min(mine, key=lambda item: (-item[1], item[0]))
                expected = (position, token, texts)
            assert partials.sink_keys(part).get((layer, head)) == expected == partials.sink_key(part, layer, head)
