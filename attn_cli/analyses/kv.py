"""`attn kv`: how much KV cache each head needs, and what each cache policy loses.

Every text runs through the corpus engine of `attn heads` (analyses/heads.py: padded batches, a block of query
rows at a time, the weights as the model uses them, a learned sink's share on no key); KVScores reads each
block with math/kv.py and adds up, per (layer, head), over every real query row of every text — or, in a batch
longer than SAMPLED_ROWS rows, over a sample of about SAMPLED_ROWS rows of each text, in runs of RUN consecutive
rows spread evenly over it (row_grid), only those rows' weights made: the fused forward never makes a row's
weights, and each row costs a sort of its keys, so reading every row of a 16k-token text costs many forwards:

- sink mass (the first SINKS keys) and local mass within each window (keys less than w positions away);
- the keys a row needs to keep p of its attention (its largest weights first), as a distribution over rows;
- what StreamingLLM (sinks + recent keys) and H2O (recent keys + heavy hitters) keep of each row at a budget of
  keys, over the rows that have more keys than the budget (the rows a policy must drop keys from); and what
  SnapKV keeps of the rows of its observation window (a text's last rows, which vote for the keys kept), over
  the texts longer than the budget.

The retrieval score comes from `attn heads --probe retrieval` (Wu et al. 2024; math/head_scores.py): a seeded
needle in a random haystack, copied again; the share of copy steps where the head's strongest key is the
needle token being copied. A head is "retrieval" when that score is at least RETRIEVAL or StreamingLLM keeps
less than `target` of its attention at the budget, else "streaming". Under grouped-query attention the cache is
per KV head: a KV head needs what the most demanding of its query heads needs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass

import numpy as np
import torch

from attn_cli.analyses.batches import over_batches
from attn_cli.analyses.heads import LayerScores, score_batch
from attn_cli.analyses.kv_store import KVStore, text_digest
from attn_cli.data.capture import ModelInfo
from attn_cli.data.document import SCHEMA_VERSION, Document, counted, num_json
from attn_cli.math import kv
from attn_cli.plumbing.errors import BadInput

SINKS = 4  # StreamingLLM's attention sinks: the first 4 tokens
WINDOWS = (16, 64, 256, 1024)
MASSES = (0.9, 0.95, 0.99)
BUDGET = 64  # keys a row keeps under each policy
TARGET = 0.95  # the share of a row's attention a cache must keep
RETRIEVAL = 0.5  # a retrieval score from here up: the head copies from far back
SNAPKV_WINDOW = 32  # SnapKV's observation window: the last 32 rows of a text
CHUNK = 256  # texts between two saves of a store
SAMPLED_ROWS = 256  # past this many rows of a batch, every statistic reads about this many rows of each text
RUN = 8  # … in runs of consecutive rows spread evenly over the text (a block of weights each)


@dataclass(frozen=True)
class Settings:
    sinks: int = SINKS
    windows: tuple[int, ...] = WINDOWS
    budget: int = BUDGET
    target: float = TARGET

    @property
    def masses(self) -> tuple[float, ...]:
        """The shares whose keys-needed distribution is kept: MASSES and the target (the recommended budget's)."""
        return tuple(sorted({*MASSES, self.target}))


@dataclass
class HeadKV:
    layer: int
    head: int
    kv_head: int
    sink: float  # mean over rows of the weight on the first `sinks` keys
    windows: dict[int, float]  # window -> mean over rows of the weight within it
    keys: dict[float, tuple[float, float, int]]  # p -> (mean, 90th percentile, max) keys a row needs for p
    streaming: float | None  # StreamingLLM's kept share at the budget (None: no row has more keys than it)
    heavy_hitters: float | None  # H2O's
    snapkv: float | None  # SnapKV's, over the observation windows of the texts longer than the budget
    retrieval: float | None  # the retrieval score on the needle probe (None: not run)
    label: str  # "streaming" or "retrieval"
    budget: int  # recommended: the keys 90% of rows need to keep `target` of their attention

    def to_json(self) -> dict:
        return {
            "layer": self.layer,
            "head": self.head,
            "kv_head": self.kv_head,
            "label": self.label,
            "budget": self.budget,
            "sink_mass": num_json(self.sink),
            "local_mass": {str(window): num_json(mass) for window, mass in self.windows.items()},
            "keys_for_mass": {
                str(p): {"mean": num_json(mean), "p90": num_json(p90), "max": top}
                for p, (mean, p90, top) in self.keys.items()
            },
            "policies": {
                "streaming_llm": num_json(self.streaming),
                "h2o": num_json(self.heavy_hitters),
                "snapkv": num_json(self.snapkv),
            },
            "retrieval": num_json(self.retrieval),
        }


@dataclass
class KVReport(Document):
    model: ModelInfo
    device: str
    dtype: str
    settings: Settings
    texts: int
    rows: int  # query rows measured: every real token of every text, or the sample of a long batch's
    heads: list[HeadKV]
    text: str = ""  # the first text (a figure's line)
    probe: dict | None = None  # the retrieval probe run (its kind, seed, length …)
    truncated: int = 0
    interrupted: bool = False
    tokens: int = 0  # every real token of every text (rows < tokens: a long batch's rows were sampled)

    def summary_shape(self) -> str:
        return f"{counted(self.texts, 'text')}, {counted(len(self.heads), 'head')}"

    def kv_heads(self) -> list[dict]:
        """Per (layer, KV head): its query heads, the largest budget among them, and "retrieval" if any is."""
        groups: dict[tuple[int, int], list[HeadKV]] = {}
        for head in self.heads:
            groups.setdefault((head.layer, head.kv_head), []).append(head)
        return [
            {
                "layer": layer,
                "kv_head": kv_head,
                "query_heads": [head.head for head in members],
                "label": "retrieval" if any(head.label == "retrieval" for head in members) else "streaming",
                "budget": max(head.budget for head in members),
            }
            for (layer, kv_head), members in sorted(groups.items())
        ]

    def full_attention(self) -> np.ndarray:
        """DuoAttention's full_attention_heads.tsv: (layers, KV heads), 1 where a KV head keeps its whole cache."""
        layers = sorted({head.layer for head in self.heads})
        grid = np.zeros((len(layers), self.model.kv_heads))
        for group in self.kv_heads():
            grid[layers.index(group["layer"]), group["kv_head"]] = 1.0 if group["label"] == "retrieval" else 0.0
        return grid

    def to_json_dict(self) -> dict:
        return {
            "schema_version": SCHEMA_VERSION,
            "command": "kv",
            "model": asdict(self.model),
            "device": self.device,
            "dtype": self.dtype,
            "settings": {
                **asdict(self.settings),
                "masses": list(self.settings.masses),
                "retrieval_threshold": RETRIEVAL,
                "snapkv_window": observation_window(self.settings.budget),
                "sampled_rows": SAMPLED_ROWS,  # past this many rows: a sample of about as many rows per text …
                "sample_run": RUN,  # … in runs of this many consecutive rows
            },
            "rule": rule(self.settings),
            "texts": self.texts,
            "rows": self.rows,
            "tokens": self.tokens,
            "probe": self.probe,
            "heads": [head.to_json() for head in self.heads],
            "kv_heads": self.kv_heads(),
            "truncated": self.truncated,
        }


def rule(settings: Settings) -> str:
    return (
        f"retrieval: the needle probe's retrieval score ≥ {RETRIEVAL}, or StreamingLLM ({settings.sinks} sinks + "
        f"recent keys, {settings.budget} in all) keeps < {settings.target:g} of the head's attention; else streaming"
    )


def profile(
    backend,
    texts: Iterable[str],
    settings: Settings = Settings(),
    *,
    batch_size: int = 8,
    limit: int | None = None,
    total: int | None = None,
    truncate: bool = False,
    retrieval_probe: bool = True,
    seed: int = 0,
    progress=None,
    store: KVStore | None = None,
) -> KVReport:
    """Every head's KV profile over the texts (and, retrieval_probe, its retrieval score on the needle probe).
    store: the sums are written there after every CHUNK texts, and the texts it covers already are skipped."""
    if settings.budget <= settings.sinks:
        raise BadInput(
            f"--budget {settings.budget} leaves no room past the {settings.sinks} sinks", "give a larger budget"
        )
    if any(window < 1 for window in settings.windows):
        raise BadInput("a window is at least one key", "give --window 16,64 …")
    info = backend.info
    layers, heads = info.attention_layers, list(range(info.heads))
    totals = Totals(len(layers), info.heads, settings)
    first: list[str] = []

    def score(batch: list[str]):
        if not first:
            first.append(batch[0])
        results, tokens, cut = score_batch(backend, batch, layers, heads, truncate, scorer=scorer_for(settings))
        totals.add(results)  # only once the batch is whole
        return tokens, cut

    if store is None:
        run = over_batches(
            texts, score, batch_size=batch_size, limit=limit, total=total, progress=progress, sources="or --file FILE"
        )
    else:
        run = _stored(store, totals, texts, score, batch_size, limit, total, progress)
    retrieval, probe_described = None, None
    if retrieval_probe:
        retrieval, probe_described = _retrieval_scores(backend, seed)
    kv_group = info.heads // info.kv_heads
    profiles = []
    for index, layer in enumerate(layers):
        for head in heads:
            profiles.append(totals.head(index, layer, head, head // kv_group, retrieval))
    return KVReport(
        model=info,
        device=backend.device,
        dtype=backend.dtype,
        settings=settings,
        texts=run.texts,
        rows=int(totals.rows),
        tokens=int(totals.tokens),
        heads=profiles,
        text=first[0] if first else "",
        probe=probe_described,
        truncated=run.truncated,
        interrupted=run.interrupted,
    )


def _stored(store: KVStore, totals: Totals, texts: Iterable[str], score, batch_size: int, limit, total, progress):
    """over_batches a chunk of CHUNK texts at a time, the totals saved to the store after each: a resumed run
    restores them and skips the texts they cover (which must be the corpus' first ones)."""
    import itertools

    from attn_cli.analyses.batches import BatchesRun

    stream = iter(texts if limit is None else itertools.islice(texts, limit))
    done = store.texts
    digest = text_digest(list(itertools.islice(stream, done)))
    store.check_texts(digest.hexdigest())
    if store.state is not None:
        totals.restore(store.state)
    run = BatchesRun(texts=done)
    while chunk := list(itertools.islice(stream, CHUNK)):
        offset = run.texts

        def moved(count: int, _total, offset: int = offset) -> None:  # the chunk's progress, as the corpus'
            progress(offset + count, total)

        part = over_batches(
            chunk,
            score,
            batch_size=batch_size,
            limit=None,
            total=None,
            progress=None if progress is None else moved,
            sources="or --file FILE",
        )
        run.texts, run.tokens, run.truncated = (
            run.texts + part.texts,
            run.tokens + part.tokens,
            run.truncated + part.truncated,
        )
        if part.interrupted:  # Ctrl-C: the store keeps the chunks before this one; the report covers what ran
            run.interrupted = True
            break
        digest = text_digest(chunk, digest)
        store.save({**totals.arrays(), "texts": np.array(run.texts), "digest": np.array(digest.hexdigest())})
    if run.texts == 0:
        raise BadInput("no text to profile", "give --file a file with a text per line")
    return run


def _retrieval_scores(backend, seed: int) -> tuple[dict[tuple[int, int], float | None], dict]:
    from attn_cli.analyses.heads import PROBE_LENGTH, probe, run_heads
    from attn_cli.data.selection import Selection

    described = probe(backend, "retrieval", seed, PROBE_LENGTH)
    report = run_heads(backend, [described["text"]], Selection(), probe=described, source="probe")
    return {(one.layer, one.head): one.scores.get("retrieval") for one in report.heads}, described


def grid_step(keys: int) -> int:
    """The sample grid's step for a batch of `keys` rows: 1 (every row) up to SAMPLED_ROWS, else about
    SAMPLED_ROWS rows in runs of RUN (row_grid)."""
    return 1 if keys <= SAMPLED_ROWS else -(-keys // SAMPLED_ROWS)


def row_grid(positions: torch.Tensor, step: int) -> torch.Tensor:
    """(c,) bool: which row positions the statistics read, runs of RUN consecutive rows every RUN · step."""
    return (positions // RUN) % step == 0


def merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Half-open row spans, sorted, the overlapping or touching ones joined."""
    out: list[tuple[int, int]] = []
    for first, last in sorted(spans):
        if out and first <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], last))
        elif first < last:
            out.append((first, last))
    return out


def observation_window(budget: int) -> int:
    """SnapKV's observation window: its default 32 rows, or half the budget when that is smaller (the window's
    own keys are kept, and the budget must leave room for voted ones)."""
    return min(SNAPKV_WINDOW, budget // 2)


def scorer_for(settings: Settings) -> type:
    class KVScores(LayerScores):
        """Per layer and block of heads, each text's row sums of the KV statistics (math/kv.py)."""

        stacks = False  # consume reads this batch's rows (self.flags), one layer at a time

        def row_blocks(self, keys: int, block_rows: int):
            """Every row up to SAMPLED_ROWS rows; past that the runs of the sample grid (row_grid) and each text's
            observation window (SnapKV reads all of its rows), merged so that no row is read twice."""
            step = grid_step(keys)
            if step == 1:
                yield from super().row_blocks(keys, block_rows)
                return
            observed = observation_window(settings.budget)
            spans = [(start, min(start + RUN, keys)) for start in range(0, keys, RUN * step)]
            spans += [(max(0, length - observed), length) for length in self.lengths() if length > settings.budget]
            for first, last in merged(spans):
                for start in range(first, last, block_rows):
                    yield start, min(start + block_rows, last)

        def lengths(self) -> list[int]:
            return self.flags.real.sum(-1).tolist()

        def consume(self, layer_index: int | list[int], heads: slice, blocks, row_weights) -> None:
            assert isinstance(layer_index, int)  # stacks = False: one layer at a time
            real = self.flags.real  # (B, T)
            count = heads.stop - heads.start
            batch = real.shape[0]
            zeros = lambda: torch.zeros(batch, count, dtype=torch.float64)  # noqa: E731
            sums: dict[str | int, torch.Tensor] = {
                "sink": zeros(),
                "streaming": zeros(),
                "h2o": zeros(),
                "snapkv": zeros(),
            }
            sums.update({window: zeros() for window in settings.windows})
            rows, policy_rows, h2o_rows = (torch.zeros(batch, dtype=torch.float64) for _ in range(3))
            step = grid_step(real.shape[1])  # 1: every row is on the grid (a text of at most SAMPLED_ROWS rows)
            needed: dict[float, list[list[torch.Tensor]]] = {p: [[] for _ in range(count)] for p in settings.masses}
            accumulated = None
            lengths = self.lengths()  # each text's tokens
            observed = observation_window(settings.budget)
            windows: list[list[torch.Tensor]] = [[] for _ in lengths]  # each text's last `observed` rows
            for start, weights, allowed in blocks:
                weights = weights.float()
                if accumulated is None:
                    accumulated = torch.zeros(weights.shape[0], weights.shape[1], weights.shape[-1])
                stop = start + weights.shape[-2]
                grid = row_grid(torch.arange(start, stop), step)  # (c,) the rows the statistics read
                keys = allowed.sum(-1)  # (B, c) each row's allowed keys
                counted_rows = (real[:, start:stop] & (keys > 0) & grid).double()  # (B, c)
                dropping = counted_rows * (keys > settings.budget).double()  # rows a policy must drop keys from
                rows += counted_rows.sum(-1)
                policy_rows += dropping.sum(-1)

                def add(name, values, mask=counted_rows):  # values (B, h, c): summed over the counted rows
                    sums[name] += (values.double() * mask[:, None]).sum(-1).cpu()

                add("sink", kv.sink_mass(weights, settings.sinks))
                for window in settings.windows:
                    add(window, kv.window_mass(weights, start, window))
                add("streaming", kv.streaming_kept(weights, start, settings.sinks, settings.budget), dropping)
                # H2O's heavy hitters ranked by the attention of the grid's earlier rows (every earlier row when
                # every row is on the grid): rows off it (an observation window's) neither count nor vote
                on_grid = weights if bool(grid.all()) else weights * grid[:, None]
                add("h2o", kv.heavy_hitter_kept(on_grid, start, settings.budget, accumulated), dropping)
                h2o_rows += dropping.sum(-1)
                for text, length in enumerate(lengths):  # the rows of each text's observation window in this block
                    first, last = max(start, length - observed), min(stop, length)
                    if length > settings.budget and first < last:
                        windows[text].append(weights[text, :, first - start : last - start, :length])
                chosen = grid.nonzero()[:, 0]
                if not len(chosen):
                    continue
                # the sort is most of a long row's cost: only the grid's rows, and only the keys they can reach
                reachable = allowed[:, chosen].flatten(0, 1).any(0).nonzero()  # (n, 1) the keys any of them sees
                reach = int(reachable.max()) + 1 if len(reachable) else 1
                read = weights[:, :, chosen, :reach]
                counted_mask = counted_rows.bool()[:, chosen]  # (B, s)
                for p, keys_needed in zip(settings.masses, kv.keys_for_mass(read, settings.masses)):  # (B, h, s) each
                    for offset in range(count):  # each head's counted rows' needs, flat
                        needed[p][offset].append(keys_needed[:, offset][counted_mask].cpu())
            snap_rows = torch.zeros(batch, dtype=torch.float64)
            for text, parts in enumerate(windows):
                if parts:  # a text longer than the budget: SnapKV drops some of its keys
                    kept = kv.snapkv_kept(torch.cat(parts, 1), settings.budget)  # (h, w)
                    sums["snapkv"][text] += kept.double().sum(-1).cpu()
                    snap_rows[text] = kept.shape[-1]
            self.results.append(
                (
                    layer_index,
                    heads,
                    sums,
                    rows.cpu(),
                    policy_rows.cpu(),
                    h2o_rows.cpu(),
                    snap_rows,
                    needed,
                    sum(lengths),
                )
            )

    return KVScores


class Totals:
    """Sums over every text's rows, per (layer index, head); the keys-needed counts as histograms."""

    def __init__(self, layers: int, heads: int, settings: Settings):
        self.settings = settings
        names: list[str | int] = ["sink", "streaming", "h2o", "snapkv", *settings.windows]
        self.sums = {name: np.zeros((layers, heads)) for name in names}
        self.row_counts = np.zeros(layers)
        self.policy_counts = np.zeros((layers, heads))
        self.snap_counts = np.zeros((layers, heads))
        self.h2o_counts = np.zeros((layers, heads))
        self.histograms: dict[tuple[int, int, float], np.ndarray] = {}
        self.rows = 0.0
        self.tokens = 0.0  # every real token (row) of every text, read or not

    def arrays(self) -> dict[str, np.ndarray]:
        """Everything added so far as named arrays (a store's totals.npz): histograms padded to one length."""
        keys = sorted(self.histograms)
        longest = max((len(self.histograms[key]) for key in keys), default=1)
        return {
            **{f"sum_{name}": values for name, values in self.sums.items()},
            "row_counts": self.row_counts,
            "policy_counts": self.policy_counts,
            "snap_counts": self.snap_counts,
            "h2o_counts": self.h2o_counts,
            "rows": np.array(self.rows),
            "tokens": np.array(self.tokens),
            "histogram_keys": np.array(
                [[layer, head, self.settings.masses.index(p)] for layer, head, p in keys]
            ).reshape(-1, 3),
            "histograms": np.array(
                [np.pad(self.histograms[key], (0, longest - len(self.histograms[key]))) for key in keys]
            ).reshape(len(keys), longest),
        }

    def restore(self, arrays: dict[str, np.ndarray]) -> None:
        """What arrays() gave, back (the sums a store holds, to add the next texts to)."""
        for name in self.sums:
            self.sums[name] = arrays[f"sum_{name}"].copy()
        self.row_counts, self.policy_counts = arrays["row_counts"].copy(), arrays["policy_counts"].copy()
        self.snap_counts, self.h2o_counts = arrays["snap_counts"].copy(), arrays["h2o_counts"].copy()
        self.rows = float(arrays["rows"])
        self.tokens = float(arrays["tokens"]) if "tokens" in arrays else self.rows  # a store of before the sample
        self.histograms = {
            (int(layer), int(head), self.settings.masses[int(p)]): np.trim_zeros(counts, "b")
            if counts.any()
            else counts[:1]
            for (layer, head, p), counts in zip(arrays["histogram_keys"], arrays["histograms"])
        }

    def add(self, results) -> None:
        for layer_index, heads, sums, rows, policy_rows, h2o_rows, snap_rows, needed, tokens in results:
            for name, values in sums.items():
                self.sums[name][layer_index, heads] += values.sum(0).numpy()
            if heads.start == 0:
                self.row_counts[layer_index] += float(rows.sum())
                if layer_index == 0:
                    self.rows += float(rows.sum())
                    self.tokens += tokens
            self.policy_counts[layer_index, heads] += float(policy_rows.sum())
            self.snap_counts[layer_index, heads] += float(snap_rows.sum())
            self.h2o_counts[layer_index, heads] += float(h2o_rows.sum())
            for p, per_head in needed.items():
                for offset, parts in enumerate(per_head):
                    values = torch.cat(parts).numpy() if parts else np.zeros(0, dtype=np.int64)
                    key = (layer_index, heads.start + offset, p)
                    histogram = np.bincount(values, minlength=1)
                    old = self.histograms.get(key)
                    if old is not None:
                        size = max(len(old), len(histogram))
                        histogram = np.pad(histogram, (0, size - len(histogram))) + np.pad(old, (0, size - len(old)))
                    self.histograms[key] = histogram

    def head(self, index: int, layer: int, head: int, kv_head: int, retrieval: dict | None) -> HeadKV:
        rows = max(self.row_counts[index], 1.0)
        policy, snap = self.policy_counts[index, head], self.snap_counts[index, head]
        hitters = self.h2o_counts[index, head]
        mean = lambda name: float(self.sums[name][index, head] / rows)  # noqa: E731
        kept = lambda name: float(self.sums[name][index, head] / policy) if policy else None  # noqa: E731
        keys = {p: _distribution(self.histograms.get((index, head, p))) for p in self.settings.masses}
        streaming = kept("streaming")
        score = None if retrieval is None else retrieval.get((layer, head))
        far = (score is not None and score >= RETRIEVAL) or (streaming is not None and streaming < self.settings.target)
        needed = keys[self.settings.target]
        return HeadKV(
            layer=layer,
            head=head,
            kv_head=kv_head,
            sink=mean("sink"),
            windows={window: mean(window) for window in self.settings.windows},
            keys=keys,
            streaming=streaming,
            heavy_hitters=float(self.sums["h2o"][index, head] / hitters) if hitters else None,
            snapkv=float(self.sums["snapkv"][index, head] / snap) if snap else None,
            retrieval=score,
            label="retrieval" if far else "streaming",
            budget=int(np.ceil(needed[1])),
        )


def _distribution(histogram: np.ndarray | None) -> tuple[float, float, int]:
    """(mean, 90th percentile, max) of the counts a histogram holds (index = keys needed)."""
    if histogram is None or not histogram.sum():
        return (0.0, 0.0, 0)
    values = np.arange(len(histogram))
    cumulative = np.cumsum(histogram) / histogram.sum()
    return (
        float((values * histogram).sum() / histogram.sum()),
        float(values[np.searchsorted(cumulative, 0.9)]),
        int(values[histogram > 0].max()),
    )
