"""The Report: plain data that every renderer reads, and its one JSON serializer."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from attn_cli.backends.base import ModelInfo, Token

SCHEMA_VERSION = 1

Matrix = list[list[float | None]]  # rows of floats; None marks a masked cell


@dataclass(frozen=True)
class Symmetry:
    max_abs_diff: float  # max |S_ij - S_ji|
    relative: float  # ||S - Sᵀ||_F / ||S||_F
    symmetric: bool  # relative <= tolerance


@dataclass
class TopKey:
    index: int
    token: str
    weight: float


@dataclass
class HeadReport:
    head: int
    kv_head: int
    scale: float
    scores: Matrix | None  # (T, T) pre-softmax, scaled, masked → None
    weights: Matrix | None  # (T, T) post-softmax
    symmetry: Symmetry
    entropy: list[float]  # (T,) nats per query row
    self_weight: list[float]  # (T,) the diagonal of weights
    top: list[list[TopKey]]  # (T, ≤k) most-attended keys per query
    tensors: dict[str, Matrix] = field(default_factory=dict)  # q, k, v, output with --include qkv


@dataclass
class LayerReport:
    layer: int
    heads: list[HeadReport]


@dataclass
class InspectReport:
    text: str
    model: ModelInfo
    device: str
    dtype: str
    tokens: list[Token]
    layers: list[LayerReport]
    truncated_from: int | None = None

    def heads(self):
        """Every (layer, head) pair in the report, in order."""
        return [(layer.layer, head) for layer in self.layers for head in layer.heads]

    def to_json_dict(self) -> dict:
        """The schema_version 1 document (README "JSON output"). Floats keep float32 precision."""
        document = {
            "schema_version": SCHEMA_VERSION,
            "command": "inspect",
            "text": self.text,
            "model": asdict(self.model),
            "device": self.device,
            "dtype": self.dtype,
            "tokens": [asdict(token) for token in self.tokens],
            "layers": [
                {"layer": layer.layer, "heads": [_head_json(head) for head in layer.heads]} for layer in self.layers
            ],
        }
        if self.truncated_from is not None:
            document["truncated_from"] = self.truncated_from
        return document


def _head_json(head: HeadReport) -> dict:
    record = {"head": head.head, "kv_head": head.kv_head, "scale": _num(head.scale)}
    if head.scores is not None:
        record["scores"] = _matrix(head.scores)
    if head.weights is not None:
        record["weights"] = _matrix(head.weights)
    record["symmetry"] = {
        "max_abs_diff": _num(head.symmetry.max_abs_diff),
        "relative": _num(head.symmetry.relative),
        "symmetric": head.symmetry.symmetric,
    }
    record["entropy"] = [_num(x) for x in head.entropy]
    record["self_weight"] = [_num(x) for x in head.self_weight]
    record["top"] = [
        [{"index": t.index, "token": t.token, "weight": _num(t.weight)} for t in row] for row in head.top
    ]
    for name, tensor in head.tensors.items():
        record[name] = _matrix(tensor)
    return record


def _num(value: float | None) -> float | None:
    """7 significant digits (float32 precision); None for masked or non-finite, so JSON never has NaN."""
    if value is None or not math.isfinite(value):
        return None
    return float(f"{value:.7g}")


def _matrix(rows: Matrix) -> Matrix:
    return [[_num(value) for value in row] for row in rows]
