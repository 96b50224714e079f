"""The fold of `attn heads` over a corpus: parts of consecutive texts → scored batches → Partials → one Partial.

The corpus is cut into parts of `part_texts` consecutive texts (text_id = the index in read order). Within
a part the texts run shortest first (ties: text_id), `batch_size` at a time, so a part is always batched
the same way: scoring it again (`--resume`, or another machine) gives the same per-text values, and the
partials (math/partials.py) merge exactly in any order. Each batch is reduced to a Partial as soon as it
is scored; the batches' Partials merge into the part's whenever they hold MERGE_BYTES; a complete part
goes to the keeper (the store writer: one folder a part) and is merged into the run's. With no keeper
this is `attn heads` without a store: the same fold, nothing written. Memory: one part's texts, a
Partial's bounded lists and MERGE_BYTES of batch Partials, never the corpus.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol

import numpy as np

from attn_cli.analyses.batches import SORT_WINDOW
from attn_cli.analyses.inspect import check_texts
from attn_cli.math import partials
from attn_cli.plumbing import interrupts

PART_TEXTS = 2048  # texts a part: the unit of --resume and of the length sort
TOP = 10  # top texts per (head, score) and top edges per head
SAMPLES = 5  # texts sampled per decile
MERGE_BYTES = 48 << 20  # batch Partials wait until they hold this much, then merge in one sort (a merge per batch
# would sort the kept lists each time): MiniLM's 72 heads with examples, 32 texts a batch, about 24 batches


class Keeper(Protocol):
    """Where complete parts go (the store writer). load: a part already complete with these texts, or None.
    written: parts this run wrote."""

    written: int

    def load(self, index: int, digest: str) -> partials.Partial | None: ...

    def write(self, index: int, part: partials.Partial, rows: list[dict], digest: str) -> None: ...

    def progress(self, merged: partials.Partial, parts: int) -> None: ...

    def finish(self, merged: partials.Partial, parts: int) -> None: ...

    def abandon(self) -> None: ...  # no part was written: take back what the keeper made

    def close(self) -> None: ...  # the run is over, however it ended (the store's lock goes)


class Folded:
    """The fold's result: the merged Partial, complete parts, and whether Ctrl-C stopped it."""

    def __init__(self, merged: partials.Partial, parts: int, interrupted: bool):
        self.merged, self.parts, self.interrupted = merged, parts, interrupted


def fold(
    score: Callable,
    texts: Iterable[str],
    shape: tuple[int, int],
    *,
    batch_size: int,
    part_texts: int,
    top: int,
    samples: int,
    progress: Callable | None = None,
    total: int | None = None,
    keeper: Keeper | None = None,
    per_text: bool = False,
    names: tuple[str, ...],
) -> Folded:
    """score(list of texts) -> partials.Batch for text_ids 0..n-1 (numbered here), its values (n, L, H, S) for
    the S scores `names` (data/registry.score_names). Ctrl-C (KeyboardInterrupt) stops at the batch being run:
    the result covers the batches done, merged; with none done, or on SIGTERM (interrupts.Terminated), it
    propagates."""
    scores = len(names)
    merged = partials.Partial(shape, top, samples, scores=scores)
    done = parts = 0
    size = part_size(part_texts, batch_size, keeper is not None)
    try:
        for index, part in enumerate(text_parts(texts, size)):
            digest = part_digest(part)
            kept = keeper.load(index, digest) if keeper is not None else None
            if kept is None:
                pending = [partials.Partial(shape, top, samples, scores=scores)]  # merged MERGE_BYTES at a time
                rows: list[dict] = []  # per_text_rows of each batch

                def scored(count: int) -> None:
                    nonlocal done
                    done += count
                    if progress is not None:
                        progress(done, total)

                try:
                    score_batches(
                        score,
                        part_batches(part, batch_size),
                        pending,
                        rows,
                        per_text=per_text,
                        names=names,
                        scored=scored,
                        examples=keeper is not None,
                    )
                except KeyboardInterrupt:
                    merged = partials.merge_all([merged, *pending], shape, top, samples, scores)  # the texts done
                    raise
                current = partials.merge_all(pending, shape, top, samples, scores)
                if keeper is not None:
                    keeper.write(index, current, rows, digest)
                kept = current
            else:
                done += kept.texts
                if progress is not None:
                    progress(done, total)
            merged = partials.merge(merged, kept)
            parts += 1
            if keeper is not None:
                keeper.progress(merged, parts)
    except KeyboardInterrupt as interrupt:
        if done == 0 or isinstance(interrupt, interrupts.Terminated):  # SIGTERM, SIGHUP: stop, report nothing
            raise
        return Folded(merged, parts, True)
    return Folded(merged, parts, False)


def part_size(part_texts: int, batch_size: int, kept: bool) -> int:
    """Texts a part. Without a store no part is kept, so parts are only the windows read ahead and sorted by
    length: a stream (stdin left open) is scored as it comes, not after part_texts texts. The sums are exact
    and merge in any order, so the result is the same whatever the parts are."""
    return part_texts if kept else min(part_texts, batch_size * SORT_WINDOW)


def score_batches(
    score: Callable,
    batches: Iterable[list[tuple[int, str]]],
    pending: list[partials.Partial],
    rows: list[dict],
    *,
    per_text: bool,
    names: tuple[str, ...],
    scored: Callable[[int], None] | None = None,
    examples: bool = True,
) -> None:
    """Score batches of (text_id, text) and merge each one's Partial into `pending` (a list the caller
    owns, holding at least one Partial of the right shape: after Ctrl-C it still holds the batches done).
    The one scoring loop of a part, run by the fold here and by a Ray worker (analyses/ray_engine.py) alike.
    rows: the per-text rows (per_text), a column per score of `names`. scored(count): after each batch. examples=False: no store is written,
    so the Partials' example lists are not gathered (partials.reduce)."""
    first = pending[0]
    for batch in batches:
        result = score([text for _, text in batch])
        result.text_ids = np.array([text_id for text_id, _ in batch], dtype=np.int64)
        pending.append(partials.reduce(result, first.shape, first.top_n, first.samples_n, examples))
        if sum(partials.size(part) for part in pending) > MERGE_BYTES:
            pending[:] = [partials.merge_all(pending, first.shape, first.top_n, first.samples_n, first.scores)]
        if per_text:
            rows.append(per_text_rows(result, names))
        if scored is not None:
            scored(len(batch))


def text_parts(texts: Iterable[str], size: int) -> Iterator[list[tuple[int, str]]]:
    """Consecutive (text_id, text) lists of `size` texts; each checked (a string, valid Unicode, not blank)."""
    numbered = enumerate(texts)
    while part := list(itertools.islice(numbered, size)):
        check_texts([text for _, text in part])
        yield part


def part_batches(part: list[tuple[int, str]], size: int) -> Iterator[list[tuple[int, str]]]:
    """A part's texts shortest first (by characters; ties: text_id), `size` at a time: batches pad little."""
    ordered = sorted(part, key=lambda item: (len(item[1]), item[0]))
    for start in range(0, len(ordered), size):
        yield ordered[start : start + size]


def part_digest(part: list[tuple[int, str]]) -> str:
    """SHA-256 of a part's text_ids and texts: a resumed run checks that the corpus is still the same."""
    digest = hashlib.sha256()
    for text_id, text in part:
        digest.update(f"{text_id}\0{len(text)}\0".encode())
        digest.update(text.encode("utf-8"))
    return digest.hexdigest()


def per_text_rows(batch: partials.Batch, names: tuple[str, ...]) -> dict:
    """The texts table's rows of one batch: one per (text, layer index, head index), columns as arrays; a
    column per score of `names`, the batch's values' last axis."""
    count, layers, heads, _ = batch.values.shape
    text, layer, head = (axis.ravel() for axis in np.indices((count, layers, heads)))
    rows = {
        "text_id": batch.text_ids[text],
        "length": np.array([len(t) for t in batch.tokens])[text],
        "layer_index": layer,
        "head_index": head,
    }
    for index, name in enumerate(names):
        rows[name] = batch.values[text, layer, head, index]
    return rows
