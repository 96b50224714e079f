"""`attn heads --store DIR`: the corpus store's writer (the tables are data/store_schema.py's contract).

DIR/parts/NNNNNN/ holds one complete part: its Partial (partial.npz, partial.json: math/partials.to_state),
its per-text rows (texts.parquet, with --per-text) and the SHA-256 of its texts. A part is written in a
temporary folder beside it (NNNNNN.tmp-XXXXXXXX) and renamed when complete, so a part folder is whole or
absent whatever stops the process. DIR/parts/run.json says which run the parts belong to (model,
corpus, options): `--resume` refuses a store of another run, skips the complete parts and scores the
rest, and gives the same tables as an uninterrupted run (written deterministically: no timestamps, rows
in a fixed order). The tables are rewritten (atomically) as parts complete, run.complete False until the
last: run and heads after every part, examples at most once a minute and at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from attn_cli.analyses import store_files
from attn_cli.analyses.store_files import RUN_FILE, part_hint, read_part_file, run_file_hint
from attn_cli.backends.capabilities import Provenance, kv_groups, supports
from attn_cli.data import arrow_columns as arrow
from attn_cli.data import store_schema as schema
from attn_cli.math import partials
from attn_cli.math.head_scores import BROAD_THRESHOLD, LABEL_THRESHOLD, SCORES, SINK_EPSILON, label
from attn_cli.plumbing import interrupts
from attn_cli.plumbing.atomic import TEMP_MARK, atomic_path
from attn_cli.plumbing.errors import AttnError, BadInput

CONTEXT = 8  # tokens of context either side of an example's query and keys
QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)
EXAMPLES_EVERY = 60.0  # seconds between rewrites of examples.parquet during a run (the tables' slow one)


def check_store(path: Path, resume: bool) -> None:
    """Before the model loads: DIR is absent, an empty directory, or (with --resume) a store."""
    path = Path(path)
    if not path.exists():
        return
    if not path.is_dir():
        raise BadInput(f"--store {path} is not a directory", "name a new or empty directory")
    if not any(path.iterdir()):
        return
    if not resume:
        raise BadInput(
            f"--store {path} is not empty", "add --resume to continue the store in it, or name a new or empty directory"
        )
    if not (path / schema.PARTS / RUN_FILE).is_file():
        raise BadInput(
            f"--store {path} is not an attn store (no {schema.PARTS}/{RUN_FILE})",
            "name a new or empty directory: nothing in it is touched",
        )
    store_files.check_unlocked(path / schema.PARTS, path)  # another run writing it: said before the model loads


class StoreWriter:
    """The keeper of analyses/fold.py for one run: loads complete parts, writes new ones and the tables."""

    def __init__(
        self,
        path: Path,
        resume: bool,
        identity: dict,
        run: dict,
        layers: list[int],
        heads: list[int],
        info,
        names: tuple[str, ...] = SCORES,
        groups: dict[int, int] | None = None,
    ):
        check_store(path, resume)
        self.path, self.parts = Path(path), Path(path) / schema.PARTS
        self.identity, self.run, self.layers, self.heads, self.info = identity, run, layers, heads, info
        self.names = names  # the scores: the built-in ones, then the plugins' (data/registry.score_names)
        self.groups = groups or {}  # layer -> query heads per kv head, where a layer has its own (heads.kv_groups)
        self.per_text = identity["options"]["per_text"]
        self.heads_written: partials.Partial | None = None  # the Partial heads.parquet was last written from
        self.examples_written = time.monotonic()  # a run shorter than EXAMPLES_EVERY writes them once, at the end
        self.context = identity["options"]["context"]
        # what this run made, so that a corpus with no text leaves the directory as it found it
        self.made = [p for p in (self.path, self.parts) if not p.exists()]
        self.written = 0  # parts this run wrote: none, and a failed run takes back what it made
        try:
            self.parts.mkdir(parents=True, exist_ok=True)
            # one writer at a time, from before anything in parts/ is read or removed (its temporaries would be)
            self.lock = store_files.StoreLock(self.parts, self.path)
        except OSError as error:
            self.abandon()
            raise AttnError(f"cannot write --store {path}: {error.strerror or error}") from None
        except AttnError:
            self.abandon()
            raise
        try:
            self._identify(self.parts / RUN_FILE, identity)
        except BaseException:
            self.abandon()  # a store being resumed made nothing: only the lock goes
            raise

    def _identify(self, known: Path, identity: dict) -> None:
        """A store being resumed must hold this run (parts/run.json); a new one is given its run.json."""
        if not known.is_file():
            with atomic_path(known, "--store") as temp:
                temp.write_text(json.dumps(identity, indent=1, sort_keys=True))
            self.made.append(known)
            return
        stored = read_part_file(known, run_file_hint(self.path), store_files.RUN_KEYS)
        options = stored["options"]
        if not isinstance(options, dict):
            raise store_files.damaged(known, "its options are not an object", run_file_hint(self.path))
        differ = [
            key
            for key in sorted(set(stored) | set(identity))
            if key != "options" and stored.get(key) != identity.get(key)
        ]
        differ += [
            key
            for key in sorted(set(options) | set(identity["options"]))
            if options.get(key) != identity["options"].get(key)
        ]
        extra = ""
        if "scores" in differ:  # a plugin's head scores: which, so the plugin missing on one side can be named
            ours, theirs = identity["options"].get("scores", list(SCORES)), options.get("scores", list(SCORES))
            sides = [
                f"{whose} {', '.join(names)}"
                for whose, names in (
                    ("the store's", [name for name in theirs if name not in ours]),
                    ("this run's", [name for name in ours if name not in theirs]),
                )
                if names
            ]
            extra = f" ({' and '.join(sides)}: a plugin's head score, installed for one run only)"
        if differ:
            raise BadInput(
                f"--store {self.path} holds another run: its {', '.join(differ)} differ{extra}",
                "resume with the same model, corpus and options, or name a new directory",
            )
        self._remove_temporaries()

    def abandon(self) -> None:
        """Take back what this run made (its run.json, parts/, DIR) when it wrote no part (nothing scored, or
        the corpus failed on its first part); a store being resumed keeps everything."""
        self.close()
        for path in reversed(self.made):  # run.json, then parts/, then DIR
            if not path.is_dir():
                path.unlink(missing_ok=True)
            elif not any(path.iterdir()):
                path.rmdir()

    def close(self) -> None:
        """The run is over, whatever its end: the lock goes."""
        lock = getattr(self, "lock", None)
        if lock is not None:
            lock.close()

    def _remove_temporaries(self) -> None:
        """Part folders a killed run left half written (our own NNNNNN.tmp-* names only)."""
        for entry in self.parts.iterdir():
            if TEMP_MARK in entry.name and entry.name.split(TEMP_MARK)[0].isdigit():
                shutil.rmtree(entry, ignore_errors=True)

    def _folder(self, index: int) -> Path:
        return self.parts / f"{index:06d}"

    def load(self, index: int, digest: str) -> partials.Partial | None:
        folder = self._folder(index)
        if not (folder / "partial.json").is_file():
            return None
        hint = part_hint(folder)
        meta = read_part_file(folder / "partial.json", hint, store_files.PART_KEYS)
        if meta["digest"] != digest:
            raise BadInput(
                f"--store {self.path}: the corpus is not the one part {index} was scored on",
                "resume with the same corpus, or name a new directory",
            )
        arrays = read_part_file(folder / "partial.npz", hint)
        try:
            part = partials.from_state(arrays, meta["partial"])
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as error:
            raise store_files.damaged(
                folder, f"its partial does not load: {type(error).__name__} {error}", hint
            ) from None
        shape = (len(self.layers), len(self.heads), len(self.names))
        if part.shape != shape[:2] or any(
            getattr(part, name).shape[:3] != shape for name in ("count", "total", "low", "high", "hist", "fine")
        ):
            raise store_files.damaged(
                folder, f"its arrays are not of {shape[0]} layers, {shape[1]} heads and {shape[2]} scores", hint
            )
        if self.per_text:
            read_part_file(folder / schema.TEXTS, hint)  # read again at the end: fail now, not then
        return part

    def write(self, index: int, part: partials.Partial, rows: list[dict], digest: str) -> None:
        folder = self._folder(index)
        with interrupts.deferred():  # created and registered for removal as one step
            temp = Path(tempfile.mkdtemp(prefix=folder.name + TEMP_MARK, dir=self.parts))
        try:
            arrays, meta = partials.to_state(part)
            np.savez(temp / "partial.npz", **arrays)  # type: ignore[arg-type]  # numpy's stub: allow_pickle among **kwds
            if self.per_text:
                _write_parquet(self._text_rows(rows), temp / schema.TEXTS)
            (temp / "partial.json").write_text(json.dumps({"digest": digest, "partial": meta}))
            for name in os.listdir(temp):
                _fsync(temp / name)
            with interrupts.deferred():
                os.replace(temp, folder)
            self.written += 1
        finally:
            with interrupts.deferred():
                shutil.rmtree(temp, ignore_errors=True)

    def progress(self, merged: partials.Partial, parts: int) -> None:
        """After each part: run and heads; examples (the slow table) at most every EXAMPLES_EVERY seconds."""
        due = time.monotonic() - self.examples_written >= EXAMPLES_EVERY
        self._tables(merged, parts, complete=False, examples=due)

    def finish(self, merged: partials.Partial, parts: int) -> None:
        if self.per_text:
            self._texts_table(parts)
        self._tables(merged, parts, complete=True, examples=True)

    def _tables(self, merged: partials.Partial, parts: int, complete: bool, examples: bool) -> None:
        if examples:
            _write(example_rows(merged, self.layers, self.heads, self.context, self.names), self.path / schema.EXAMPLES)
            self.examples_written = time.monotonic()
        if self.heads_written is not merged:  # finish() after the last part's progress(): the same table
            _write(
                arrow.from_rows(
                    heads_rows(merged, self.layers, self.heads, self.info, self.names, self.groups), schema.HEADS_SCHEMA
                ),
                self.path / schema.HEADS,
            )
            self.heads_written = merged
        run = {
            **self.run,
            "texts": merged.texts,
            "tokens": merged.tokens,
            "truncated": merged.truncated,
            "parts": parts,
            "complete": complete,
        }
        _write(arrow.from_rows([run], schema.RUN_SCHEMA), self.path / schema.RUN)  # last: says done

    def _text_rows(self, rows: list[dict]):
        import pyarrow as pa

        table = {name: np.concatenate([batch[name] for batch in rows]) for name in rows[0]} if rows else None
        if table is None:
            return arrow.from_rows([], schema.texts_schema(self.names))
        order = np.lexsort((table["head_index"], table["layer_index"], table["text_id"]))
        columns = [
            arrow.numbers(table["text_id"][order], pa.int64()),
            arrow.numbers(table["length"][order], pa.int32()),
            arrow.numbers(np.array(self.layers)[table["layer_index"][order]], pa.int32()),
            arrow.numbers(np.array(self.heads)[table["head_index"][order]], pa.int32()),
            *[
                arrow.numbers(values, pa.float64(), np.isnan(values))  # NaN -> null
                for values in (table[name][order] for name in self.names)
            ],
        ]
        return pa.Table.from_arrays(columns, schema=schema.texts_schema(self.names))

    def _texts_table(self, parts: int) -> None:
        """DIR/texts.parquet: the parts' rows in part order (so by text_id), one part in memory at a time."""
        import pyarrow.parquet as pq

        with atomic_path(self.path / schema.TEXTS, "--store") as temp:
            with pq.ParquetWriter(temp, schema.texts_schema(self.names)) as writer:
                for index in range(parts):
                    # ParquetFile.read, not read_table: read_table imports pandas
                    folder = self._folder(index)
                    writer.write_table(read_part_file(folder / schema.TEXTS, part_hint(folder)))


def _write(table, path: Path) -> None:
    with atomic_path(path, "--store") as temp:
        _write_parquet(table, temp)


def _write_parquet(table, path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(table, path)
    # Arrow's allocator keeps what the writer freed (30-40 MB after the examples table), which a long run's
    # next part would then pile its own peak on: give it back, so peak memory does not grow with the corpus
    pa.default_memory_pool().release_unused()


def _fsync(path: Path) -> None:
    with open(path, "rb+") as handle:
        os.fsync(handle.fileno())


# ---- the tables' rows, read off the merged Partial


def run_row(
    *,
    info,
    device: str,
    dtype: str,
    revision,
    tokenizer,
    options: dict,
    corpus: str,
    corpus_format: str,
    version: str,
    names: tuple[str, ...] = SCORES,
) -> dict:
    """The run table's row but for its counts (texts, tokens, truncated, parts, complete)."""
    return {
        "store_version": schema.STORE_VERSION,
        "attn_version": version,
        "model": json.dumps(asdict(info)),
        "revision": revision,
        "tokenizer": tokenizer,
        "device": device,
        "dtype": dtype,
        "options": json.dumps(options, sort_keys=True),
        "corpus": corpus,
        "corpus_format": corpus_format,
        "scores": list(names),
        "bins": schema.BINS,
        "thresholds": json.dumps({"label": LABEL_THRESHOLD, "broad": BROAD_THRESHOLD, "sink_epsilon": SINK_EPSILON}),
    }


def heads_rows(
    merged: partials.Partial,
    layers: list[int],
    heads: list[int],
    info,
    names: tuple[str, ...] = SCORES,
    groups: dict[int, int] | None = None,
) -> list[dict]:
    mean, std = partials.mean_std(merged)
    defined = merged.count > 0  # (L, H, S)
    quantiles = {
        f"q{round(q * 100):02d}": partials.quantile(merged.fine, q, merged.low, merged.high) for q in QUANTILES
    }
    columns = {"mean": mean, "std": std, "min": merged.low, "max": merged.high, **quantiles}
    columns = {name: np.where(defined, values, np.nan).tolist() for name, values in columns.items()}
    count, hist = merged.count.tolist(), merged.hist.tolist()
    rows, sinks = [], partials.sink_keys(merged)
    for li, layer in enumerate(layers):
        for hi, head in enumerate(heads):
            sink = sinks.get((li, hi))
            shared = {
                "layer": layer,
                "head": head,
                "kv_head": info.kv_head_of(head, (groups or {}).get(layer)),
                "label": label(columns["mean"][li][hi]),
                "sink_position": None if sink is None else sink[0],
                "sink_token": None if sink is None else sink[1],
                "sink_texts": 0 if sink is None else sink[2],
            }
            for si, score in enumerate(names):
                rows.append(
                    {
                        **shared,
                        "score": score,
                        "count": count[li][hi][si],
                        "hist": hist[li][hi][si],
                        **{name: _null(values[li][hi][si]) for name, values in columns.items()},
                    }
                )
    return rows


def _null(value: float) -> float | None:
    return None if value != value else value  # NaN: no text defined the score


def example_rows(
    merged: partials.Partial, layers: list[int], heads: list[int], context: int, names: tuple[str, ...] = SCORES
):
    """The examples table (store_schema.EXAMPLES_SCHEMA), per head: each score's top texts then its decile
    samples, score by score, then the head's top edges. Built column by column (tens of thousands of rows)."""
    import pyarrow as pa

    scores, pairs = len(names), len(layers) * len(heads)
    top, edges, samples = merged.top, merged.edges, merged.samples
    # each example: (pair, score index, kind 0 top / 1 decile / 2 edge, decile, rank), value, text_id
    parts = [
        _listed(top["group"] // scores, top["group"] % scores, 0, -1, top),
        _listed(edges["group"], np.full(len(edges["group"]), scores), 2, -1, edges),
    ]
    chosen, group, decile, rank = partials.all_decile_samples(merged, schema.DECILES)
    parts.append(
        (
            group // scores,
            group % scores,
            np.full(len(chosen), 1),
            decile,
            rank,
            samples["value"][chosen],
            samples["text_id"][chosen],
        )
    )
    pair, score, kind, decile, rank, value, text_id = (np.concatenate(column) for column in zip(*parts))
    order = np.lexsort((rank, decile, kind, score, pair))
    pair, score, kind, decile, rank, value, text_id = (
        column[order] for column in (pair, score, kind, decile, rank, value, text_id)
    )
    views = merged.views
    view = np.searchsorted(views["text_id"] * pairs + views["group"], text_id * pairs + pair)  # views: sorted
    query, keys, weights = _highlighted(views, view, kind, score)  # (N,), (N, KEYS) each
    kept = keys >= 0  # (N, KEYS): -1 past a row's allowed keys (strongest first, so at its end)
    count = kept.sum(1)
    texts, text_of = np.unique(text_id, return_inverse=True)  # each text's tokens once, laid end to end
    token_lists = [merged.token_lists[t] for t in texts.tolist()]
    text_length = np.array([len(tokens) for tokens in token_lists], dtype=np.int64)
    all_tokens = [token for tokens in token_lists for token in tokens]
    length = text_length[text_of]  # (N,)
    # the window: `context` tokens either side of the query and its kept keys; position 0 alone with no query
    marked = np.where(kept & (query >= 0)[:, None], keys, query.clip(0)[:, None])  # (N, KEYS): a key, else it
    low, high = np.minimum(marked.min(1), query.clip(0)), np.maximum(marked.max(1), query.clip(0))
    starts = np.maximum(0, low - context)
    stops = np.minimum(high + context + 1, length)
    sizes = stops - starts
    # the windows' tokens, row after row: the index in all_tokens of each (text's first token + start + i)
    first = (np.cumsum(text_length) - text_length)[text_of] + starts
    within = np.arange(sizes.sum()) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    windows = arrow.lists(arrow.picked(all_tokens, np.repeat(first, sizes) + within), sizes)
    int32 = pa.int32()
    columns = {
        "layer": arrow.numbers(np.array(layers)[pair // len(heads)], int32),
        "head": arrow.numbers(np.array(heads)[pair % len(heads)], int32),
        "kind": arrow.picked(["top", "decile", "edge"], kind),
        "score": arrow.picked([*names, None], score),
        "decile": arrow.numbers(decile, int32, decile < 0),
        "rank": arrow.numbers(rank, int32),
        "text_id": arrow.numbers(text_id, pa.int64()),
        "value": arrow.numbers(value, pa.float64()),
        "length": arrow.numbers(length, int32),
        "window_start": arrow.numbers(starts, int32),
        "tokens": windows,
        "query": arrow.numbers(query, int32, query < 0),
        "keys": arrow.lists(arrow.numbers(keys[kept], int32), count),
        "weights": arrow.lists(arrow.numbers(weights[np.arange(partials.KEYS) < count[:, None]], pa.float32()), count),
    }
    return pa.Table.from_arrays(list(columns.values()), schema=schema.EXAMPLES_SCHEMA)


def _highlighted(views: dict, view: np.ndarray, kind: np.ndarray, score: np.ndarray):
    """Each example's query row, keys and weights (N,), (N, KEYS) from its view. An edge (kind 2): the edge's row,
    its key first. A top text or decile sample of a share score: the row with the most weight on what the score
    counts, that target first (the duplicate's earlier copy, the induction target …); where the text has none,
    or for broad, sink and retrieval, the text's strongest edge as for an edge."""
    query, keys, weights = views["query"][view].copy(), views["keys"][view].copy(), views["weights"][view].copy()
    first_key, first_weight = views["edge_key"][view], views["edge_weight"][view].astype(np.float32)
    share = np.minimum(score, partials.SHARE_COUNT - 1)  # (N,) a column of the per-score views
    own = (kind != 2) & (score < partials.SHARE_COUNT) & (views["score_query"][view, share] >= 0)
    rows = np.flatnonzero(own)
    at = view[rows], share[rows]
    query[rows] = views["score_query"][at]
    by_score = (len(views["text_id"]), partials.SHARE_COUNT, partials.KEYS)
    keys[rows] = views["score_keys"].reshape(by_score)[at]
    weights[rows] = views["score_weights"].reshape(by_score)[at]
    first_key, first_weight = first_key.copy(), first_weight.copy()
    first_key[rows], first_weight[rows] = views["score_key"][at], views["score_weight"][at]
    led = np.flatnonzero((kind == 2) | own)  # the rows whose highlighted key goes first
    if len(led):
        keys[led], weights[led] = _key_first(keys[led], weights[led], first_key[led], first_weight[led])
    return query, keys, weights


def _key_first(keys: np.ndarray, weights: np.ndarray, key: np.ndarray, weight: np.ndarray):
    """keys, weights (n, KEYS) of rows with `key` (n,) and its weight put first, then the row's other strongest
    keys in their order (KEYS in all)."""
    joined_keys = np.concatenate([key[:, None], keys], 1)  # (n, KEYS + 1)
    joined_weights = np.concatenate([weight[:, None], weights], 1)
    dropped = np.concatenate([np.zeros((len(keys), 1), dtype=bool), keys == key[:, None]], 1)
    joined_keys[dropped] = -1  # the row's own copy of the first key goes, to the end
    order = np.argsort(dropped, axis=1, kind="stable")[:, : partials.KEYS]
    return np.take_along_axis(joined_keys, order, 1), np.take_along_axis(joined_weights, order, 1)


def _listed(pair, score, kind: int, decile: int, table: dict):
    """One kept list's rows as example columns: rank = the position within its group (the lists are sorted)."""
    group = table["group"]
    starts = np.searchsorted(group, group, side="left")
    count = len(group)
    return (
        pair,
        score,
        np.full(count, kind),
        np.full(count, decile),
        np.arange(count) - starts,
        table["value"],
        table["text_id"],
    )


def keeper_for(backend, path: Path, *, resume: bool, corpus: str, corpus_format: str, options: dict):
    """keeper_of(layers, heads, names) for run_heads: a StoreWriter of this backend's run."""
    from attn_cli import __version__

    def keeper_of(layers: list[int], heads: list[int], names: tuple[str, ...] = SCORES) -> StoreWriter:
        options_ = {**options, "context": CONTEXT, "layers": layers, "heads": heads}
        if names != SCORES:  # a plugin's scores too: a run without them (or with others) is another run
            options_["scores"] = list(names)
        known = backend.provenance() if supports(backend, Provenance) else {}
        revision, tokenizer = known.get("revision"), known.get("tokenizer")
        identity = {
            "store_version": schema.STORE_VERSION,
            "model": asdict(backend.info),
            "revision": revision,
            "dtype": backend.dtype,
            "corpus": corpus,
            "corpus_format": corpus_format,
            "options": options_,
        }
        run = run_row(
            info=backend.info,
            device=backend.device,
            dtype=backend.dtype,
            revision=revision,
            tokenizer=tokenizer,
            options=options_,
            corpus=corpus,
            corpus_format=corpus_format,
            version=__version__,
            names=names,
        )
        return StoreWriter(path, resume, identity, run, layers, heads, backend.info, names, kv_groups(backend))

    return keeper_of
