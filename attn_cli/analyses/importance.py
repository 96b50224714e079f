"""`attn importance`: how much each head matters to a language model's loss, from one backward pass per batch.

Michel, Levy & Neubig 2019 ("Are Sixteen Heads Really Better than One?"): put a gate ξ_h = 1 on each head's
output and take I_h = |∂L/∂ξ_h|, the first-order estimate of what removing the head (ξ_h = 0) changes.
Here L is a text's mean loss of its own next tokens, the gates sit where a head's output exists on its own
(before o_proj mixes the heads, backends/interventions.py), every text of a batch has its own gates (so one
backward gives each text's gradient), and I_h is the mean over the texts of |∂L_text/∂ξ_h|. (The authors'
code takes |·| of the gradient summed over a batch, and can normalise each layer's importances; neither is
done here.)

The pruning curve: heads removed (zero-ablated) in order of increasing importance, the corpus loss after
each step, as the paper's figure plots it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from attn_cli.analyses.batches import batches as padded_batches
from attn_cli.backends.capabilities import Intervenes, require
from attn_cli.backends.interventions import FedBatch, HeadChanges
from attn_cli.data.capture import ModelInfo
from attn_cli.data.document import SCHEMA_VERSION, Document, counted, num_json
from attn_cli.math.effects import token_losses
from attn_cli.plumbing.errors import BadInput, UnsupportedModel

BATCH = 8
STEPS = 16  # pruning-curve points past this many heads: evenly spaced counts


@dataclass
class ImportanceReport(Document):
    model: ModelInfo
    device: str
    dtype: str
    texts: int
    predicted: int  # the predicted tokens the loss is over
    loss: float  # the corpus's mean loss per predicted token, nothing removed
    layers: list[int]
    importance: np.ndarray  # (layers, heads) mean over texts of |∂L_text/∂ξ|
    spread: np.ndarray  # (layers, heads) their standard deviation over texts
    pruning: list[tuple[int, float]] = field(default_factory=list)  # (heads removed, corpus loss)
    text: str = ""  # the first text (what a figure's title line shows)

    def summary_shape(self) -> str:
        return f"{counted(self.texts, 'text')}, {counted(self.predicted, 'predicted token')}"

    def order(self) -> list[tuple[int, int]]:
        """Every head, least important first (the pruning order)."""
        flat = np.argsort(self.importance, axis=None, kind="stable")
        heads = self.importance.shape[1]
        return [(self.layers[int(index) // heads], int(index) % heads) for index in flat]

    def top(self, count: int = 5) -> list[tuple[int, int, float]]:
        ranked = self.order()[::-1][:count]
        return [(layer, head, float(self.importance[self.layers.index(layer), head])) for layer, head in ranked]

    def to_arrow(self):
        """One row per head, least important first: layer, head, importance, spread (std over the texts), rank
        (0: the least important)."""
        from attn_cli.data.tables import records

        rows = []
        for rank, (layer, head) in enumerate(self.order()):
            row = self.layers.index(layer)
            rows.append(
                {
                    "layer": layer,
                    "head": head,
                    "importance": float(self.importance[row, head]),
                    "spread": float(self.spread[row, head]),
                    "rank": rank,
                }
            )
        return records(rows)

    def to_json_dict(self) -> dict:
        return {
            "schema_version": SCHEMA_VERSION,
            "command": "importance",
            "model": asdict(self.model),
            "device": self.device,
            "dtype": self.dtype,
            "texts": self.texts,
            "predicted": self.predicted,
            "loss": num_json(self.loss),
            "layers": self.layers,
            "importance": [[num_json(value) for value in row] for row in self.importance],
            "spread": [[num_json(value) for value in row] for row in self.spread],
            "order": [list(pair) for pair in self.order()],
            "pruning": [{"removed": removed, "loss": num_json(loss)} for removed, loss in self.pruning],
        }


def head_importance(
    backend, texts: Iterable[str], *, batch_size: int = BATCH, prune: bool = True, truncate: bool = False
) -> ImportanceReport:
    """Every head's importance over the texts, and (prune) the loss as heads are removed least important first."""
    model = require(backend, Intervenes, "attn importance")
    info = backend.info
    layers = info.attention_layers
    if batch_size < 1:
        raise BadInput(f"--batch-size {batch_size} is not a batch", "give 1 or more")
    given = [texts] if isinstance(texts, str) else list(texts)
    batches = list(padded_batches(given, batch_size))  # shortest first within a window: little padding
    if not batches:
        raise BadInput("no texts to measure", "give a text, or --file with a text per line")
    feds = [model.intervention_batch(batch, truncate) for batch in batches]
    if not feds[0].logits:  # a model that cannot serve the request: exit 1, as require's refusals
        raise UnsupportedModel(
            f"attn importance differentiates a language model's loss, and {info.name} has no language-model head",
            "use a causal language model, such as --model lab or a GPT-2",
        )
    grads: list[np.ndarray] = []  # per text (layers, heads)
    total, count = 0.0, 0
    for fed in feds:
        rows = fed.inputs["input_ids"].shape[0]
        gates = {layer: torch.ones(rows, info.heads, requires_grad=True) for layer in layers}
        logits = model.edited_forward(fed, HeadChanges(gates), grad=True)
        with torch.enable_grad():
            losses, scored = _text_losses(logits, fed)  # (B,) mean loss of each text, (B,) its predicted tokens
            found = torch.autograd.grad(losses.sum(), [gates[layer] for layer in layers])
        grads.extend(np.stack([g.abs().numpy() for g in found], axis=1))  # each (layers, heads)
        total += float((losses.detach() * scored).sum())
        count += int(scored.sum())
    if not count:
        raise BadInput("no text has a token after its first to predict", "give longer texts")
    stacked = np.stack(grads)  # (texts, layers, heads)
    report = ImportanceReport(
        model=info,
        device=backend.device,
        dtype=backend.dtype,
        texts=len(stacked),
        predicted=count,
        loss=total / count,
        layers=layers,
        importance=stacked.mean(0),
        spread=stacked.std(0),
        text=given[0],
    )
    if prune:
        report.pruning = _pruning_curve(model, feds, report.order(), info.heads)
    return report


def _text_losses(logits: torch.Tensor, fed: FedBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """Each text's mean loss over its predicted tokens (real, not special, after the first) and how many there
    are: (B,), (B,)."""
    ids = fed.inputs["input_ids"]
    predicted = torch.zeros_like(ids, dtype=torch.bool)
    for row, tokens in enumerate(fed.tokens):
        for token in tokens[1:]:
            predicted[row, token.index] = not token.special
    losses = token_losses(logits, ids) * predicted
    scored = predicted.sum(1)
    return losses.sum(1) / scored.clamp_min(1), scored


def _pruning_curve(model, feds: list[FedBatch], order: list[tuple[int, int]], heads: int) -> list[tuple[int, float]]:
    """The corpus loss with the first k heads of `order` zero-ablated, for k = 0 … every head (at most STEPS + 1
    points, evenly spaced)."""
    counts = list(range(len(order) + 1))
    if len(counts) > STEPS + 1:
        counts = sorted({round(step * len(order) / STEPS) for step in range(STEPS + 1)})
    curve = []
    for removed in counts:
        total, count = 0.0, 0
        for fed in feds:
            rows = fed.inputs["input_ids"].shape[0]
            gates = {layer: torch.ones(rows, heads) for layer, _ in order}
            for layer, head in order[:removed]:
                gates[layer][:, head] = 0.0
            losses, scored = _text_losses(model.edited_forward(fed, HeadChanges(gates)), fed)
            total += float((losses * scored).sum())
            count += int(scored.sum())
        curve.append((removed, total / count))
    return curve
