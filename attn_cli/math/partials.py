"""Mergeable partial results of `attn heads` over a corpus: what a part of the corpus reduces to, and how two
parts merge (pure numpy; no I/O).

A Partial covers a set of texts and the selected (layer, head) pairs, L × H of them, and S scores (`scores`:
len(SCORES), the built-in ones, plus any a plugin registers; data/registry.score_names names them):

    count, total           (L, H, S) int64   texts where the score is defined; Σ x in fixed point
    squares                (L, H, S) object  Σ x² of the fixed-point values, Python ints (they pass 2^63)
    low, high              (L, H, S) float64 min and max (±inf where count is 0)
    hist                   (L, H, S, BINS)   int64 counts of texts per bin of width 1/BINS over [0, 1]
    fine                   (L, H, S, FINE)   int64 counts of texts per fine bin, FINE equal widths of logit(x)
    sinks                  Counter: (l, h, position, token) -> texts whose sink key that is
    sink_count, sink_total (L, H) int64      texts of a layer with a learned sink logit (GPT-OSS's s_aux); Σ of
                                             each text's mean ⟨sink⟩ share over its rows, in fixed point (0 and 0
                                             for a model without one)
    top                    per (l, h, s): the `top` texts with the highest score
    samples                per (l, h, s, fine bin): the `samples` texts with the smallest hash of their text_id
    edges                  per (l, h): the `top` texts with the strongest single edge (at most one a text)
    views                  per (text, l, h) that one of the three lists holds: the highlighted row and its keys
    texts                  text_id -> (its tokens) for the texts a view holds

Exactness. Merging is associative and commutative and gives the same Partial in any order and any split
of the texts into parts:
- sums are integers: a value x in [0, 1] counts as a = round(x · 2^32), and Σ a and Σ a² are exact integer
  additions (float addition is not associative). The rounding is at most 2^-33 per text, far below the
  1e-6 the means are shown to; int64 holds Σ a for 2^31 texts; Σ a² is a Python int (no limit). The
  variance (n·Σa² − (Σa)²) / (n·2^32)² is then exact too: 0 for one text or equal texts.
- lists keep a total order that does not depend on when a text was seen: top texts and edges by value
  descending, then text_id ascending; samples by splitmix64(text_id) ascending, then text_id. Keeping the
  first N of a merged list equals the first N of the union, whatever the grouping.
- min, max, counts and sink tallies are exact by nature (the sink tally keeps every distinct key: a head's
  sink keys are few, [CLS]/BOS and a handful of separators in practice).
Memory: heads × scores × (FINE × samples + top) list entries at most, never a function of the corpus.

Fine bins are equal in logit(x) = log(x / (1 − x)) over [−LOGIT, LOGIT] (the end bins take the rest), not
in x: a head's scores often crowd near 0 or 1 (a previous-token head scores 0.999…), and logit bins still
tell 0.9990 from 0.9999 apart, so its deciles differ.

Decile samples need no deciles in advance: each fine bin keeps the `samples` texts of smallest hash (a
uniform sample of the bin), and the deciles are cut at the end from the fine histogram (`decile_samples`).
A bin's texts hold the ranks [before, before + n) of the score's distribution; its m kept texts, in value
order, stand at the ranks before + (i + ½)·n/m, and each goes to the decile of its rank, so a bin that
straddles a decile boundary splits between the two and no text is in two deciles. A decile's samples are
the smallest hashes among the texts it got.
"""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from attn_cli.math import orders
from attn_cli.math.head_scores import SCORES
from attn_cli.math.score_names import SHARES

FINE = 200  # fine bins for the decile samples and the quantiles: equal widths of logit(x) over [-LOGIT, LOGIT]
LOGIT = 10.0  # logit(x) = ±10 at x = 0.99995 and 0.00005
BINS = 20  # the histogram's bins: equal widths of x over [0, 1], the last one closed (store_schema.BINS)
KEYS = 5  # keys kept for a highlighted row, strongest first
SHARE_COUNT = len(SHARES)  # the weight-share scores, which have a row of their own in an example
SCALE = float(1 << 32)  # fixed point of the exact sums


@dataclass
class Batch:
    """What scoring a batch of texts hands over, for every selected (layer index l, head index h).

    values (n, L, H, S) float64, NaN where undefined; sink (n, L, H) int64 key position, -1 for none;
    query (n, L, H) the highlighted row: the row of the text's strongest edge off its own sink key (-1 when
    the text has no edge); edge_key, edge_weight (n, L, H) that edge (-1, NaN when none); keys, weights
    (n, L, H, KEYS) the row's strongest keys and their weights (-1, 0 past the row's keys)."""

    text_ids: np.ndarray  # (n,) int64
    tokens: list[list[str]]  # per text, as the tokenizer spells them
    values: np.ndarray
    sink: np.ndarray
    query: np.ndarray
    edge_key: np.ndarray
    edge_weight: np.ndarray
    keys: np.ndarray
    weights: np.ndarray
    truncated: int = 0
    # per share score (n, L, H, 7): the row an example of that score shows, its target key and weight, and the
    # row's strongest keys and weights (n, L, H, 7, KEYS); None: not scored (every example shows the edge's row)
    score_query: np.ndarray | None = None
    score_key: np.ndarray | None = None
    score_weight: np.ndarray | None = None
    score_keys: np.ndarray | None = None
    score_weights: np.ndarray | None = None
    # (n, L, H) float64: each text's mean share of its rows' softmax that a learned sink logit takes (the ⟨sink⟩
    # column), NaN where the layer has none; None: no layer of the batch has one
    sink_mass: np.ndarray | None = None


@dataclass
class Partial:
    shape: tuple[int, int]  # (L, H): selected layers and heads
    top_n: int
    samples_n: int
    texts: int = 0
    tokens: int = 0
    truncated: int = 0
    scores: int = len(SCORES)  # S: the built-in scores, then the plugins' (their names are the run's, not here)
    # The sums and lists start empty (__post_init__, sized by shape) and are filled by reduce, merge or from_state.
    count: np.ndarray = field(init=False)  # (L, H, S) int64
    total: np.ndarray = field(init=False)  # (L, H, S) int64
    squares: np.ndarray = field(init=False)  # (L, H, S) Python ints (object): exact sums of squares
    low: np.ndarray = field(init=False)  # (L, H, S) float64
    high: np.ndarray = field(init=False)  # (L, H, S) float64
    hist: np.ndarray = field(init=False)  # (L, H, S, BINS) int64
    fine: np.ndarray = field(init=False)  # (L, H, S, FINE) int64
    sinks: Counter = field(default_factory=Counter)
    sink_count: np.ndarray = field(init=False)  # (L, H) int64: texts whose layer has a learned sink
    sink_total: np.ndarray = field(init=False)  # (L, H) int64: Σ their mean ⟨sink⟩ share, fixed point
    top: dict[str, np.ndarray] = field(init=False)  # {"group", "value", "text_id"}; group = (l·H + h)·S + s
    # {"group", "hash", "text_id", "value"}; group = ((l·H + h)·S + s)·FINE + bin
    samples: dict[str, np.ndarray] = field(init=False)
    edges: dict[str, np.ndarray] = field(init=False)  # {"group", "value", "text_id"}; group = l·H + h
    # {"text_id", "group", "query", "edge_key", "edge_weight", "keys", "weights", "score_*"}; group l·H + h
    views: dict[str, np.ndarray] = field(init=False)
    token_lists: dict = field(default_factory=dict)  # text_id -> list of token strings

    def __post_init__(self) -> None:
        layers, heads = self.shape
        stats = (layers, heads, self.scores)
        self.count = np.zeros(stats, dtype=np.int64)
        self.total = np.zeros(stats, dtype=np.int64)
        self.squares = np.full(stats, 0, dtype=object)
        self.low = np.full(stats, np.inf, dtype=np.float64)
        self.high = np.full(stats, -np.inf, dtype=np.float64)
        self.fine = np.zeros((*stats, FINE), dtype=np.int64)
        self.hist = np.zeros((*stats, BINS), dtype=np.int64)
        self.sink_count = np.zeros((layers, heads), dtype=np.int64)
        self.sink_total = np.zeros((layers, heads), dtype=np.int64)
        self.top = _empty(TOP_FIELDS)
        self.samples = _empty(SAMPLE_FIELDS)
        self.edges = _empty(TOP_FIELDS)
        self.views = _empty(VIEW_FIELDS)


TOP_FIELDS = {"group": np.int64, "value": np.float64, "text_id": np.int64}
SAMPLE_FIELDS = {"group": np.int64, "hash": np.uint64, "text_id": np.int64, "value": np.float64}
# per share score (SHARES' order): its row (-1: none, show the edge's), its target key and weight, and the
# row's strongest keys and weights, SHARES × KEYS laid flat; (dtype, width) each
SCORE_VIEW_FIELDS: dict[str, tuple[type[np.generic], int]] = {
    "score_query": (np.int64, SHARE_COUNT),
    "score_key": (np.int64, SHARE_COUNT),
    "score_weight": (np.float32, SHARE_COUNT),
    "score_keys": (np.int64, SHARE_COUNT * KEYS),
    "score_weights": (np.float32, SHARE_COUNT * KEYS),
}
VIEW_FIELDS = {
    "text_id": np.int64,
    "group": np.int64,
    "query": np.int64,
    "edge_key": np.int64,
    "edge_weight": np.float64,
    "keys": (np.int64, KEYS),
    "weights": (np.float32, KEYS),
    **SCORE_VIEW_FIELDS,
}
VIEW_FILL = {"score_query": -1, "score_key": -1, "score_weight": np.nan, "score_keys": -1, "score_weights": 0.0}


def _empty(fields: dict) -> dict[str, np.ndarray]:
    return {
        name: np.zeros(
            (0, kind[1]) if isinstance(kind, tuple) else 0, dtype=kind[0] if isinstance(kind, tuple) else kind
        )
        for name, kind in fields.items()
    }


def text_hash(text_ids: np.ndarray) -> np.ndarray:
    """splitmix64 of each text_id (uint64): a fixed pseudo-random order of the texts, the same everywhere."""
    z = text_ids.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def fine_bin(values: np.ndarray) -> np.ndarray:
    """The fine bin of each value in [0, 1]: equal widths of logit(x) over [-LOGIT, LOGIT], the ends open."""
    with np.errstate(divide="ignore", invalid="ignore"):
        logit = np.log(values) - np.log1p(-values)  # ±inf at 0 and 1
    return np.clip(np.floor((logit + LOGIT) / (2 * LOGIT) * FINE), 0, FINE - 1).astype(np.int64)


def hist_bin(values: np.ndarray) -> np.ndarray:
    """The histogram bin of each value in [0, 1]: equal widths, the last bin closed (1.0 is in it)."""
    return np.clip(np.floor(values * BINS), 0, BINS - 1).astype(np.int64)


def fixed(values: np.ndarray) -> np.ndarray:
    """Values in [0, 1] as int64 multiples of 2^-32 (0 where NaN), the unit of the exact sums."""
    return np.rint(np.nan_to_num(values, nan=0.0) * SCALE).astype(np.int64)


def reduce(batch: Batch, shape: tuple[int, int], top_n: int, samples_n: int, examples: bool = True) -> Partial:
    """One batch of texts as a Partial. examples=False: its lists (top, samples, edges, views, token lists) are
    left empty, for a run that writes no store (the report reads only the sums, counts and sinks)."""
    layers, heads = shape
    values = batch.values  # (n, L, H, S)
    scores = values.shape[-1]
    defined = ~np.isnan(values)
    part = Partial(
        shape,
        top_n,
        samples_n,
        texts=len(batch.text_ids),
        tokens=sum(len(tokens) for tokens in batch.tokens),
        truncated=batch.truncated,
        scores=scores,
    )
    part.count = defined.sum(0).astype(np.int64)
    units = fixed(values)  # (n, L, H, S) int64
    part.total = units.sum(0)
    part.squares = orders.square_sums(units) if len(units) else part.squares
    part.low = np.where(defined, values, np.inf).min(0)
    part.high = np.where(defined, values, -np.inf).max(0)
    # candidates: every defined (text, l, h, s)
    text_index, layer, head, score = np.nonzero(defined)
    value = values[text_index, layer, head, score]
    text_id = batch.text_ids[text_index]
    group = (layer * heads + head) * scores + score
    bins = fine_bin(value)
    groups = layers * heads * scores
    part.fine = np.bincount(group * FINE + bins, minlength=groups * FINE).reshape(part.fine.shape)
    part.hist = np.bincount(group * BINS + hist_bin(value), minlength=groups * BINS).reshape(part.hist.shape)
    t, l, h = np.nonzero(batch.sink >= 0)
    part.sinks = Counter(
        zip(
            l.tolist(),
            h.tolist(),
            (positions := batch.sink[t, l, h].tolist()),
            [batch.tokens[text][position] for text, position in zip(t.tolist(), positions)],
        )
    )
    if batch.sink_mass is not None:
        part.sink_count = (~np.isnan(batch.sink_mass)).sum(0).astype(np.int64)
        part.sink_total = fixed(batch.sink_mass).sum(0)
    if not examples:
        return part
    part.top = _top_columns(values.reshape(len(values), -1), batch.text_ids, top_n)
    part.samples = _keep(
        {"group": group * FINE + bins, "hash": text_hash(text_id), "text_id": text_id, "value": value},
        samples_n,
        descending=False,
    )
    part.edges = _top_columns(batch.edge_weight.reshape(len(values), -1).astype(np.float64), batch.text_ids, top_n)
    t, l, h = (axis.ravel() for axis in np.indices(batch.query.shape))
    part.views = {
        "text_id": batch.text_ids[t],
        "group": l * heads + h,
        "query": batch.query[t, l, h].astype(np.int64),
        "edge_key": batch.edge_key[t, l, h].astype(np.int64),
        "edge_weight": batch.edge_weight[t, l, h].astype(np.float64),
        "keys": batch.keys[t, l, h].astype(np.int64),
        "weights": batch.weights[t, l, h].astype(np.float32),
    }
    for name, fill in VIEW_FILL.items():
        kind, width = SCORE_VIEW_FIELDS[name]
        column = getattr(batch, name)
        part.views[name] = (
            np.full((len(t), width), fill, dtype=kind)
            if column is None
            else column[t, l, h].reshape(len(t), width).astype(kind)
        )
    part.token_lists = {int(text_id): _shared(tokens) for text_id, tokens in zip(batch.text_ids, batch.tokens)}
    return _prune(part)


def size(part: Partial) -> int:
    """A Partial's bytes in numpy arrays, about: its histograms and its kept lists (what a merge adds and sorts)."""
    tables = (part.top, part.samples, part.edges, part.views)
    return part.fine.nbytes + part.hist.nbytes + sum(column.nbytes for table in tables for column in table.values())


def merge(first: Partial, second: Partial) -> Partial:
    """The Partial of both parts' texts (disjoint sets of texts), the same whatever the order. Into an empty
    first (no text yet: a run's start) second comes back as it is, which is what merging would give: the
    Partials that reduce, merge_all and from_state make are already in their canonical order."""
    if first.texts == 0 and _kind(first) == _kind(second):
        return second
    return merge_all([first, second], first.shape, first.top_n, first.samples_n, first.scores)


def merge_all(
    parts: list[Partial], shape: tuple[int, int], top_n: int, samples_n: int, scores: int = len(SCORES)
) -> Partial:
    """The merge of any number of Partials at once (one sort of their lists); an empty Partial for none."""
    if any(_kind(part) != (shape, top_n, samples_n, scores) for part in parts):
        raise ValueError("partials of different heads, scores or list sizes do not merge")
    merged = Partial(shape, top_n, samples_n, scores=scores)
    if not parts:
        return merged
    for name in ("texts", "tokens", "truncated"):
        setattr(merged, name, sum(getattr(part, name) for part in parts))
    for name in ("count", "total", "squares", "fine", "hist", "sink_count", "sink_total"):
        setattr(merged, name, sum(getattr(part, name) for part in parts))
    merged.low = np.minimum.reduce([part.low for part in parts])
    merged.high = np.maximum.reduce([part.high for part in parts])
    merged.sinks = Counter()
    for part in parts:  # in place: Counter + Counter copies the tally at every step
        merged.sinks.update(part.sinks)
    merged.top = _keep(_concat([part.top for part in parts]), top_n, descending=True)
    merged.samples = _keep(_concat([part.samples for part in parts]), samples_n, descending=False)
    merged.edges = _keep(_concat([part.edges for part in parts]), top_n, descending=True)
    merged.views = _concat([part.views for part in parts])
    merged.token_lists = {text_id: tokens for part in parts for text_id, tokens in part.token_lists.items()}
    return _prune(merged)


def _kind(part: Partial) -> tuple:
    """What two Partials must share to merge: their heads, list sizes and scores."""
    return part.shape, part.top_n, part.samples_n, part.scores


def _shared(tokens: list[str]) -> list[str]:
    """A text's tokens as the interpreter's one copy of each string: a tokenizer hands every text new string
    objects, and the texts a long run keeps (tens of thousands) would otherwise hold a copy per token."""
    return [sys.intern(token) for token in tokens]


def _concat(tables: list[dict]) -> dict:
    return {name: np.concatenate([table[name] for table in tables]) for name in tables[0]}


def _top_columns(values: np.ndarray, text_ids: np.ndarray, size: int) -> dict:
    """_keep(descending) of a batch's dense values (n texts, groups) float64, NaN where undefined, with text_ids
    (n,): the same rows in the same order, by sorting each group's n texts alone instead of every candidate
    at once (a batch's texts are few; its groups, layers × heads × scores, are many)."""
    count, groups = values.shape
    kept = min(size, count)
    primary = np.where(np.isnan(values), np.inf, -values)  # (n, G): undefined last
    order = np.lexsort((np.broadcast_to(text_ids[:, None], values.shape), primary), axis=0)  # (n, G) per group
    defined = np.minimum((~np.isnan(values)).sum(0), kept)  # (G,) rows each group keeps
    rows = order[:kept].T  # (G, kept): text indices, best first
    chosen = np.arange(kept)[None, :] < defined[:, None]  # (G, kept)
    group = np.broadcast_to(np.arange(groups)[:, None], rows.shape)[chosen]  # group-major, as _keep sorts
    text = rows[chosen]
    return {"group": group, "value": values[text, group], "text_id": text_ids[text]}


def _keep(rows: dict, size: int, descending: bool) -> dict:
    """The first `size` rows of each group in the lists' total order: (group, value desc, text_id) for top
    texts and edges, (group, hash, text_id) for samples. Returned sorted in that order."""
    group, text_id = rows["group"], rows["text_id"]
    # samples: text_hash is a bijection of text_id and a text is in a group once, so (group, hash) is already a
    # total order and the text_id key, which would never decide, is not sorted on
    if descending:
        order = orders.group_value_order(group, rows["value"], text_id)
    else:
        order = orders.group_hash_order(group, rows["hash"])
    chosen = order[orders.run_rank(group[order]) < size]
    return {name: column[chosen] for name, column in rows.items()}


def _prune(part: Partial) -> Partial:
    """Keep only the views and token lists that a kept top text, sample or edge refers to, in a canonical
    order (text_id, group), so that equal Partials have equal arrays."""
    layers_heads = part.shape[0] * part.shape[1]
    scores = part.scores
    wanted = np.concatenate(
        [  # with repeats: a view can serve several rows
            part.top["text_id"] * layers_heads + part.top["group"] // scores,
            part.samples["text_id"] * layers_heads + part.samples["group"] // (scores * FINE),
            part.edges["text_id"] * layers_heads + part.edges["group"],
        ]
    )
    views = part.views
    key = views["text_id"] * layers_heads + views["group"]  # one view per (text, head): unique
    order = np.argsort(key, kind="stable")  # merged parts' views come as sorted runs: a linear merge
    kept = np.zeros(len(key), dtype=bool)  # in key order
    kept[orders.places(key[order], wanted, layers_heads)] = True
    chosen = order[kept]
    part.views = {name: column[chosen] for name, column in views.items()}
    referenced = np.unique(part.views["text_id"]).tolist()  # already sorted: the views are in key order
    part.token_lists = {text_id: part.token_lists[text_id] for text_id in referenced}
    return part


# ---- what the tables show, read off a Partial


def mean_std(part: Partial) -> tuple[np.ndarray, np.ndarray]:
    """(L, H, S) each, NaN where no text defined the score. Population standard deviation."""
    with np.errstate(invalid="ignore", divide="ignore"):
        count = part.count.astype(np.float64)
        mean = part.total / SCALE / count
        # exact in integers, one rounding at the end: n·Σa² − (Σa)² over (n·2^32)²
        spread = part.count.astype(object) * part.squares - part.total.astype(object) ** 2
        variance = np.array([float(value) for value in spread.ravel()]).reshape(spread.shape) / (count * SCALE) ** 2
    return mean, np.sqrt(variance)


def sink_mass(part: Partial) -> np.ndarray:
    """(L, H) the mean over the texts of each text's mean ⟨sink⟩ share (a learned sink logit's share of its rows'
    softmax); NaN where no text's layer has a learned sink."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(part.sink_count > 0, part.sink_total / SCALE / part.sink_count, np.nan)


def quantile(fine: np.ndarray, q: float, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """The q-quantile of fine histograms (..., FINE) -> (...), linear in logit(x) within the bin where it falls
    and kept within the values' [low, high]; NaN where a histogram is empty."""
    total = fine.sum(-1)
    after = np.cumsum(fine, -1)
    target = q * total
    index = np.minimum((after < target[..., None]).sum(-1), FINE - 1)  # the first bin reaching the target
    count = np.take_along_axis(fine, index[..., None], -1)[..., 0]
    before = np.take_along_axis(after, index[..., None], -1)[..., 0] - count
    inside = np.clip((target - before) / np.maximum(count, 1), 0.0, 1.0)
    logit = -LOGIT + (index + inside) * (2 * LOGIT / FINE)
    with np.errstate(invalid="ignore"):
        value = np.minimum(np.maximum(1.0 / (1.0 + np.exp(-logit)), low), high)
    return np.where(total > 0, value, np.nan)


def decile_samples(part: Partial, group: int, deciles: int = 10) -> list[np.ndarray]:
    """Per decile (0 = the lowest tenth) of (l·H + h)·S + s = `group`: indices into part.samples of its
    samples, smallest hash first (at most part.samples_n)."""
    rows, groups, decile, _ = all_decile_samples(part, deciles)
    return [rows[(groups == group) & (decile == d)] for d in range(deciles)]


def all_decile_samples(part: Partial, deciles: int = 10) -> tuple[np.ndarray, ...]:
    """Every group's decile samples at once: (rows into part.samples, group, decile, rank), each (n,), sorted by
    (group, decile, rank); rank 0 is the smallest hash (then text_id) of its group's decile."""
    samples = part.samples
    cell = samples["group"]  # group · FINE + bin
    group, bins = cell // FINE, cell % FINE
    fine = part.fine.reshape(-1, FINE)  # (groups, FINE)
    total = fine.sum(1)  # (groups,)
    before = np.cumsum(fine, 1) - fine  # (groups, FINE): the rank of each bin's first text
    place = orders.place_in_cell(cell, samples["value"], samples["text_id"])  # i: the row's place in its bin by value
    kept = np.bincount(cell, minlength=fine.size)[cell]  # m of each row's bin
    rank = before[group, bins] + (place + 0.5) * fine[group, bins] / np.maximum(kept, 1)
    decile = np.minimum((rank * deciles // np.maximum(total[group], 1)).astype(np.int64), deciles - 1)
    # by (group, decile, hash): the hash is one-to-one with text_id, so it decides alone (as in _keep)
    rows = orders.group_hash_order(group * deciles + decile, samples["hash"])
    group, decile = group[rows], decile[rows]
    rank = orders.run_rank(group * deciles + decile)
    chosen = rank < part.samples_n
    return rows[chosen], group[chosen], decile[chosen], rank[chosen]


def sink_key(part: Partial, layer: int, head: int) -> tuple[int, str, int] | None:
    """(position, token, texts) of the key this head most often sinks on (ties: the earlier position, then
    token), None if it never does."""
    return sink_keys(part).get((layer, head))


def sink_keys(part: Partial) -> dict[tuple[int, int], tuple[int, str, int]]:
    """sink_key of every (layer index, head index) that sinks, in one pass over the tally."""
    best: dict[tuple[int, int], tuple[int, str, int]] = {}
    for (layer, head, position, token), texts in part.sinks.items():
        known = best.get((layer, head))
        if known is None or (-texts, position, token) < (-known[2], known[0], known[1]):
            best[layer, head] = (position, token, texts)
    return best


# ---- a Partial as plain arrays and JSON (a part's files in a store; what a worker sends back)


def to_state(part: Partial) -> tuple[dict[str, np.ndarray], dict]:
    """(arrays for numpy.savez, without pickles; a JSON-able dict): from_state gives the same Partial back."""
    arrays = {name: getattr(part, name) for name in ("count", "total", "low", "high", "hist", "fine")}
    arrays["squares"] = np.array([str(value) for value in part.squares.ravel()])  # Python ints past int64
    if part.sink_count.any():  # a model with learned sinks; others' parts are written as before
        arrays.update(sink_count=part.sink_count, sink_total=part.sink_total)
    for table in ("top", "samples", "edges", "views"):
        arrays.update({f"{table}.{column}": values for column, values in getattr(part, table).items()})
    meta = {
        "shape": list(part.shape),
        "top_n": part.top_n,
        "samples_n": part.samples_n,
        "texts": part.texts,
        "tokens": part.tokens,
        "truncated": part.truncated,
        "scores": part.scores,
        "sinks": [[*key, texts] for key, texts in sorted(part.sinks.items())],
        "token_lists": [[text_id, tokens] for text_id, tokens in part.token_lists.items()],
    }
    return arrays, meta


def from_state(arrays, meta: dict) -> Partial:
    shape = tuple(meta["shape"])
    part = Partial(
        shape,
        meta["top_n"],
        meta["samples_n"],
        texts=meta["texts"],
        tokens=meta["tokens"],
        truncated=meta["truncated"],
        scores=meta.get("scores", len(SCORES)),  # a part written before plugin scores: the built-in ones
    )
    for name in ("count", "total", "low", "high", "hist", "fine"):
        setattr(part, name, np.array(arrays[name]))
    part.squares = np.array([int(value) for value in arrays["squares"]], dtype=object).reshape(part.count.shape)
    if "sink_count" in arrays:  # else no learned sink: the zeros Partial starts with
        part.sink_count, part.sink_total = np.array(arrays["sink_count"]), np.array(arrays["sink_total"])
    for table, fields in (
        ("top", TOP_FIELDS),
        ("samples", SAMPLE_FIELDS),
        ("edges", TOP_FIELDS),
        ("views", VIEW_FIELDS),
    ):
        setattr(
            part, table, {column: np.array(arrays[f"{table}.{column}"]) for column in fields if column not in VIEW_FILL}
        )
    views = part.views
    for column, fill in VIEW_FILL.items():  # a part written before the per-score rows: every example shows the edge
        name = f"views.{column}"
        views[column] = (
            np.array(arrays[name])
            if name in arrays
            else np.full(
                (len(views["text_id"]), SCORE_VIEW_FIELDS[column][1]), fill, dtype=SCORE_VIEW_FIELDS[column][0]
            )
        )
    part.sinks = Counter(
        {(layer, head, position, token): texts for layer, head, position, token, texts in meta["sinks"]}
    )
    part.token_lists = {text_id: _shared(tokens) for text_id, tokens in meta["token_lists"]}
    return part
