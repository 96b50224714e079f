"""The engine of `attn diagnose`: texts in padded batches → per text the attention sink rate and the
massive activations of the residual stream (formulas: math/diagnostics.py) → their means over the texts.

The batches, their bounded memory and Ctrl-C are `attn heads`' (analyses/batches.over_batches,
analyses/heads.score_batch): each layer's weights are made a block of rows at a time inside the forward, and only
each head's first-token weight is kept. The hidden states of one batch are held at once (the
forward's output_hidden_states), reduced to a median and a few entries per text and layer.
Pure orchestration over a loaded backend: no loading, no printing.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

import torch

from attn_cli.analyses.batches import Progress, over_batches
from attn_cli.analyses.heads import LayerScores, score_batch
from attn_cli.analyses.heads_report import corpus_document
from attn_cli.backends.capabilities import CapturesPadded, supports
from attn_cli.data.capture import ModelInfo
from attn_cli.data.document import Document, counted, num_json
from attn_cli.math.diagnostics import MASSIVE_FLOOR, MASSIVE_RATIO, Entry, first_token_sums, layer_entries, sink_rates
from attn_cli.math.head_scores import SINK_EPSILON
from attn_cli.plumbing.errors import BadInput

DIGITS = ".6g"  # the document's numbers: 6 significant digits
TOP_ENTRIES = 10  # the largest entries kept: per text and layer while scoring, over the corpus in the report
SHOWN_RECURRING = 10  # (layer, dim) pairs listed


class FirstTokenWeights(LayerScores):
    """Per layer, per text and head, α = the mean over the text's rows of the weight on token 0:
    results hold (layer index, head slice, α (B, h)). With a learned sink logit (gpt-oss) the rows are the keys'
    share, as the model uses them: what the sink logit takes is on no token, so it is not in α."""

    stacks = False  # consume reads this batch's rows (self.flags), one layer at a time

    def consume(self, layer_index: int | list[int], heads: slice, blocks, row_weights=None) -> None:
        """layer_index: one layer's (never a stack's list: stacks is False)."""
        real = self.flags.real  # (B, T)
        total: float | torch.Tensor = 0.0  # (B, h) once a block is added
        for start, weights, _ in blocks:
            total = total + first_token_sums(weights, real[:, start : start + weights.shape[-2]])  # (B, h)
        self.results.append((layer_index, heads, total / real.sum(-1, keepdim=True)))


@dataclass(frozen=True)
class Activation:
    """A large entry of the residual stream: Entry, named by its token and (over a corpus) its text."""

    layer: int
    position: int
    token: str
    dim: int
    value: float
    ratio: float | None  # |value| / the layer's median magnitude; None where the median is 0
    massive: bool
    text: str  # the text's first words (texts are not scored in file order)


@dataclass
class LayerDiagnosis:
    layer: int
    sink_rate: float | None  # mean over texts of the share of heads with α > ε; None: no attention matrix
    first_token: list[float]  # per head: α, mean over texts
    sinking: list[float]  # per head: share of texts with α > ε
    median: float | None  # mean over texts of the median |h| after this layer (None: no hidden states)
    massive: int | None  # massive entries, summed over texts
    massive_texts: int | None  # texts with at least one
    peak: Activation | None  # the layer's largest entry over the texts


@dataclass(frozen=True)
class Recurring:
    """A (layer, dim) of the residual stream and in how many texts it stood out."""

    layer: int
    dim: int
    massive_texts: int  # texts where it held a massive entry
    peak_texts: int  # texts where it held the layer's largest entry


@dataclass
class DiagnoseReport(Document):
    model: ModelInfo
    device: str
    dtype: str
    texts: int
    tokens: int
    source: str  # "arguments", a file path, or "stdin"
    sink_rate: float  # over the model: mean over texts of the share of all heads with α > ε
    layers: list[LayerDiagnosis]
    largest: list[Activation] | None  # the largest entry of each (layer, dim) over the texts, the largest
    # TOP_ENTRIES of them, largest first; None: the backend gives no hidden states
    recurring: list[Recurring] | None
    thresholds: dict = field(default_factory=dict)  # sink_epsilon, massive_ratio, massive_floor
    interrupted: bool = False
    truncated: int = 0

    def summary_shape(self) -> str:
        return f"{counted(self.texts, 'text')}, {counted(self.tokens, 'token')}, {counted(len(self.layers), 'layer')}"

    @property
    def massive(self) -> int | None:
        """Massive entries over all layers and texts."""
        counts = [layer.massive for layer in self.layers if layer.massive is not None]
        return sum(counts) if len(counts) == len(self.layers) else None

    def to_json_dict(self) -> dict:
        document = corpus_document(self, "diagnose")
        document["sink_rate"] = num_json(self.sink_rate, DIGITS)
        document["massive"] = self.massive
        document["layers"] = [
            {
                "layer": layer.layer,
                "sink_rate": num_json(layer.sink_rate, DIGITS),
                "first_token": [num_json(value, DIGITS) for value in layer.first_token],
                "sinking": [num_json(value, DIGITS) for value in layer.sinking],
                "median": num_json(layer.median, DIGITS),
                "massive": layer.massive,
                "massive_texts": layer.massive_texts,
                "peak": _entry_json(layer.peak),
            }
            for layer in self.layers
        ]
        document["largest"] = None if self.largest is None else [_entry_json(entry) for entry in self.largest]
        document["recurring"] = None if self.recurring is None else [asdict(pair) for pair in self.recurring]
        return document


def run_diagnose(
    backend,
    texts: Iterable[str],
    *,
    epsilon: float = SINK_EPSILON,
    ratio: float = MASSIVE_RATIO,
    floor: float = MASSIVE_FLOOR,
    batch_size: int = 32,
    limit: int | None = None,
    total: int | None = None,
    truncate: bool = False,
    source: str = "arguments",
    progress: Progress | None = None,
) -> DiagnoseReport:
    """The sink rate and massive activations of every text, batch by batch, and their means over the texts."""
    for value, name in ((epsilon, "the sink ε"), (ratio, "the massive ratio"), (floor, "the massive floor")):
        if not math.isfinite(value) or value < 0:
            raise BadInput(f"{name} must be a number ≥ 0, not {value}")
    info = backend.info
    # a hybrid's layers without an attention matrix have no α; the residual stream is read after every layer
    layers, heads = info.attention_layers, list(range(info.heads))
    totals = Totals(info.layers, info.heads, epsilon, ratio, floor)
    hidden_too = supports(backend, CapturesPadded)  # the toy hands over no residual stream

    def score(batch: list[str]):
        states: list[torch.Tensor] = []  # the residual stream after each layer (B, T, d_model), where it is handed over

        def keep(run, layers_: list[torch.Tensor]) -> None:
            states[:] = layers_

        results, tokens, cut = score_batch(
            backend,
            batch,
            layers,
            heads,
            truncate,
            scorer=FirstTokenWeights,  # α of the weights as the model uses them: a learned sink's share is on no token
            hidden=keep if hidden_too else None,
        )
        alpha = torch.zeros(len(batch), info.layers, info.heads, dtype=torch.float64)
        for layer_index, chunk, values in results:
            alpha[:, layers[layer_index], chunk] = values.detach().to("cpu", torch.float64)
        found = totals.entries(tokens, states, batch) if states else []
        totals.add(alpha, found)  # only once the batch is whole: an interrupted one counts not at all
        return tokens, cut

    run = over_batches(
        texts,
        score,
        batch_size=batch_size,
        limit=limit,
        total=total,
        progress=progress,
        sources="or --file FILE with a text per line",
    )
    return totals.report(backend, run, source, hidden_too)


class Totals:
    """Running sums over texts, in memory bounded by the model's size (not the corpus')."""

    def __init__(self, layers: int, heads: int, epsilon: float, ratio: float, floor: float):
        self.epsilon, self.ratio, self.floor = epsilon, ratio, floor
        self.alpha = torch.zeros(layers, heads, dtype=torch.float64)  # Σ over texts of α
        self.sinking = torch.zeros(layers, heads, dtype=torch.float64)  # texts with α > ε
        self.rates = torch.zeros(layers, dtype=torch.float64)  # Σ over texts of each layer's sink rate
        self.texts = 0
        self.medians = [0.0] * layers  # Σ over texts
        self.massive = [0] * layers
        self.massive_texts = [0] * layers
        # (layer, dim) -> its largest entry in any text: from each text's TOP_ENTRIES per layer, so at most
        # layers · d_model of them however long the corpus
        self.largest: dict[tuple[int, int], Activation] = {}
        self.recurring_massive: Counter = Counter()  # (layer, dim) -> texts
        self.recurring_peak: Counter = Counter()

    def entries(self, tokens: list[list], states: list[torch.Tensor], batch: list[str]) -> list[tuple]:
        """Per text and layer (layer, median, massive count, massive dims, entries as Activations):
        states[l] (B, T, d_model) after layer l, padded on the right; tokens[b]: text b's real tokens."""
        found = []
        for b, text_tokens in enumerate(tokens):
            opening = _opening(batch[b])
            for layer, state in enumerate(states):
                median, entries, massive, dims = layer_entries(
                    state[b, : len(text_tokens)], layer, self.ratio, self.floor, TOP_ENTRIES
                )
                found.append((layer, median, massive, dims, [_named(entry, text_tokens, opening) for entry in entries]))
        return found

    def add(self, alpha: torch.Tensor, found: list[tuple]) -> None:
        """alpha (B, L, H) of a batch's texts, and their entries()."""
        self.alpha += alpha.sum(0)
        self.sinking += (alpha > self.epsilon).sum(0)
        self.rates += sink_rates(alpha, self.epsilon)[0].sum(0)
        self.texts += alpha.shape[0]
        for layer, median, massive, dims, entries in found:
            self.medians[layer] += median
            self.massive[layer] += massive
            self.massive_texts[layer] += massive > 0
            self.recurring_peak[(layer, entries[0].dim)] += 1
            for dim in dims:
                self.recurring_massive[(layer, dim)] += 1
            for entry in entries:
                kept = self.largest.get((entry.layer, entry.dim))
                if kept is None or abs(entry.value) > abs(kept.value):  # ties: the first seen stays
                    self.largest[(entry.layer, entry.dim)] = entry

    def report(self, backend, run, source: str, hidden_too: bool) -> DiagnoseReport:
        alpha = self.alpha / self.texts  # (L, H)
        sinking = self.sinking / self.texts  # share of texts where the head sinks
        per_layer = self.rates / self.texts  # = sinking.mean(-1)
        attention = backend.info.attention_layers  # a hybrid's others have no α (nothing to average in)
        layers = [
            LayerDiagnosis(
                layer=layer,
                sink_rate=float(per_layer[layer]) if layer in attention else None,
                first_token=alpha[layer].tolist() if layer in attention else [],
                sinking=sinking[layer].tolist() if layer in attention else [],
                median=self.medians[layer] / self.texts if hidden_too else None,
                massive=self.massive[layer] if hidden_too else None,
                massive_texts=self.massive_texts[layer] if hidden_too else None,
                peak=max(
                    (entry for (at, _), entry in self.largest.items() if at == layer),
                    default=None,
                    key=lambda entry: abs(entry.value),
                ),
            )
            for layer in range(alpha.shape[0])
        ]
        recurring = None
        if hidden_too:
            pairs = set(self.recurring_massive) | set(self.recurring_peak)
            ranked = sorted(pairs, key=lambda pair: (-self.recurring_massive[pair], -self.recurring_peak[pair], pair))
            recurring = [
                Recurring(layer, dim, self.recurring_massive[(layer, dim)], self.recurring_peak[(layer, dim)])
                for layer, dim in ranked[:SHOWN_RECURRING]
            ]
        return DiagnoseReport(
            model=backend.info,
            device=backend.device,
            dtype=backend.dtype,
            texts=run.texts,
            tokens=run.tokens,
            source=source,
            sink_rate=float(per_layer[attention].mean()),
            layers=layers,
            largest=sorted(self.largest.values(), key=lambda entry: (-abs(entry.value), entry.layer, entry.dim))[
                :TOP_ENTRIES
            ]
            if hidden_too
            else None,
            recurring=recurring,
            interrupted=run.interrupted,
            truncated=run.truncated,
            thresholds={"sink_epsilon": self.epsilon, "massive_ratio": self.ratio, "massive_floor": self.floor},
        )


def _entry_json(entry: Activation | None) -> dict | None:
    return (
        None
        if entry is None
        else {**asdict(entry), "value": num_json(entry.value, DIGITS), "ratio": num_json(entry.ratio, DIGITS)}
    )


def _named(entry: Entry, tokens: list, opening: str) -> Activation:
    ratio = entry.ratio if math.isfinite(entry.ratio) else None
    return Activation(
        entry.layer, entry.position, tokens[entry.position].text, entry.dim, entry.value, ratio, entry.massive, opening
    )


def _opening(text: str, words: int = 6) -> str:
    shown = text.split()[:words]
    return " ".join(shown) + (" …" if len(text.split()) > words else "")
