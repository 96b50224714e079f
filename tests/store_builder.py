"""A realistic corpus store written straight from attn_cli/data/store_schema.py, for the reader's tests.

The reader (`attn.open_store`, `attn heads show`) must not depend on the writer (`attn heads --store`), so
this builds what the writer would write for a MiniLM-shaped model (6 layers × 12 heads, all nine scores)
over a small made-up corpus: per-text scores drawn around each head's mean, the summaries computed from
them (count, mean, std, min, max, quantiles, histogram), each head's top texts and decile samples per
score and its top edges, each with a window of WordPiece-like tokens. Two heads are planted:

    0.2  previous-token: every row puts ~0.97 on the token before it
    1.4  induction: in texts that repeat a phrase, the second copy's tokens attend to the token after
         their earlier copy (".. the cat sat on .. the [cat] -> sat")

Everything is seeded: the same arguments give the same store.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from attn_cli.data import store_schema as schema
from attn_cli.math.head_scores import SCORES, label

LAYERS, HEADS = 6, 12
MODEL = {
    "name": "minilm",
    "architecture": "bert",
    "layers": LAYERS,
    "heads": HEADS,
    "kv_heads": HEADS,
    "head_dim": 32,
    "causal": False,
    "max_positions": 512,
    "no_attention_layers": [],
    "attention_note": None,
}
PREVIOUS, INDUCTION = (0, 2), (1, 4)
WORDS = (
    "the cat sat on mat dog ran to park a bird flew over house she read book in garden he wrote letter "
    "friend we walked along river after rain children played near school old man fed ducks"
).split()
PUNCTUATION = (",", ".", "?", "!")


@dataclass
class Built:
    path: Path
    texts: list[list[str]]  # each text's tokens, [CLS] … [SEP]
    values: dict  # (layer, head, score) → per-text values (None where undefined)
    means: dict  # (layer, head) → {score: mean or None}


def build_store(
    path: Path,
    *,
    texts: int = 48,
    top: int = 5,
    samples: int = 2,
    context: int = 8,
    complete: bool = True,
    per_text: bool = True,
    seed: int = 0,
    hostile: str | None = None,
    store_version: int = schema.STORE_VERSION,
    probe: dict | None = None,
) -> Built:
    """Write a store to `path` (created). hostile: a token planted in every text (an HTML page must show it
    as text). Returns what was written, for tests to compare against."""
    rng = random.Random(seed)
    path.mkdir(parents=True, exist_ok=True)
    corpus = [_text(rng, n, hostile) for n in range(texts)]
    values = {
        (layer, head, score): _values(rng, corpus, layer, head, score)
        for layer in range(LAYERS)
        for head in range(HEADS)
        for score in SCORES
    }
    means = {}
    head_rows, example_rows = [], []
    for layer in range(LAYERS):
        for head in range(HEADS):
            head_means = {score: _mean(values[layer, head, score]) for score in SCORES}
            means[layer, head] = head_means
            sink = (0, "[CLS]", sum(1 for v in values[layer, head, "sink"] if v is not None and v > 0.3))
            head_label = label(list(head_means.values()))
            for score in SCORES:
                head_rows.append(_summary(layer, head, score, values[layer, head, score], head_label, sink))
                example_rows += _score_examples(
                    rng, corpus, layer, head, score, values[layer, head, score], top, samples, context
                )
            example_rows += _edges(rng, corpus, layer, head, top, context)
    tokens = sum(len(text) for text in corpus)
    run = {
        "store_version": store_version,
        "attn_version": "0.1.0",
        "model": json.dumps(MODEL),
        "revision": None,
        "tokenizer": "minilm",
        "device": "cpu",
        "dtype": "float32",
        "options": json.dumps(
            {
                "batch_size": 32,
                "truncate": False,
                "limit": None,
                "top": top,
                "samples": samples,
                "context": context,
                "column": "text",
                "per_text": per_text,
                "part_texts": 1000,
                "layers": "all",
                "heads": "all",
                "probe": probe,
            }
        ),
        "corpus": "probe" if probe else "corpus.txt",
        "corpus_format": "probe" if probe else "lines",
        "texts": texts,
        "tokens": tokens,
        "truncated": 0,
        "parts": 1,
        "complete": complete,
        "scores": list(SCORES),
        "thresholds": json.dumps({"label": 0.5, "broad": 0.85, "sink_epsilon": 0.3}),
        "bins": schema.BINS,
    }
    write(path / schema.RUN, [run], schema.RUN_SCHEMA)
    write(path / schema.HEADS, head_rows, schema.HEADS_SCHEMA)
    write(path / schema.EXAMPLES, example_rows, schema.EXAMPLES_SCHEMA)
    if per_text:
        rows = [
            {
                "text_id": t,
                "length": len(corpus[t]),
                "layer": layer,
                "head": head,
                **{score: values[layer, head, score][t] for score in SCORES},
            }
            for t in range(texts)
            for layer in range(LAYERS)
            for head in range(HEADS)
        ]
        write(path / schema.TEXTS, rows, schema.texts_schema(SCORES))
    return Built(path, corpus, values, means)


def write(path: Path, rows: list[dict], table_schema: pa.Schema) -> None:
    pq.write_table(pa.Table.from_pylist(rows, schema=table_schema), path)


# -- the corpus ---------------------------------------------------------------------------------------


def _text(rng: random.Random, n: int, hostile: str | None) -> list[str]:
    """[CLS] words … [SEP]; every third text repeats a phrase (induction has something to find)."""
    words = [rng.choice(WORDS) for _ in range(rng.randint(8, 16))]
    if n % 3 == 0:
        phrase = ["the", "cat", "sat", "on", "the", "mat"][: rng.randint(3, 6)]
        words = words[:4] + phrase + words[4:8] + phrase + words[8:]
    if hostile is not None:
        words.insert(2, hostile)
    words.insert(rng.randint(1, len(words) - 1), rng.choice(PUNCTUATION))
    return ["[CLS]", *words, ".", "[SEP]"]


def _repeats(tokens: list[str]) -> bool:
    return len(set(tokens[1:-1])) < len(tokens) - 2


# -- per-text scores and their summaries ----------------------------------------------------------------


def _centre(layer: int, head: int, score: str) -> float:
    """Each head's typical value of a score: planted heads high on theirs, sinks on [CLS] from layer 1."""
    if (layer, head) == PREVIOUS:
        return 0.97 if score == "previous_token" else 0.12
    if (layer, head) == INDUCTION and score in ("induction", "duplicate_token"):
        return 0.78 if score == "induction" else 0.35
    if score == "broad":
        return 0.9 if layer == 0 else 0.35
    if score in ("first_token", "sink"):
        return 0.1 if layer == 0 else 0.45 + 0.04 * ((layer * 7 + head) % 10)
    return 0.04 + 0.02 * ((layer + head) % 5)


def _values(rng: random.Random, corpus, layer: int, head: int, score: str) -> list[float | None]:
    if score == "retrieval":  # defined only on --probe retrieval's needle: never in a corpus (and no draw)
        return [None] * len(corpus)
    centre = _centre(layer, head, score)
    spread = 40.0 if centre > 0.9 else 12.0
    out = []
    for tokens in corpus:
        if score in ("duplicate_token", "induction") and not _repeats(tokens):
            out.append(None)  # no repeated token: undefined, as attn heads leaves it
            continue
        out.append(round(rng.betavariate(centre * spread + 0.5, (1 - centre) * spread + 0.5), 6))
    return out


def _mean(values) -> float | None:
    defined = [v for v in values if v is not None]
    return float(np.mean(defined)) if defined else None


def _summary(layer, head, score, values, head_label, sink) -> dict:
    defined = np.array([v for v in values if v is not None], dtype=np.float64)
    hist = np.histogram(defined, bins=schema.BINS, range=(0.0, 1.0))[0].tolist()
    row = {
        "layer": layer,
        "head": head,
        "kv_head": head,
        "score": score,
        "count": len(defined),
        "hist": hist,
        "label": head_label,
        "sink_position": sink[0] if sink[2] else None,
        "sink_token": sink[1] if sink[2] else None,
        "sink_texts": sink[2],
    }
    if len(defined):
        row.update(
            mean=float(defined.mean()),
            std=float(defined.std()),
            min=float(defined.min()),
            max=float(defined.max()),
            **{f"q{q:02d}": float(np.quantile(defined, q / 100)) for q in (5, 25, 50, 75, 95)},
        )
    return row


# -- examples -----------------------------------------------------------------------------------------


def _score_examples(rng, corpus, layer, head, score, values, top, samples, context) -> list[dict]:
    defined = sorted(((v, t) for t, v in enumerate(values) if v is not None), key=lambda p: (-p[0], p[1]))
    rows = [
        _example(rng, corpus, layer, head, "top", score, None, rank, t, v, context)
        for rank, (v, t) in enumerate(defined[:top])
    ]
    ascending = defined[::-1]
    for decile in range(schema.DECILES):
        tenth = ascending[len(ascending) * decile // 10 : len(ascending) * (decile + 1) // 10]
        for rank, (v, t) in enumerate(rng.sample(tenth, min(samples, len(tenth)))):
            rows.append(_example(rng, corpus, layer, head, "decile", score, decile, rank, t, v, context))
    return rows


def _edges(rng, corpus, layer, head, top, context) -> list[dict]:
    picks = sorted(
        ((round(rng.uniform(0.5, 0.99), 4), rng.randrange(len(corpus))) for _ in range(top)), key=lambda p: -p[0]
    )
    return [
        _example(rng, corpus, layer, head, "edge", None, None, rank, t, v, context) for rank, (v, t) in enumerate(picks)
    ]


def _example(rng, corpus, layer, head, kind, score, decile, rank, text_id, value, context) -> dict:
    tokens = corpus[text_id]
    query, keys = _focus(rng, tokens, layer, head, score)
    strongest = value if kind == "edge" else min(0.99, max(value, 0.3))
    rest = (1 - strongest) * np.array([0.6, 0.3])
    weights = [strongest, *rest.tolist()][: len(keys)]
    start = max(0, min([query, *keys]) - context)
    stop = min(len(tokens), max([query, *keys]) + context + 1)
    return {
        "layer": layer,
        "head": head,
        "kind": kind,
        "score": score,
        "decile": decile,
        "rank": rank,
        "text_id": text_id,
        "value": value,
        "length": len(tokens),
        "window_start": start,
        "tokens": tokens[start:stop],
        "query": query,
        "keys": keys,
        "weights": weights,
    }


def _focus(rng, tokens, layer, head, score) -> tuple[int, list[int]]:
    """The highlighted query and its three most attended keys, strongest first, as the head would pick."""
    n = len(tokens)
    if (layer, head) == INDUCTION and score in ("induction", None) and _repeats(tokens):
        for query in range(n - 2, 0, -1):  # the second copy of a token; its key: the token after the first
            earlier = [j for j in range(1, query) if tokens[j] == tokens[query]]
            if earlier and earlier[0] + 1 < query:
                return query, _three(earlier[0] + 1, [query, earlier[0]], n)
    query = rng.randrange(2, n - 1)
    if (layer, head) == PREVIOUS or score == "previous_token":
        return query, _three(query - 1, [query, 0], n)
    if score in ("first_token", "sink"):
        return query, _three(0, [query, query - 1], n)
    return query, _three(rng.randrange(1, n - 1), [query, 0, n - 1], n)


def _three(first: int, others: list[int], n: int) -> list[int]:
    keys = [first]
    for key in [*others, *range(n)]:
        if key not in keys and 0 <= key < n:
            keys.append(key)
        if len(keys) == 3:
            return keys
    return keys
