"""`attn diff`: the same heads on two texts, or on one text in two checkpoints, head by head.

Per head: mean row entropy, mean self-weight, mean weight on the first token and the scores of
`attn heads` (previous-token, duplicate, induction, first, last, punctuation, self, broad, sink)
with the label they give, in A and in B.
Where both runs have the same tokens count (always for two checkpoints, which must tokenize the
text alike), also the Jensen–Shannon divergence of matching weight rows and the share of rows
whose most-attended key agrees; heads are then ranked by divergence, most changed first.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from statistics import fmean

import numpy as np

from attn_cli.analyses.compare import Change
from attn_cli.analyses.inspect import inspect_texts
from attn_cli.analyses.inspect_report import HeadReport, InspectReport
from attn_cli.data.document import SCHEMA_VERSION, Document, counted, num_json, short
from attn_cli.data.selection import Analysis, Selection
from attn_cli.plumbing.errors import BadInput


@dataclass
class HeadChange:
    layer: int
    head: int
    entropy: Change  # mean row entropy, nats
    self_weight: Change  # mean of the diagonal
    first_token: Change  # mean weight on token 0 ([CLS], BOS)
    js_divergence: float | None  # mean over rows of JS(A row, B row), nats; None when the lengths differ
    top1_agreement: float | None  # share of rows with the same most-attended key; None when the lengths differ
    scores: dict[str, Change]  # attn heads' scores (heads.SCORES), NaN where undefined for that text
    label: tuple[str, str]  # attn heads' label in A and in B


@dataclass
class DiffReport(Document):
    mode: str  # "texts" (one model, two texts) or "models" (one text, two checkpoints)
    a: InspectReport
    b: InspectReport
    heads: list[HeadChange]  # most changed first

    def summary_parts(self) -> list[str | None]:
        heads = counted(len(self.heads), "head")
        if self.mode == "models":
            return [f"{self.a.model.name} against {self.b.model.name}", short(self.a.text), heads]
        return [self.a.model.name, f"{short(self.a.text)} against {short(self.b.text)}", heads]

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
            return {
                "text": report.text,
                "model": asdict(report.model),
                "tokens": [token.to_json() for token in report.tokens],
            }

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
            "heads": [
                {
                    "layer": c.layer,
                    "head": c.head,
                    "entropy": change(c.entropy),
                    "self_weight": change(c.self_weight),
                    "first_token": change(c.first_token),
                    "js_divergence": num_json(c.js_divergence),
                    "top1_agreement": num_json(c.top1_agreement),
                    "scores": {name: change(value) for name, value in c.scores.items()},
                    "label": {"a": c.label[0], "b": c.label[1]},
                }
                for c in self.heads
            ],
        }

    def to_arrow(self):
        """One row per head, most changed first: layer, head, then each statistic in A and B (entropy_a,
        entropy_b, …), js_divergence and top1_agreement (null when the token counts differ), label_a, label_b,
        and attn heads' scores as score_previous_token_a, … (prefixed as the JSON nests them under "scores":
        the first_token score counts other rows than the first_token statistic)."""
        from attn_cli.data.tables import records

        def pair(name: str, value) -> dict:
            a, b = (value.baseline, value.variant) if isinstance(value, Change) else value
            return {f"{name}_a": a, f"{name}_b": b}

        return records(
            [
                {
                    "layer": c.layer,
                    "head": c.head,
                    **pair("entropy", c.entropy),
                    **pair("self_weight", c.self_weight),
                    **pair("first_token", c.first_token),
                    "js_divergence": c.js_divergence,
                    "top1_agreement": c.top1_agreement,
                    **pair("label", c.label),
                    **{
                        key: value
                        for name, change in c.scores.items()
                        for key, value in pair(f"score_{name}", change).items()
                    },
                }
                for c in self.heads
            ]
        )


def diff_runs(
    backend_a, backend_b, text_a: str, text_b: str, selection: Selection, analysis: Analysis, mode: str
) -> DiffReport:
    """Run A and B (the same backend for two texts), then compare every selected head."""
    if mode == "models":
        _check_alike(backend_a, backend_b)
    [a] = inspect_texts(backend_a, [text_a], selection, analysis)
    [b] = inspect_texts(backend_b, [text_b], selection, analysis)
    for report in (a, b):
        if not report.window.is_whole:
            raise BadInput(
                f"diff needs whole matrices, and {len(report.tokens)} tokens over the selected heads "
                f"pass the {analysis.cell_limit:,}-cell limit",
                "select fewer layers or heads",
            )
    if mode == "models" and [t.id for t in a.tokens] != [t.id for t in b.tokens]:
        raise BadInput(
            "the two checkpoints tokenize the text differently", "compare checkpoints that share a tokenizer"
        )
    scores_a, scores_b = head_type_scores(a), head_type_scores(b)
    changes = [
        head_change(layer, head_a, head_b, scores_a[layer, head_a.head], scores_b[layer, head_a.head])
        for (layer, head_a), (_, head_b) in zip(a.heads(), b.heads())
    ]
    if len(a.tokens) == len(b.tokens):
        changes.sort(key=_minus_divergence)
    else:
        changes.sort(key=lambda c: -abs(c.entropy.variant - c.entropy.baseline))
    return DiffReport(mode, a, b, changes)


def head_type_scores(report: InspectReport) -> dict[tuple[int, int], list[float]]:
    """attn heads' scores of every head of the report, from its whole weight matrices."""
    import torch

    from attn_cli.math.head_scores import head_scores, token_flags

    flags = token_flags([report.tokens])
    scores = {}
    for layer in report.layers:
        weights = torch.from_numpy(np.stack([_weights(head) for head in layer.heads]))[None]  # (1, h, T, T)
        allowed = torch.from_numpy(_allowed(layer.heads[0]))[None]  # (1, T, T): every head's mask
        values, _ = head_scores(weights, allowed, flags)  # (1, h, len(SCORES))
        for head, row in zip(layer.heads, values[0].tolist()):
            scores[layer.layer, head.head] = row
    return scores


def head_change(layer: int, a: HeadReport, b: HeadReport, scores_a: list[float], scores_b: list[float]) -> HeadChange:
    import torch

    from attn_cli.math import measures
    from attn_cli.math.head_scores import SCORES, label

    weights_a, weights_b = _weights(a), _weights(b)
    comparable = weights_a.shape == weights_b.shape
    if comparable:
        p, q = torch.from_numpy(weights_a).double(), torch.from_numpy(weights_b).double()  # (T, T)
        rows = torch.from_numpy(_allowed(a)).any(-1)  # rows that attend anything
        js = float(measures.js_divergence(p, q)[rows].mean())
        agreement = measures.top1_agreement(p[rows], q[rows])
    return HeadChange(
        layer=layer,
        head=a.head,
        entropy=Change(fmean(a.entropy), fmean(b.entropy)),
        self_weight=Change(fmean(a.self_weight), fmean(b.self_weight)),
        first_token=Change(float(weights_a[:, 0].mean()), float(weights_b[:, 0].mean())),
        js_divergence=js if comparable else None,
        top1_agreement=agreement if comparable else None,
        scores={name: Change(x, y) for name, x, y in zip(SCORES, scores_a, scores_b)},
        label=(label(scores_a), label(scores_b)),
    )


def _weights(head: HeadReport) -> np.ndarray:
    """The head's (T, T) weights, which a whole window always keeps (diff_runs refuses any other)."""
    assert head.weights is not None, "diff_runs refuses a run whose matrices are not whole"
    return head.weights


def _allowed(head: HeadReport) -> np.ndarray:
    """(T, T) bool: which keys each query may attend, the mask every view draws (HeadReport.masked)."""
    masked = head.masked(_weights(head))
    assert masked is not None, "masked() keeps a matrix it is given"
    return ~np.isnan(masked)


def _minus_divergence(change: HeadChange) -> float:
    """The sort key of runs with matching rows (every head then has a JS divergence): most changed first."""
    assert change.js_divergence is not None, "runs with as many tokens have a divergence for every head"
    return -change.js_divergence


def _check_alike(a, b) -> None:
    """Two checkpoints are comparable head by head only with the same shape."""
    shape = lambda info: (info.layers, info.heads, info.kv_heads, info.head_dim)  # noqa: E731
    if shape(a.info) != shape(b.info):
        raise BadInput(
            f"{a.info.name} and {b.info.name} differ in shape "
            f"(layers, heads, kv heads, head dim: {shape(a.info)} vs {shape(b.info)})",
            "diff compares checkpoints of one architecture, e.g. before and after fine-tuning",
        )
