"""The corpus store's tables: the one contract between the code that writes a store (`attn heads --store`)
and everything that reads one (`attn heads show`, the dashboard page, `attn.open_store`, DuckDB, pandas).

A store is a directory of Parquet files, each one table, readable as it is:

    DIR/run.parquet        one row: what ran (model, options, corpus, counts, attn's version)
    DIR/heads.parquet      one row per (layer, head, score): mean, spread, quantiles, histogram
    DIR/examples.parquet   one row per example: a head's top texts and decile samples per score, its top edges
    DIR/texts.parquet      one row per (text, layer, head) with every score (only with --per-text)
    DIR/parts/             the writer's own partial results, one folder per part (readers never look inside)

Sparse by design: no T×T matrix is stored; an example keeps a window of its text's tokens and the
few weights it highlights, enough for a dashboard to draw it without the model.

Conventions every table shares: positions are 0-based token positions in the whole text (special
tokens included, as `attn inspect` numbers them); `text_id` is the 0-based index of the text in the
corpus in the order it is read (the first line, row or record is 0), whatever order it was scored in;
scores are named as in math/head_scores.SCORES and all lie in [0, 1].
"""

from __future__ import annotations

import pyarrow as pa

STORE_VERSION = 1  # bump when a column changes meaning; readers refuse a store newer than they know
BINS = 20  # histogram bins: equal width over [0, 1], the last one closed ([0.95, 1.0])
DECILES = 10

RUN, HEADS, EXAMPLES, TEXTS = "run.parquet", "heads.parquet", "examples.parquet", "texts.parquet"
PARTS = "parts"

# One row.
RUN_SCHEMA = pa.schema(
    [
        ("store_version", pa.int32()),
        ("attn_version", pa.string()),
        (
            "model",
            pa.string(),
        ),  # JSON of ModelInfo: name, architecture, layers, heads, kv_heads, head_dim, causal, max_positions
        ("revision", pa.string()),  # the checkpoint's revision or commit, null where unknown
        ("tokenizer", pa.string()),  # the tokenizer's name or path, null for a model without one (the toy)
        ("device", pa.string()),
        ("dtype", pa.string()),
        (
            "options",
            pa.string(),
        ),  # JSON: batch_size, truncate, limit, top, samples, context, column, per_text, part_texts, layers, heads
        ("corpus", pa.string()),  # the corpus path as given, "probe" or "arguments"
        ("corpus_format", pa.string()),  # "lines", "jsonl", "parquet", "arrow", "datasets", "probe", "arguments"
        ("texts", pa.int64()),  # texts scored
        ("tokens", pa.int64()),  # tokens in them, special tokens included
        ("truncated", pa.int64()),  # texts cut to the model's positions (--truncate)
        ("parts", pa.int32()),  # complete parts merged into these tables
        ("complete", pa.bool_()),  # False: the run stopped early; `--resume` continues it
        ("scores", pa.list_(pa.string())),  # the score names, in their order
        ("thresholds", pa.string()),  # JSON: {"label", "broad", "sink_epsilon"} as in `attn heads --json`
        ("bins", pa.int32()),  # BINS when written
    ]
)

# One row per (layer, head, score); a head's label and sink key repeat on its rows.
HEADS_SCHEMA = pa.schema(
    [
        ("layer", pa.int32()),
        ("head", pa.int32()),
        ("kv_head", pa.int32()),
        ("score", pa.string()),
        ("count", pa.int64()),  # texts where the score is defined
        ("mean", pa.float64()),  # null where count is 0
        ("std", pa.float64()),  # population standard deviation
        ("min", pa.float64()),
        ("max", pa.float64()),
        ("q05", pa.float64()),  # quantiles read off the histogram (linear within a bin: off by at most 1/BINS)
        ("q25", pa.float64()),
        ("q50", pa.float64()),
        ("q75", pa.float64()),
        ("q95", pa.float64()),
        ("hist", pa.list_(pa.int64())),  # BINS counts of texts over [0, 1]
        ("label", pa.string()),  # the head's label (a score name or "mixed"), as `attn heads` gives it
        ("sink_position", pa.int32()),  # the head's sink key (null if it never sinks)
        ("sink_token", pa.string()),
        ("sink_texts", pa.int64()),  # texts in which that key was the sink key (0 if none)
    ]
)

# One row per example. kind "top": the texts where `score` is highest (rank 0 = highest);
# "decile": texts sampled from `decile` (0 = the lowest tenth) of the score's distribution;
# "edge": the head's strongest single weights anywhere in the corpus, its sink key excluded (score null).
EXAMPLES_SCHEMA = pa.schema(
    [
        ("layer", pa.int32()),
        ("head", pa.int32()),
        ("kind", pa.string()),  # "top" | "decile" | "edge"
        ("score", pa.string()),  # the score the example is for; null for kind "edge"
        ("decile", pa.int32()),  # 0–9 for kind "decile", else null
        ("rank", pa.int32()),  # 0-based order within (layer, head, kind, score, decile)
        ("text_id", pa.int64()),
        ("value", pa.float64()),  # the text's score, or the edge's weight
        ("length", pa.int32()),  # tokens in the whole text
        ("window_start", pa.int32()),  # position in the text of tokens[0]
        (
            "tokens",
            pa.list_(pa.string()),
        ),  # a window of the text's tokens covering the query and its keys, with context
        # the highlighted query row: for an edge, the edge's; for a top text or decile sample of a weight-share
        # score, the row with the most weight on what the score counts (else the text's strongest edge's row)
        ("query", pa.int32()),
        (
            "keys",
            pa.list_(pa.int32()),
        ),  # the query row's most attended keys, strongest first; first the edge's key, or the score's target
        ("weights", pa.list_(pa.float32())),  # their weights, same order
    ]
)


def texts_schema(scores: tuple[str, ...]) -> pa.Schema:
    """One row per (text, layer, head), one float64 column per score (null where undefined)."""
    return pa.schema(
        [
            ("text_id", pa.int64()),
            ("length", pa.int32()),
            ("layer", pa.int32()),
            ("head", pa.int32()),
            *[(name, pa.float64()) for name in scores],
        ]
    )
