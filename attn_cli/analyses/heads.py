"""The engine of `attn heads`: texts in padded batches → captured Q and K → weights, a block of heads
and rows at a time → per-text scores (math/head_scores.py) → running totals over the corpus → a HeadsReport.

Memory is bounded whatever the corpus: one batch of texts is held at a time, a Hugging Face
model's layers are scored inside its forward as they are made (a layer's v is let go at once; its
q and k may wait for the next layers, to be scored with them as one batch, while the stack's weights
fit one block and its q and k four), and a block of weights is at most CHUNK_CELLS cells (never
layers × heads × T × T).
Pure orchestration over a loaded backend: no loading, no printing.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import random
import string
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, NamedTuple

from attn_cli.analyses.batches import Progress
from attn_cli.analyses.fold import PART_TEXTS, SAMPLES, TOP, fold
from attn_cli.analyses.heads_report import HeadProfile, HeadsReport, SinkKey  # the report, torch-free
from attn_cli.backends.capabilities import CapturesPadded, HasTokenizer, kv_groups, supports
from attn_cli.data.arguments import whole
from attn_cli.data.capture import Capture
from attn_cli.data.registry import head_scores, score_names
from attn_cli.data.selection import Selection
from attn_cli.math import edges, partials
from attn_cli.math.head_scores import SCORES, SHARES, TextSums, label, row_patterns, token_flags
from attn_cli.plumbing.errors import BadInput, UnsupportedModel

if TYPE_CHECKING:
    import torch

CHUNK_CELLS = 1 << 21  # weights per block: (texts, heads, rows, keys); a few temporaries of this size live at once
PROBE_LENGTH = 50  # tokens in each half of the induction probe; in the retrieval probe's haystack
UNBOUNDED_PROBE_LENGTH = 1024  # the most for a model with no position limit (the toy): T² stays affordable
PROBES = ("induction", "retrieval")
NEEDLE_SHARE = 5  # the retrieval probe's needle is 1/NEEDLE_SHARE of its haystack (2 tokens at least)


def run_heads(
    backend,
    texts: Iterable[str],
    selection: Selection,
    *,
    batch_size: int = 32,
    limit: int | None = None,
    total: int | None = None,
    truncate: bool = False,
    source: str = "arguments",
    probe: dict | None = None,
    progress: Progress | None = None,
    part_texts: int = PART_TEXTS,
    top: int = TOP,
    samples: int = SAMPLES,
    per_text: bool = False,
    keeper_of: Callable | None = None,
    engine: Callable | None = None,
) -> HeadsReport:
    """Score every selected head on every text, part by part (analyses/fold.py), and average over the texts.

    texts: any iterable (a file is read as it goes). total: how many there are, for progress.
    keeper_of(layers, heads, names): the store writer that receives each complete part (None: nothing is written).
    engine(layers, heads, truncate, needle): a fold that scores elsewhere (analyses/ray_engine.py); None: here.
    Ctrl-C (KeyboardInterrupt) stops at the batch being run: the report covers the batches
    done and says interrupted; with none done it propagates. SIGTERM and SIGHUP (Terminated) always
    propagate: a process being stopped writes no report and leaves an existing -o file as it was.
    """
    whole(batch_size, "--batch-size", minimum=1)
    whole(part_texts, "--part-texts", minimum=1)
    whole(top, "--top", minimum=1)
    whole(samples, "--samples", minimum=1)
    if limit is not None:
        whole(limit, "--limit", minimum=1)
        total = limit if total is None else min(total, limit)
        texts = itertools.islice(texts, limit)
    layers, heads = selection.resolve(backend.info)
    names = score_names()  # the built-in scores, then any a plugin registers
    keeper = keeper_of(layers, heads, names) if keeper_of is not None else None
    needle = probe is not None and probe["kind"] == "retrieval"  # the retrieval score needs the needle marked
    try:
        folder = fold if engine is None else engine(layers, heads, truncate, needle)
        folded = folder(
            lambda batch: score_texts(backend, batch, layers, heads, truncate, needle, names),
            texts,
            (len(layers), len(heads)),
            batch_size=batch_size,
            part_texts=part_texts,
            top=top,
            samples=samples,
            progress=progress,
            total=total,
            keeper=keeper,
            per_text=per_text,
            names=names,
        )
        merged = folded.merged
        if merged.texts == 0:
            raise BadInput(
                "no text to score" + ("" if source in ("arguments", "probe") else f": {source} holds none"),
                "pass a sentence, --file FILE with a text per line, or --probe induction",
            )
        if keeper is not None and not folded.interrupted:
            keeper.finish(merged, folded.parts)
    except BaseException:
        # a run that wrote no part (no text, a corpus refused on its first part, stopped before a part was
        # complete) takes back what it made: a new store directory is left as it was found
        if keeper is not None and not keeper.written:
            keeper.abandon()
        raise
    finally:
        if keeper is not None:
            keeper.close()  # the store's lock, whatever the end
    return HeadsReport(
        model=backend.info,
        device=backend.device,
        dtype=backend.dtype,
        texts=merged.texts,
        tokens=merged.tokens,
        heads=_profiles(merged, layers, heads, backend.info, names, kv_groups(backend)),
        source=source,
        probe=probe,
        interrupted=folded.interrupted,
        truncated=merged.truncated,
    )


def score_texts(
    backend,
    texts: list[str],
    layers: list[int],
    heads: list[int],
    truncate: bool,
    needle: bool = False,
    names: tuple[str, ...] = SCORES,
) -> partials.Batch:
    """One batch scored and gathered into arrays (partials.Batch; its text_ids are set by the fold). names: the
    scores, the built-in ones (SCORES) then registered HeadScores' (data/registry.score_names)."""
    import numpy as np
    import torch

    extra = plugin_scores(names)
    scorer = None if not extra else functools.partial(LayerScores, extra=extra)
    results, tokens, cut = score_batch(backend, texts, layers, heads, truncate, needle=needle, scorer=scorer)
    count, shape = len(texts), (len(texts), len(layers), len(heads))
    arrays = {
        "values": np.full((*shape, len(names)), np.nan),
        "sink": np.full(shape, -1, dtype=np.int64),
        "query": np.full(shape, -1, dtype=np.int64),
        "edge_key": np.full(shape, -1, dtype=np.int64),
        "edge_weight": np.full(shape, np.nan),
        "keys": np.full((*shape, partials.KEYS), -1, dtype=np.int64),
        "weights": np.zeros((*shape, partials.KEYS), dtype=np.float32),
        "score_query": np.full((*shape, len(SHARES)), -1, dtype=np.int64),
        "score_key": np.full((*shape, len(SHARES)), -1, dtype=np.int64),
        "score_weight": np.full((*shape, len(SHARES)), np.nan, dtype=np.float32),
        "score_keys": np.full((*shape, len(SHARES), partials.KEYS), -1, dtype=np.int64),
        "score_weights": np.zeros((*shape, len(SHARES), partials.KEYS), dtype=np.float32),
    }
    sink_mass = None  # (n, L, H): each text's mean ⟨sink⟩ share, where a layer has a learned sink
    for chunk in results:
        place = (slice(None), chunk.layer, chunk.heads)
        arrays["values"][place] = chunk.values.detach().to("cpu", torch.float64).numpy()
        arrays["sink"][place] = chunk.sink.cpu().numpy()
        for name, tensor in chunk.view._asdict().items():
            arrays[name][place] = tensor.detach().cpu().numpy()
        if chunk.sink_mass is not None:
            sink_mass = np.full(shape, np.nan) if sink_mass is None else sink_mass
            sink_mass[place] = chunk.sink_mass.detach().to("cpu", torch.float64).numpy()
    return partials.Batch(
        sink_mass=sink_mass,
        text_ids=np.arange(count),
        tokens=[[token.text for token in text] for text in tokens],
        truncated=cut,
        **arrays,
    )


def plugin_scores(names: tuple[str, ...]) -> tuple:
    """The registered HeadScores of `names` past the built-in SCORES, in order; one this process has not
    registered (a Ray worker without the plugin installed) is refused in one line."""
    from attn_cli.plumbing.errors import AttnError

    registered = head_scores()
    missing = [name for name in names[len(SCORES) :] if name not in registered]
    if missing:
        raise AttnError(
            f"the head score {missing[0]!r} is not registered here",
            "install the plugin that adds it wherever attn heads scores texts (every Ray worker too)",
        )
    return tuple(registered[name] for name in names[len(SCORES) :])


def score_batch(
    backend,
    batch: list[str],
    layers: list[int],
    heads: list[int],
    truncate: bool,
    *,
    needle: bool = False,
    scorer: Callable[..., LayerScores] | None = None,
    hidden=None,
):
    """Run one batch and score it: (results, tokens per text, texts truncated), results as LayerScores'.

    needle: the texts are retrieval probes (token_flags). scorer: a LayerScores subclass (or a partial of one) that does
    something else with each block of weights (analyses/diagnose.py). hidden(run, states): handed the
    residual stream after every layer, where the backend can give it (capture_padded). A model's learned sink
    logits go into the softmax (LayerScores.add), so its scorers see the weights as the model uses them.

    A backend with capture_padded (Hugging Face) hands each layer over as its forward makes it, so
    a stack's q and k at most are held at a time and the batch stays as the model ran it (no per-text
    copies); other backends (the toy) give one Capture per text, re-padded here.
    """
    make = scorer or LayerScores
    if not supports(backend, CapturesPadded):
        captures = backend.capture_batch(batch, layers, truncate=truncate)
        tokens = [capture.tokens for capture in captures]
        each = make(tokens, layers, heads, backend.info, captures[0].layers[layers[0]].q.device, needle)
        for layer in layers:
            each.add_captures(captures, layer)
        return each.results, tokens, sum(capture.truncated_from is not None for capture in captures)
    scores: LayerScores | None = None

    def sink(run, record):
        nonlocal scores
        if scores is None:  # the tokens are known once the batch is encoded, before the first layer
            scores = make(run.tokens, layers, heads, backend.info, run.real.device, needle)
        scores.add_padded(run, record)

    run = backend.capture_padded(
        batch, layers, sink, truncate=truncate, sinks=True, **({} if hidden is None else {"hidden": hidden})
    )
    if scores is None:  # the forward ran but never called attention for a selected layer
        raise UnsupportedModel(
            f"{backend.info.name}: no attention call reached attn for layers {layers}",
            "its attention layers do not number themselves as the config says",
        )
    scores.flush()  # the layers still waiting in a stack
    return scores.results, run.tokens, run.truncated


class LayerScores:
    """The scores of one batch of texts, a layer at a time: `results` holds per layer and block of heads
    (layer index, head slice, scores (B, h, len(SCORES)), sink keys [b][h] as (position, token) or None).

    Nothing is added to the corpus totals here, so a batch interrupted half way counts not at all.
    """

    stacks = True  # add_padded may score several layers as one batch; False where consume reads one layer's rows

    def __init__(
        self,
        tokens: list[list],
        layers: list[int],
        heads: list[int],
        info,
        device,
        needle: bool = False,
        *,
        extra: tuple = (),
    ):
        self.tokens, self.layers, self.heads, self.info = tokens, layers, heads, info
        self.extra = extra  # registered HeadScores (data/registry) after the built-in ones: consume adds them
        self.flags = token_flags(tokens, device, needle)
        self.stacked_flags = {1: self.flags}  # layers in a stack -> the flags repeated that many times
        # add_padded's layers not scored yet: (layer, q, k, _Scaling, allowed_rows)
        self.waiting: list[tuple[int, torch.Tensor, torch.Tensor, _Scaling, Callable]] = []
        # what consume makes: ChunkScores here; a subclass's own rows where it overrides consume (diagnose's
        # FirstTokenWeights: (layer index, head slice, α (B, h)))
        self.results: list = []
        # the ⟨sink⟩ shares of the blocks consume is reading, where the layer has a learned sink (add sets it)
        self.sink_share: SinkShare | None = None

    def add_padded(self, run, record) -> None:
        """A layer of a backend's batch as the model ran it (padded on the right). Short texts make small tensors,
        whose per-operation cost is most of their scoring: layers wait (their q and k, a few MB) and are scored
        as one batch of layers × texts while the stack's weights fit a block; flush() scores what still waits."""
        mask = record.mask  # what waits: q, k, the mask and the scale; not the record (its v)
        allowed = lambda start, stop: _batch_allowed(mask, run.real, start, stop)  # noqa: E731
        if record.weights is not None:  # a weights-only model's (no Q or K): its own weights, scored alone
            self.flush()
            self.add_weights(record.layer, record.weights, allowed)
            return
        per_head = record.head_mask is not None  # Doge's: the bias then belongs to the per-head mask
        scaling = _Scaling(
            record.scale, record.scorer, record.sink, record.bias if per_head else None, record.head_mask
        )
        layer = (record.layer, record.q.float(), record.k.float(), scaling, allowed)
        if not self.stacks or record.scorer is not None or record.sink is not None or per_head:  # scored alone
            self.add(*layer)
            return
        if self.waiting and not _stackable(self.waiting[0], layer):
            self.flush()
        self.waiting.append(layer)
        if len(self.waiting) >= _stack_size(layer[1], layer[2], len(self.heads)):
            self.flush()

    def flush(self) -> None:
        """Score the layers add_padded left waiting, as one batch, and hand each layer its own rows back."""
        import torch

        waiting, self.waiting = self.waiting, []
        if len(waiting) <= 1:
            for layer in waiting:
                self.add(*layer)
            return
        rows = [allowed for *_, allowed in waiting]
        allowed = lambda start, stop: torch.cat([row(start, stop) for row in rows])  # noqa: E731
        first = len(self.results)
        self.add(
            [layer for layer, *_ in waiting],
            torch.cat([q for _, q, *_ in waiting]),
            torch.cat([k for _, _, k, *_ in waiting]),
            waiting[0][3],
            allowed,
        )
        count = len(self.tokens)
        stacked, self.results[first:] = self.results[first:], []
        for chunk in stacked:  # (layers × B, …) -> a ChunkScores per layer, (B, …)
            # add() was handed the stack's list of layers, so each of its chunks names that list
            for at, layer_index in enumerate(chunk.layer if isinstance(chunk.layer, list) else [chunk.layer]):
                part = slice(at * count, (at + 1) * count)
                self.results.append(
                    ChunkScores(
                        layer_index,
                        chunk.heads,
                        chunk.values[part],
                        chunk.sink[part],
                        View(*(field[part] for field in chunk.view)),
                    )
                )

    def add_captures(self, captures: list[Capture], layer: int) -> None:
        """A layer of one Capture per text: q and k padded (on the right) into (B, H, T, D), masks into rows; or,
        from a weights-only model (LayerCapture.weights: the weights its own attention code returns, no Q or K),
        those weights padded into (B, H, T, T)."""
        records = [capture.layers[layer] for capture in captures]
        lengths = [len(capture.tokens) for capture in captures]
        keys = max(lengths)
        allowed = lambda start, stop: _allowed(records, lengths, start, stop, keys, records[0].q.device)  # noqa: E731
        if records[0].weights is not None:
            self.add_weights(layer, _padded_weights([r.weights for r in records], keys), allowed)
            return
        scaling = _Scaling(records[0].scale, records[0].scorer, records[0].sink)  # no per-head mask: the toy's
        self.add(layer, _padded([r.q for r in records], keys), _padded([r.k for r in records], keys), scaling, allowed)

    def add(self, layer: int | list[int], q, k, record, allowed_rows) -> None:
        """q (B, H, T, D), k (B, H_kv, T, D), the layer's _Scaling (scale, scorer, sinks, a per-head mask),
        allowed_rows(start, stop) -> (B, c, T) bool, False at padding rows and keys. A list of layers (flush): q
        and k hold them one after another along B, and so do the results' ChunkScores (layer: that list)."""
        import torch

        from attn_cli.math import attention, scoring

        count = len(self.tokens)
        keys = self.flags.ids.shape[1]
        scale, scorer = record.scale, record.scorer
        # a learned sink logit per query head (gpt-oss): one more column of each row's softmax, which takes a share
        # of the row, so its weights sum to 1 − that share; the scores are of the weights as the model uses them,
        # and each text's mean share (the ⟨sink⟩ column's) is the head's sink mass (SinkShare, read by consume)
        sinks = None if record.sink is None else record.sink.to(q.device)  # (H,)
        # a per-head mask (Doge's: a learned bias per key and each head's own top-k keys): the bias joins each
        # head's scores and each head's softmax obeys its own keys; the rows counted and the targets of the
        # scores stay those of the keys any head may attend (`allowed_rows`, the mask the layer hands over)
        head_bias, head_allowed = record.head_bias, record.head_allowed
        per_chunk, block_rows = _block_sizes(q.shape[0], len(self.heads), keys)
        index = [self.layers.index(one) for one in layer] if isinstance(layer, list) else self.layers.index(layer)
        for first in range(0, len(self.heads), per_chunk):
            chunk = self.heads[first : first + per_chunk]
            q_heads = _heads_of(q, chunk)  # (B, h, T, D)
            # each query head's kv head, from this layer's own counts: they may differ by layer (MiMo-V2-Flash's
            # sliding layers have twice the kv heads of its full ones), so not from the model info's
            group = q.shape[1] // k.shape[1]
            k_heads = _heads_of(k, [head // group for head in chunk])  # (B, h, T, D)
            sink = None if sinks is None else sinks[chunk]  # (h,)
            bias = None if head_bias is None else head_bias[:, chunk].float()  # (B, h, T, T)
            own = None if head_allowed is None else head_allowed[:, chunk]  # (B, h, T, T)
            share = None if sink is None else SinkShare()

            # (start, weights (B, h, c, T) with masked cells 0, allowed (B, c, T)) per block of rows
            def blocks(share=share):
                for start, stop in self.row_blocks(keys, block_rows):
                    allowed = allowed_rows(start, stop)  # (B, c, T)
                    if scorer is None:
                        scores = scoring.scores(q_heads[:, :, start:stop], k_heads, scale)  # (B, h, c, T)
                    else:  # a learned scoring (the toy's): one head of one text at a time
                        scores = torch.stack(
                            [
                                torch.stack(
                                    [
                                        scoring.scores(q_heads[b, h, start:stop], k_heads[b, h], scale, scorer, head)
                                        for h, head in enumerate(chunk)
                                    ]
                                )
                                for b in range(count)
                            ]
                        )
                    each = allowed[:, None]  # (B, 1, c, T): the same keys for every head …
                    if bias is not None:  # … or each head's own (Doge's), its bias added to its scores
                        scores = scores + bias[:, :, start:stop]
                        each = each & own[:, :, start:stop]
                    if sink is None:
                        yield start, attention.masked_softmax(scores, each), allowed
                    else:  # rows at padding (no key) put all their weight on the sink: 0 on every key
                        weights, shares = attention.sink_softmax(scores, each, sink)
                        assert share is not None  # made whenever there is a sink
                        share.add(shares, allowed)
                        yield start, weights, allowed

            def row_weights(row, chunk=chunk, q_heads=q_heads, k_heads=k_heads, sink=sink, bias=bias, own=own):
                """(B, h) rows -> their weights (B, h, T)"""
                return edges.row_weights(q_heads, k_heads, row, allowed_rows, scale, scorer, chunk, sink, bias, own)

            self.sink_share = share
            self.consume(index, slice(first, first + len(chunk)), blocks(), row_weights)

    def add_weights(self, layer: int, weights, allowed_rows) -> None:
        """A layer's weights as the model returned them, (B, H, T, T) with padding 0, scored a block of rows at a
        time as add() scores the weights it computes (the cells a row may not attend are 0 in them already)."""
        count = weights.shape[-1]
        per_chunk, block_rows = _block_sizes(weights.shape[0], len(self.heads), count)
        index = self.layers.index(layer)
        for first in range(0, len(self.heads), per_chunk):
            chunk = self.heads[first : first + per_chunk]
            chosen = weights[:, chunk].float()  # (B, h, T, T)

            def blocks(chosen=chosen):
                for start, stop in self.row_blocks(count, block_rows):
                    allowed = allowed_rows(start, stop)  # (B, c, T)
                    yield start, chosen[:, :, start:stop] * allowed[:, None], allowed

            self.sink_share = None
            self.consume(index, slice(first, first + len(chunk)), blocks(), lambda rows, c=chosen: rows_of(c, rows))

    def row_blocks(self, keys: int, block_rows: int) -> Iterator[tuple[int, int]]:
        """The (start, stop) blocks of query rows whose weights consume reads, in row order: every row here; a
        scorer that reads a sample of a long text's rows (analyses/kv.py) names its own."""
        for start in range(0, keys, block_rows):
            yield start, min(start + block_rows, keys)

    def consume(self, layer_index: int | list[int], heads: slice, blocks, row_weights) -> None:
        """The weights of one layer's heads `heads` (or a stack's: a list of layer indices), a block of rows at a
        time, scored into `results`; row_weights(row (B, h)) gives those rows' weights (B, h, T) again, for the
        examples' strongest keys."""
        import torch

        flags = self._flags(len(layer_index) if isinstance(layer_index, list) else 1)
        sums = TextSums(flags.ids.shape[0], heads.stop - heads.start, flags.ids.shape[1], flags.ids.device)
        maxima = edges.ColumnMaxima()
        score_rows = edges.ScoreRows()
        whole = None  # the weights of every row (B, h, T, T), where one block held them all
        kept: list[tuple] = []  # every block's (weights, allowed), for the registered scores (self.extra)
        for start, weights, allowed in blocks:
            shares, counted = sums.add(weights, allowed, flags, start)
            maxima.add(weights, allowed, start)
            score_rows.add(shares, counted, start)
            whole = weights if edges.every_row(weights, start) else None
            if self.extra:
                kept.append((weights, allowed))
        values, sink = sums.result()  # (B, h, len(SCORES)), (B, h)
        if self.extra:  # … then the registered scores: (B, h, len(SCORES) + len(extra))
            values = torch.cat([values, self._extra_values(kept, heads, values)], -1)
        row, key, weight = maxima.edge(sink)  # (B, h) each
        sink_mass = None if self.sink_share is None else self.sink_share.mean()  # the blocks are all read

        def weights_of(rows):  # (B, h) rows -> their weights (B, h, T)
            if whole is not None:  # the rows are at hand: gathered, not scored again
                return rows_of(whole, rows)
            return row_weights(rows)

        top_weights, top_keys = edges.strongest(weights_of(row), partials.KEYS)
        # each share score's own row, and in it the target the score counts with the most weight
        rows = score_rows.rows()  # (7, B, h)
        per_score = []
        for share in range(len(rows)):
            chosen = weights_of(rows[share])  # (B, h, T)
            target, target_weight = edges.target_key(chosen, row_patterns(flags, rows[share])[share], rows[share])
            strong_weights, strong_keys = edges.strongest(chosen, partials.KEYS)
            per_score.append((rows[share], target, target_weight, strong_keys, strong_weights))
        score_query, score_key, score_weight, score_keys, score_weights = (
            torch.stack(column, 2) for column in zip(*per_score)
        )  # (B, h, 7), and (B, h, 7, KEYS) for the row's strongest keys
        self.results.append(
            ChunkScores(
                layer_index,
                heads,
                values,
                sink,
                View(
                    row,
                    key,
                    weight,
                    top_keys,
                    top_weights,
                    score_query.masked_fill(score_key < 0, -1),
                    score_key,
                    score_weight,
                    score_keys,
                    score_weights,
                ),
                sink_mass,
            )
        )

    def _extra_values(self, kept: list[tuple], heads: slice, like):
        """The registered scores of every text (a stack's: every layer × text) from its whole weights: (B, h, E)
        like `like`'s dtype and device. A text's weights are cut to its own tokens (the batch pads on the
        right)."""
        import torch

        weights = torch.cat([block for block, _ in kept], 2)  # (B, h, T, T)
        allowed = torch.cat([rows for _, rows in kept], 1)  # (B, T, T)
        count = len(self.tokens)
        values = torch.full(
            (weights.shape[0], heads.stop - heads.start, len(self.extra)), float("nan"), dtype=torch.float64
        )
        for b in range(weights.shape[0]):
            tokens = self.tokens[b % count]
            n = len(tokens)
            for e, score in enumerate(self.extra):
                values[b, :, e] = extra_value(score, weights[b, :, :n, :n], allowed[b, :n, :n], tokens)
        return values.to(like.device, like.dtype)

    def _flags(self, layers: int):
        """The batch's TokenFlags repeated for a stack of `layers` layers: (layers × B, T) each."""
        if layers not in self.stacked_flags:
            # every field keeps its type (a tensor repeated, None left None), which mypy cannot follow through **
            repeated = {
                name: None if value is None else value.repeat(layers, 1) for name, value in vars(self.flags).items()
            }
            self.stacked_flags[layers] = dataclasses.replace(self.flags, **repeated)  # type: ignore[arg-type]
        return self.stacked_flags[layers]


class _Scaling(NamedTuple):
    """What add() reads of a LayerCapture besides q and k."""

    scale: float
    scorer: object
    sink: object = None  # (H,) learned sink logits, or None
    head_bias: object = None  # (B, H, T, T) a per-head mask's learned bias (Doge's), or None
    head_allowed: object = None  # (B, H, T, T) bool: the keys each head may attend, where each has its own


def _stackable(waiting: tuple, layer: tuple) -> bool:
    """Two waiting layers score as one batch: the same scale and q and k shapes (a layer's own mask goes along)."""
    return (
        waiting[3].scale == layer[3].scale and waiting[1].shape == layer[1].shape and waiting[2].shape == layer[2].shape
    )


def _stack_size(q, k, heads: int) -> int:
    """Layers stacked at most: their weights one block (texts · layers · heads · T · T <= CHUNK_CELLS), and the
    q and k they hold (short texts' q and k outweigh their T × T weights) at most 4 blocks (32 MB in float32)."""
    count, _, keys, _ = q.shape
    return max(1, min(CHUNK_CELLS // (count * heads * keys * keys), 4 * CHUNK_CELLS // (q.numel() + k.numel())))


class View(NamedTuple):
    """What a chunk's examples show, per text and head (B, h): the row of its strongest edge off its sink key,
    the edge's key and weight (-1, -1, NaN for none), and that row's strongest keys and weights (B, h, KEYS)."""

    query: object
    edge_key: object
    edge_weight: object
    keys: object
    weights: object
    # per share score (B, h, 7, SHARES' order): the row with the most weight on the score's targets (-1: none),
    # the target in it with the most weight and that weight, and the row's strongest keys (B, h, 7, KEYS)
    score_query: object
    score_key: object
    score_weight: object
    score_keys: object
    score_weights: object


class ChunkScores(NamedTuple):
    layer: int | list[int]  # index into the selected layers; a stack's list of them until flush() cuts it apart
    heads: slice  # into the selected heads
    values: object  # (B, h, len(SCORES)) scores, NaN where undefined
    sink: object  # (B, h) each text's sink key, -1 for none
    view: View
    sink_mass: object = None  # (B, h) each text's mean ⟨sink⟩ share over its rows; None: no learned sink


class SinkShare:
    """A learned sink's share of each row (the softmax's ⟨sink⟩ column), summed over a text's rows a block at a
    time: mean() is each text's mean over its real rows (padding rows, which attend no key, left out)."""

    def __init__(self) -> None:
        self.total = None  # (B, h)
        self.rows = None  # (B, 1)

    def add(self, shares, allowed) -> None:
        """shares (B, h, c) of rows whose allowed keys are allowed (B, c, T)."""
        real = allowed.any(-1)  # (B, c): a row of the text, not padding
        total = (shares * real[:, None]).sum(-1)
        rows = real.sum(-1, keepdim=True)
        self.total = total if self.total is None else self.total + total
        self.rows = rows if self.rows is None else self.rows + rows

    def mean(self):
        return self.total / self.rows.clamp_min(1)


def _heads_of(tensor, heads: list[int]):
    """tensor[:, heads] (B, h, T, D), contiguous, as advanced indexing gives it: a run of consecutive heads is
    a slice copied (advanced indexing of the strided (B, H, T, D) view of a projection is several times slower)."""
    import torch

    if heads == list(range(heads[0], heads[0] + len(heads))):
        return tensor[:, heads[0] : heads[0] + len(heads)].contiguous()
    return tensor.index_select(1, torch.tensor(heads, device=tensor.device))


def _batch_allowed(mask, real, start: int, stop: int):
    """Rows start:stop of a batch's mask as the model used it, with padding rows and keys out: (B, c, T)."""
    if mask.dense is not None:
        dense = mask.dense if mask.dense.dim() == 3 else mask.dense[None]
        rows = dense[:, start:stop]  # (B or 1, c, T)
    else:
        rows = mask.rows(start, stop)[None]  # (1, c, T): a causal or open rule
    return rows & real[:, start:stop, None] & real[:, None, :]


def _block_sizes(texts: int, heads: int, keys: int) -> tuple[int, int]:
    """(heads per block, query rows per block): texts · heads · rows · keys <= CHUNK_CELLS, all heads if possible."""
    per_head_row = texts * keys
    if per_head_row * heads <= CHUNK_CELLS:
        return heads, max(1, min(keys, CHUNK_CELLS // (per_head_row * heads)))
    per_chunk = max(1, CHUNK_CELLS // per_head_row)
    return per_chunk, max(1, CHUNK_CELLS // (per_head_row * per_chunk))


def _padded(tensors: list, keys: int):
    """(H, T_b, D) per text -> (B, H, keys, D) float32, zeros past each text's end."""
    from torch.nn.utils.rnn import pad_sequence

    padded = pad_sequence([tensor.transpose(0, 1) for tensor in tensors], batch_first=True)  # (B, T_max, H, D)
    return padded.float().transpose(1, 2)  # (B, H, keys, D), a view


def rows_of(weights, rows):
    """weights (B, h, T, T), rows (B, h) (−1: none, read as row 0) -> each head's row (B, h, T)."""
    picked = rows.clamp_min(0)[..., None, None].expand(-1, -1, 1, weights.shape[-1])
    return weights.gather(2, picked)[:, :, 0]


def _padded_weights(weights: list, keys: int):
    """Each text's (H, T_b, T_b) weights padded with zeros to (B, H, keys, keys)."""
    padded = weights[0].new_zeros(len(weights), weights[0].shape[0], keys, keys)
    for b, one in enumerate(weights):
        padded[b, :, : one.shape[-2], : one.shape[-1]] = one
    return padded


def _allowed(records, lengths: list[int], start: int, stop: int, keys: int, device):
    """Rows start:stop of each text's mask, padded: (B, stop - start, keys) bool, False at padding."""
    import torch

    allowed = torch.zeros(len(records), stop - start, keys, dtype=torch.bool, device=device)
    for b, (record, length) in enumerate(zip(records, lengths)):
        if start < length:
            end = min(stop, length)
            allowed[b, : end - start, :length] = record.mask.rows(start, end, 0, length)
    return allowed


def _profiles(
    merged: partials.Partial,
    layers: list[int],
    heads: list[int],
    info,
    names: tuple[str, ...],
    groups: dict[int, int],
) -> list[HeadProfile]:
    mean, std = partials.mean_std(merged)
    profiles, sinks = [], partials.sink_keys(merged)
    sink_mass = partials.sink_mass(merged)  # (L, H), NaN without a learned sink
    for li, layer in enumerate(layers):
        for hi, head in enumerate(heads):
            means = [_value(value) for value in mean[li, hi].tolist()]
            sink = sinks.get((li, hi))
            mass = float(sink_mass[li, hi])
            profiles.append(
                HeadProfile(
                    layer=layer,
                    head=head,
                    kv_head=info.kv_head_of(head, groups.get(layer)),
                    scores=dict(zip(names, means)),
                    std={name: _value(value) for name, value in zip(names, std[li, hi].tolist())},
                    scored={name: int(value) for name, value in zip(names, merged.count[li, hi].tolist())},
                    label=label(means),
                    sink_key=None if sink is None else SinkKey(*sink),
                    sink_mass=None if mass != mass else mass,  # NaN: the layer has no learned sink
                )
            )
    return profiles


def extra_value(score, weights, allowed, tokens):
    """A registered HeadScore of one text's heads: weights (h, T, T) → (h,) float64 on the CPU, NaN where
    undefined. Its contract (data/registry.HeadScore) is checked here, where a plugin's fault would otherwise
    surface as a wrong shape far away or an out-of-range histogram bin: a value outside [0, 1] or a wrong
    shape is refused in one line naming the score."""
    import torch

    from attn_cli.plumbing.errors import AttnError

    try:
        got = torch.as_tensor(score.compute(weights, allowed, tokens)).detach().to("cpu", torch.float64)
    except Exception as error:  # the plugin's own fault, said in one line naming it (ATTN_DEBUG: the traceback)
        raise AttnError(
            f"head score {score.name!r} failed: {type(error).__name__}: {error}",
            f"its plugin's compute ({getattr(score.compute, '__module__', '?')}) raised it",
        ) from error
    if got.shape != (weights.shape[0],):
        raise AttnError(
            f"head score {score.name!r} gave shape {tuple(got.shape)} for {weights.shape[0]} heads",
            "its compute(weights, allowed, tokens) returns one value per head: (h,)",
        )
    outside = got[~torch.isnan(got) & ((got < 0) | (got > 1))]
    if len(outside):
        raise AttnError(
            f"head score {score.name!r} gave {outside[0].item():g}, outside [0, 1]",
            "a head score is a share in [0, 1] (NaN where undefined): scale it there",
        )
    return got


def _value(value: float) -> float | None:
    return None if value != value else value  # NaN: no text defined it


# ---- the induction probe


def probe(backend, kind: str, seed: int = 0, length: int = PROBE_LENGTH) -> dict:
    """A probe text and what it is made of: {"kind", "seed", "length", "requested", "text"}, and for the
    retrieval probe "needle" (its tokens) and "depth" (haystack tokens before it).

    induction (Olsson et al. 2022): `length` random tokens, then the same tokens again.
    retrieval (Wu et al. 2024): a haystack of `length` random tokens with a needle of
    length / NEEDLE_SHARE other random tokens inside it at a seeded depth, then the needle again.
    No token repeats but the needle's, so the copy's rows know what they copy (head_scores.needle_targets).
    The question Wu et al. ask before the copy is left out, and the copy is teacher-forced (given, not generated).

    Words are drawn (seeded) from the tokenizer's vocabulary, keeping only whole words that
    come back as the same single token, so the text is exactly that token sequence;
    a model without a tokenizer (the toy) gets random lowercase words.
    """
    if kind not in PROBES:
        raise BadInput(f"unknown probe {kind!r}", f"probes: {', '.join(PROBES)}")
    whole(length, "the probe length", minimum=2)
    limit = backend.info.max_positions
    # tokens the text may hold: the model's positions, specials aside, or twice the unbounded half
    room = 2 * UNBOUNDED_PROBE_LENGTH if limit is None else limit - 4
    needle_of = (lambda n: max(2, n // NEEDLE_SHARE)) if kind == "retrieval" else (lambda n: 0)
    fitted = min(length, room // 2 if kind == "induction" else room)
    while fitted > 2 and fitted + 2 * needle_of(fitted) > room:  # at most room / 3 steps
        fitted -= 1
    generator = random.Random(seed)
    count = fitted + needle_of(fitted)
    words = _vocabulary_words(backend.tokenizer, generator, count) if supports(backend, HasTokenizer) else None
    if words is None:
        words = _random_words(generator, count)
    described = {"kind": kind, "seed": seed, "length": fitted, "requested": length}
    if kind == "induction":
        return {**described, "text": " " + " ".join(words + words)}
    haystack, needle = words[:fitted], words[fitted:]
    depth = generator.randint(0, fitted)
    text = " " + " ".join(haystack[:depth] + needle + haystack[depth:] + needle)
    return {**described, "needle": len(needle), "depth": depth, "text": text}


def _vocabulary_words(tokenizer, generator: random.Random, length: int) -> list[str] | None:
    size = len(tokenizer)
    chosen: dict[str, None] = {}
    for _ in range(200 * length):
        token_id = generator.randrange(size)
        word = tokenizer.decode([token_id]).strip()
        if (
            len(word) >= 2
            and word.isascii()
            and word.isalpha()
            and word not in chosen
            and tokenizer(" " + word, add_special_tokens=False)["input_ids"] == [token_id]
        ):
            chosen[word] = None
            if len(chosen) == length:
                return list(chosen)
    return None


def _random_words(generator: random.Random, length: int) -> list[str]:
    chosen: dict[str, None] = {}
    while len(chosen) < length:
        chosen["".join(generator.choice(string.ascii_lowercase) for _ in range(generator.randint(3, 7)))] = None
    return list(chosen)
