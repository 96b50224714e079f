"""The corpus store's mergeable partials (math/partials.py) and the edge search (math/edges.py): merging any
split of the same texts, in any order, gives the identical Partial; the kept lists equal brute force."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attn_cli.math import edges, partials
from attn_cli.math.head_scores import SCORES

SHAPE = (2, 3)  # layers × heads


def batch(text_ids: list[int], seed: int, ties: bool = False) -> partials.Batch:
    """Random scores for these texts (a few undefined); `ties`: values from a small set, so many are equal."""
    generator = np.random.default_rng(seed)
    n, (layers, heads) = len(text_ids), SHAPE
    shape = (n, layers, heads)
    values = (
        generator.choice([0.0, 0.25, 0.5, 1.0], size=(*shape, len(SCORES)))
        if ties
        else generator.random((*shape, len(SCORES)))
    )
    values[generator.random(values.shape) < 0.1] = np.nan
    lengths = generator.integers(2, 9, size=n)
    tokens = [[f"t{text_id}_{position}" for position in range(length)] for text_id, length in zip(text_ids, lengths)]
    sink = np.minimum(generator.integers(-1, 3, size=shape), (lengths - 1)[:, None, None])
    edge_weight = np.where(generator.random(shape) < 0.9, generator.choice([0.5, 0.9], size=shape), np.nan)
    return partials.Batch(
        text_ids=np.array(text_ids, dtype=np.int64),
        tokens=tokens,
        values=values,
        sink=sink,
        query=np.where(np.isnan(edge_weight), -1, 1),
        edge_key=np.where(np.isnan(edge_weight), -1, 0),
        edge_weight=edge_weight,
        keys=np.tile(np.arange(partials.KEYS), (*shape, 1)),
        weights=np.full((*shape, partials.KEYS), 0.2, dtype=np.float32),
    )


def reduced(text_ids: list[int], ties: bool, top: int = 3, samples: int = 2) -> partials.Partial:
    """The texts reduced one batch per text: a text's data depends on its id only (seeded by it)."""
    parts = [partials.reduce(_one(text_id, ties), SHAPE, top, samples) for text_id in text_ids]
    return partials.merge_all(parts, SHAPE, top, samples)


def _one(text_id: int, ties: bool) -> partials.Batch:
    return batch([text_id], seed=text_id, ties=ties)


def equal(x: np.ndarray, y: np.ndarray) -> bool:
    return np.array_equal(x, y, equal_nan=x.dtype.kind == "f")


def assert_same(a: partials.Partial, b: partials.Partial) -> None:
    assert (a.texts, a.tokens, a.truncated) == (b.texts, b.tokens, b.truncated)
    for name in ("count", "total", "squares", "low", "high", "hist", "fine"):
        assert equal(getattr(a, name), getattr(b, name)), name
    assert a.sinks == b.sinks
    for table in ("top", "samples", "edges", "views"):
        for column, values in getattr(a, table).items():
            assert equal(values, getattr(b, table)[column]), (table, column)
    assert a.token_lists == b.token_lists


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(0, 60), min_size=1, max_size=25, unique=True), st.randoms(use_true_random=False), st.booleans()
)
def test_merging_any_split_in_any_order_gives_the_same_partial(text_ids, shuffler, ties):
    whole = reduced(sorted(text_ids), ties)
    order = list(text_ids)
    shuffler.shuffle(order)
    cuts = sorted(shuffler.sample(range(1, len(order)), k=min(3, len(order) - 1))) if len(order) > 1 else []
    groups = [order[a:b] for a, b in zip([0, *cuts], [*cuts, len(order)])]
    pieces = [reduced(group, ties) for group in groups]
    shuffler.shuffle(pieces)
    # a tree of merges, not a left fold: associativity
    while len(pieces) > 1:
        pieces = [
            partials.merge(*pieces[i : i + 2]) if i + 1 < len(pieces) else pieces[i] for i in range(0, len(pieces), 2)
        ]
    assert_same(whole, pieces[0])


def test_a_batch_reduced_whole_equals_its_texts_reduced_one_by_one():
    text_ids = list(range(12))
    together = partials.reduce(_concat_batches([_one(t, True) for t in text_ids]), SHAPE, 3, 2)
    assert_same(together, reduced(text_ids, True))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 500), min_size=1, max_size=20, unique=True),
    st.integers(0, 2**32 - 1),
    st.booleans(),
    st.integers(1, 12),
)
def test_a_batch_reduced_in_the_order_of_its_ids_or_shuffled_keeps_what_one_sort_of_all_candidates_keeps(
    text_ids, seed, ties, top
):
    """reduce sorts each group's texts alone (partials._top_columns): exactly the rows, in the order, that one
    lexsort of every defined candidate by (group, value desc, text_id) keeps, ties and NaN included."""
    generator = np.random.default_rng(seed)
    shuffled = [int(t) for t in generator.permutation(text_ids)]  # a batch's texts are in length order, not id order
    part = partials.reduce(batch(shuffled, seed, ties), SHAPE, top, 2)
    values = batch(shuffled, seed, ties).values.reshape(len(shuffled), -1)  # (n, groups)
    text, group = np.nonzero(~np.isnan(values))
    ids = np.array(shuffled, dtype=np.int64)[text]
    order = np.lexsort((ids, -values[text, group], group))
    rank = np.array([np.sum(group[order][:i] == g) for i, g in enumerate(group[order])], dtype=np.int64)
    kept = order[rank < top]
    assert part.top["group"].tolist() == group[kept].tolist()
    assert part.top["text_id"].tolist() == ids[kept].tolist()
    assert equal(part.top["value"], values[text, group][kept])


def test_a_batch_reduced_without_examples_has_the_same_sums_and_empty_lists():
    whole = _concat_batches([_one(t, True) for t in range(9)])
    full, bare = partials.reduce(whole, SHAPE, 3, 2), partials.reduce(whole, SHAPE, 3, 2, examples=False)
    for name in ("count", "total", "squares", "low", "high", "hist", "fine"):
        assert equal(getattr(full, name), getattr(bare, name)), name
    assert full.sinks == bare.sinks and (full.texts, full.tokens) == (bare.texts, bare.tokens)
    assert all(
        len(column) == 0 for table in (bare.top, bare.samples, bare.edges, bare.views) for column in table.values()
    )
    assert bare.token_lists == {}


def _concat_batches(batches: list[partials.Batch]) -> partials.Batch:
    fields = ("text_ids", "values", "sink", "query", "edge_key", "edge_weight", "keys", "weights")
    joined = {name: np.concatenate([getattr(b, name) for b in batches]) for name in fields}
    return partials.Batch(tokens=[t for b in batches for t in b.tokens], **joined)


def test_kept_lists_and_sums_equal_brute_force():
    text_ids = list(range(40))
    merged = reduced(text_ids, ties=True, top=4, samples=3)
    values = np.stack([_one(t, True).values[0] for t in text_ids])  # (n, L, H, S)
    mean, std = partials.mean_std(merged)
    for layer, head, score in np.ndindex(*SHAPE, len(SCORES)):
        column = values[:, layer, head, score]
        defined = [(v, t) for t, v in zip(text_ids, column) if not math.isnan(v)]
        assert merged.count[layer, head, score] == len(defined)
        assert mean[layer, head, score] == pytest.approx(np.mean([v for v, _ in defined]), abs=1e-9)
        assert std[layer, head, score] == pytest.approx(np.std([v for v, _ in defined]), abs=1e-9)
        group = (layer * SHAPE[1] + head) * len(SCORES) + score
        chosen = merged.top["group"] == group
        expected = sorted(defined, key=lambda item: (-item[0], item[1]))[:4]  # value desc, then text_id
        assert merged.top["text_id"][chosen].tolist() == [t for _, t in expected]


def test_constant_values_have_zero_spread_and_equal_texts_sample_by_hash():
    text_ids = list(range(30))
    one = [_one(t, False) for t in text_ids]
    for b in one:
        b.values[:] = 0.3
    merged = partials.merge_all([partials.reduce(b, SHAPE, 3, 2) for b in one], SHAPE, 3, 2)
    mean, std = partials.mean_std(merged)
    assert np.all(std == 0.0) and np.allclose(mean, 0.3, atol=1e-9)
    chosen = merged.samples["group"] == partials.fine_bin(np.array([0.3]))[0]  # (0, 0, 0) at 0.3's fine bin
    hashes = partials.text_hash(np.array(text_ids))
    assert merged.samples["text_id"][chosen].tolist() == [text_ids[i] for i in np.argsort(hashes)[:2]]


def deciles_of(values: list[float], samples: int) -> list[list[float]]:
    """The decile samples of one head's one score over texts 0..n-1 with these values: their values."""
    count = len(values)
    batch_ = partials.Batch(
        text_ids=np.arange(count),
        tokens=[["a", "b"]] * count,
        values=np.array(values)[:, None, None, None] * np.ones((1, 1, 1, len(SCORES))),
        sink=np.full((count, 1, 1), -1),
        query=np.full((count, 1, 1), -1),
        edge_key=np.full((count, 1, 1), -1),
        edge_weight=np.full((count, 1, 1), np.nan),
        keys=np.full((count, 1, 1, partials.KEYS), -1),
        weights=np.zeros((count, 1, 1, partials.KEYS), dtype=np.float32),
    )
    part = partials.reduce(batch_, (1, 1), 3, samples)
    return [part.samples["value"][rows].tolist() for rows in partials.decile_samples(part, 0)]


def test_deciles_are_cut_from_the_fine_histogram_and_never_share_a_text():
    spread = deciles_of([i / 100 for i in range(100)], 2)  # one text a bin or so: each decile its own tenth
    for decile, values in enumerate(spread):
        assert len(values) == 2 and all(decile / 10 <= value < (decile + 1) / 10 for value in values), values
    crowded = deciles_of([0.9995] * 100, 5)  # one bin: its 5 kept texts stand at ranks 10, 30, … 90
    assert [len(values) for values in crowded] == [0, 1, 0, 1, 0, 1, 0, 1, 0, 1]
    assert np.isnan(partials.quantile(np.zeros(partials.FINE, dtype=np.int64), 0.5, 0.0, 1.0))


def test_fine_bins_tell_scores_near_one_apart_and_quantiles_land_near_the_truth():
    values = np.array([0.0, 0.5, 0.999, 0.9999, 1.0])
    bins = partials.fine_bin(values)
    assert bins[0] == 0 and bins[-1] == partials.FINE - 1 and len(set(bins.tolist())) == 5
    assert partials.hist_bin(np.array([0.0, 0.05, 1.0])).tolist() == [0, 1, partials.BINS - 1]
    sample = np.random.default_rng(1).beta(2, 5, size=5000)
    fine = np.bincount(partials.fine_bin(sample), minlength=partials.FINE)
    for q in (0.05, 0.5, 0.95):
        assert partials.quantile(fine, q, sample.min(), sample.max()) == pytest.approx(np.quantile(sample, q), abs=0.01)


def test_the_histogram_bins_are_the_stores():
    from attn_cli.data import store_schema

    assert partials.BINS == store_schema.BINS


@pytest.mark.parametrize("block", [3, 7])  # blocks of rows (max with rows), or every row at once (amax, row after)
def test_the_strongest_edge_skips_the_sink_key_and_rows_without_a_choice(block):
    """Brute force over random weights and row blocks: the largest weight off the text's sink key, over rows
    with two allowed keys or more; ties to the earliest row, then key."""
    generator = torch.Generator().manual_seed(0)
    count, heads, keys = 3, 2, 7
    weights = torch.rand(count, heads, keys, keys, generator=generator).round(decimals=1)  # ties
    allowed = torch.tril(torch.ones(keys, keys, dtype=torch.bool)).expand(count, keys, keys)
    weights = weights * allowed[:, None]
    sink = torch.tensor([[0, -1], [3, 0], [6, 2]])
    maxima = edges.ColumnMaxima()
    for start in range(0, keys, block):
        maxima.add(weights[:, :, start : start + block], allowed[:, start : start + block], start)
    row, key, weight = maxima.edge(sink)
    for b in range(count):
        for h in range(heads):
            cells = [
                (-float(weights[b, h, i, j]), i, j)
                for i in range(1, keys)
                for j in range(keys)
                if j != sink[b, h] and allowed[b, i, j]
            ]
            best = min(cells, key=lambda cell: (cell[0], cell[2], cell[1]))  # by weight, key first, then row
            assert (float(weight[b, h]), int(key[b, h]), int(row[b, h])) == (pytest.approx(-best[0]), best[2], best[1])


def test_strongest_keys_pad_past_the_row():
    values, keys = edges.strongest(torch.tensor([[0.7, 0.3, 0.0]]), 5)
    assert keys.tolist() == [[0, 1, -1, -1, -1]] and values[0].tolist() == pytest.approx([0.7, 0.3, 0, 0, 0])


def test_partials_of_different_shapes_refuse_to_merge():
    with pytest.raises(ValueError):
        partials.merge(partials.Partial(SHAPE, 3, 2), partials.Partial(SHAPE, 4, 2))


@pytest.mark.parametrize("ties", [False, True])
def test_a_partial_merged_into_nothing_comes_back_as_merging_would_give_it(ties):
    """merge(empty, part) returns part itself (a run's first part), which must equal a real merge."""
    part = partials.reduce(batch([3, 1, 7, 4], seed=5, ties=ties), SHAPE, 3, 2)
    empty = partials.Partial(SHAPE, 3, 2)
    assert partials.merge(empty, part) is part
    assert_same(part, partials.merge_all([empty, part], SHAPE, 3, 2))
    with pytest.raises(ValueError, match="do not merge"):
        partials.merge(partials.Partial(SHAPE, 4, 2), part)


def test_kept_token_lists_hold_one_string_object_per_distinct_token():
    """A tokenizer hands every text new string objects; the texts a Partial keeps share one per token (a long
    run keeps tens of thousands of texts), after reduce and after a part is read back from its files."""
    data = batch([0, 1, 2], seed=1)
    data.tokens = [["".join(["ca", "t"]) for _ in tokens] for tokens in data.tokens]  # equal, distinct objects
    assert data.tokens[0][0] is not data.tokens[1][0]
    part = partials.reduce(data, SHAPE, 3, 2)
    arrays, meta = partials.to_state(part)
    for kept in (part, partials.from_state(arrays, json.loads(json.dumps(meta)))):
        tokens = [token for kept_tokens in kept.token_lists.values() for token in kept_tokens]
        assert len(kept.token_lists) >= 2 and set(tokens) == {"cat"}
        assert all(token is tokens[0] for token in tokens)


def test_one_rows_patterns_are_share_patterns_rows():
    """row_patterns (one query row per text and head, for the examples) is share_patterns read at those rows."""
    import torch

    from attn_cli.data.capture import Token
    from attn_cli.math.head_scores import row_patterns, share_patterns, token_flags

    generator = np.random.default_rng(3)
    tokens = [
        [
            Token(i, "," if i == 4 else f"w{int(w)}", int(w), i in (0, 8))
            for i, w in enumerate(generator.integers(0, 4, 9))
        ]
        for _ in range(3)
    ]
    flags = token_flags(tokens)
    whole = share_patterns(flags, 0, 9)  # (7, B, T, T)
    rows = torch.tensor(generator.integers(0, 9, size=(3, 2)))
    for b in range(3):
        for h in range(2):
            assert torch.equal(row_patterns(flags, rows)[:, b, h], whole[:, b, rows[b, h]])
