"""`attn diff`: the same heads on two texts, or on one text in two checkpoints, head by head.

Per head: mean row entropy, mean self-weight and mean weight on the first token, in A and in B.
Where both runs have the same tokens count (always for two checkpoints, which must tokenize the
text alike), also the Jensen–Shannon divergence of matching weight rows and the share of rows
whose most-attended key agrees; heads are then ranked by divergence, most changed first.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from statistics import fmean

import numpy as np

from attn_cli.core import inspect_texts
from attn_cli.document import SCHEMA_VERSION, Document
from attn_cli.errors import BadInput
from attn_cli.report import Change, HeadReport, InspectReport, num_json
from attn_cli.selection import Analysis, Selection


@dataclass
class HeadChange:
    layer: int
    head: int
    entropy: Change  # mean row entropy, nats
    self_weight: Change  # mean of the diagonal
    first_token: Change  # mean weight on token 0 ([CLS], BOS)
    js_divergence: float | None  # mean over rows of JS(A row, B row), nats; None when the lengths differ
    top1_agreement: float | None  # share of rows with the same most-attended key; None when the lengths differ


@dataclass
class DiffReport(Document):
    mode: str  # "texts" (one model, two texts) or "models" (one text, two checkpoints)
    a: InspectReport
    b: InspectReport
    heads: list[HeadChange]  # most changed first

    @property
    def model(self):
        """A's model (the one the command was asked about)."""
        return self.a.model

    @property
    def comparable(self) -> bool:
        """Matching rows exist: both runs have the same number of tokens."""
        return len(self.a.tokens) == len(self.b.tokens)

    def to_json_dict(self) -> dict:
        def side(report: InspectReport) -> dict:
            return {"text": report.text, "model": asdict(report.model),
                    "tokens": [asdict(token) for token in report.tokens]}

        def change(value: Change) -> dict:
            return {"a": num_json(value.baseline), "b": num_json(value.variant)}

        return {
            "schema_version": SCHEMA_VERSION,
            "command": "diff",
            "mode": self.mode,
            "device": self.a.device,
            "a": side(self.a),
            "b": side(self.b),
            "comparable": self.comparable,
            "heads": [{"layer": c.layer, "head": c.head, "entropy": change(c.entropy),
                       "self_weight": change(c.self_weight), "first_token": change(c.first_token),
                       "js_divergence": num_json(c.js_divergence), "top1_agreement": num_json(c.top1_agreement)}
                      for c in self.heads],
        }


def diff_runs(backend_a, backend_b, text_a: str, text_b: str, selection: Selection, analysis: Analysis,
              mode: str) -> DiffReport:
    """Run A and B (the same backend for two texts), then compare every selected head."""
    if mode == "models":
        _check_alike(backend_a, backend_b)
    [a] = inspect_texts(backend_a, [text_a], selection, analysis)
    [b] = inspect_texts(backend_b, [text_b], selection, analysis)
    for report in (a, b):
        if not report.window.is_whole:
            raise BadInput(f"diff needs whole matrices, and {len(report.tokens)} tokens over the selected heads "
                           f"pass the {analysis.cell_limit:,}-cell limit", "select fewer layers or heads")
    if mode == "models" and [t.id for t in a.tokens] != [t.id for t in b.tokens]:
        raise BadInput("the two checkpoints tokenize the text differently",
                       "compare checkpoints that share a tokenizer")
    changes = [head_change(layer, head_a, head_b) for (layer, head_a), (_, head_b) in zip(a.heads(), b.heads())]
    if len(a.tokens) == len(b.tokens):
        changes.sort(key=lambda c: -c.js_divergence)
    else:
        changes.sort(key=lambda c: -abs(c.entropy.variant - c.entropy.baseline))
    return DiffReport(mode, a, b, changes)


def head_change(layer: int, a: HeadReport, b: HeadReport) -> HeadChange:
    import torch

    from attn_cli import analysis

    comparable = a.weights.shape == b.weights.shape
    if comparable:
        p, q = torch.from_numpy(a.weights).double(), torch.from_numpy(b.weights).double()  # (T, T)
        rows = torch.from_numpy(~np.isnan(a.scores)).any(-1)  # rows that attend anything
        js = float(analysis.js_divergence(p, q)[rows].mean())
        agreement = analysis.top1_agreement(p[rows], q[rows])
    return HeadChange(
        layer=layer,
        head=a.head,
        entropy=Change(fmean(a.entropy), fmean(b.entropy)),
        self_weight=Change(fmean(a.self_weight), fmean(b.self_weight)),
        first_token=Change(float(a.weights[:, 0].mean()), float(b.weights[:, 0].mean())),
        js_divergence=js if comparable else None,
        top1_agreement=agreement if comparable else None,
    )


def _check_alike(a, b) -> None:
    """Two checkpoints are comparable head by head only with the same shape."""
    shape = lambda info: (info.layers, info.heads, info.kv_heads, info.head_dim)  # noqa: E731
    if shape(a.info) != shape(b.info):
        raise BadInput(f"{a.info.name} and {b.info.name} differ in shape "
                       f"(layers, heads, kv heads, head dim: {shape(a.info)} vs {shape(b.info)})",
                       "diff compares checkpoints of one architecture, e.g. before and after fine-tuning")
