"""The corpus loop every corpus analysis shares (attn heads, attn diagnose): texts read as they go, in
padded batches sorted by length within a window read ahead, a limit, progress, and Ctrl-C."""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from attn_cli.analyses.inspect import check_texts
from attn_cli.data.arguments import whole
from attn_cli.plumbing import interrupts
from attn_cli.plumbing.errors import BadInput

SORT_WINDOW = 16  # batches read ahead and sorted by length (memory: this many batches of text strings)
Progress = Callable[[int, int | None], None]  # progress(texts done, texts in all or None)


@dataclass
class BatchesRun:
    """What over_batches went through."""

    texts: int = 0
    tokens: int = 0  # special tokens included
    truncated: int = 0  # texts --truncate cut
    interrupted: bool = False


def over_batches(
    texts: Iterable[str],
    score: Callable,
    *,
    batch_size: int,
    limit: int | None,
    total: int | None,
    progress: Progress | None,
    sources: str = "--file FILE with a text per line, or --probe induction",
) -> BatchesRun:
    """score(batch) -> (tokens per text, texts cut) on every batch of the texts (at most `limit`), in the
    order batches() gives, calling progress(texts done, total) after each. Whatever score adds up must be
    added only when a batch is done, so a batch interrupted half way counts not at all.

    Ctrl-C (KeyboardInterrupt) stops at the batch being run: the run covers the batches done and says
    interrupted; with none done it propagates. SIGTERM and SIGHUP (Terminated) always propagate: a
    process being stopped writes no report and leaves an existing -o file as it was.
    """
    whole(batch_size, "--batch-size", minimum=1)
    if limit is not None:
        whole(limit, "--limit", minimum=1)
        total = limit if total is None else min(total, limit)
        texts = itertools.islice(texts, limit)
    run = BatchesRun()
    try:
        for batch in batches(texts, batch_size):
            texts_tokens, cut = score(batch)
            run.texts += len(batch)
            run.tokens += sum(len(text) for text in texts_tokens)
            run.truncated += cut
            if progress is not None:
                progress(run.texts, total)
    except KeyboardInterrupt as interrupt:
        if run.texts == 0 or isinstance(interrupt, interrupts.Terminated):  # SIGTERM, SIGHUP: stop, write nothing
            raise
        run.interrupted = True
    if run.texts == 0:
        raise BadInput("no text to score", f"pass a sentence, {sources}")  # sources: the command's others
    return run


def batches(texts: Iterable[str], size: int) -> Iterator[list[str]]:
    """Batches of `size` texts. Texts are read SORT_WINDOW batches ahead and sorted by length within
    that window, so each batch pads little (the scores are means: their order does not matter)."""
    iterator = iter(texts)
    ahead = min(size * SORT_WINDOW, sys.maxsize)  # islice takes at most sys.maxsize (a --batch-size that large)
    while window := list(itertools.islice(iterator, ahead)):
        check_texts(window)
        window.sort(key=len)
        for start in range(0, len(window), size):
            yield window[start : start + size]
