"""`attn steps`: one head walked through the formula on the user's sentence, stage by stage.

X → Q = X·W_Q, K, V → Q·Kᵀ → ÷√d → mask → softmax → ·V → concat heads → W_O,
each stage a matrix with its shape, as the background articles compute it. The
toy has every stage; another backend shows the stages it has (no weights of
its own to multiply: its Q, K, V as the model computed them, no W_O).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from attn_cli.analyses.inspect import check_texts
from attn_cli.data.capture import ModelInfo
from attn_cli.data.document import SCHEMA_VERSION, Document, counted, matrix_json
from attn_cli.data.selection import parse_selection
from attn_cli.plumbing.errors import BadInput


@dataclass
class Stage:
    name: str  # "Q = X·W_Q"
    note: str  # what the stage does, in a sentence
    values: np.ndarray  # (rows, columns) float32; NaN where masked
    kind: str  # "tokens×dims" (a vector per token) or "tokens×tokens"


@dataclass
class StepsReport(Document):
    text: str
    model: ModelInfo
    tokens: list
    layer: int
    head: int
    stages: list[Stage]
    missing: list[str]  # stages this backend cannot show
    device: str = "cpu"
    dtype: str = "float32"
    truncated_from: int | None = None

    def summary_shape(self) -> str:
        return (
            f"{counted(len(self.tokens), 'token')}, head {self.layer}.{self.head}, {counted(len(self.stages), 'stage')}"
        )

    def to_json_dict(self) -> dict:
        return {
            "schema_version": SCHEMA_VERSION,
            "command": "steps",
            "text": self.text,
            "model": asdict(self.model),
            "tokens": [token.to_json() for token in self.tokens],
            "layer": self.layer,
            "head": self.head,
            "stages": [
                {
                    "name": stage.name,
                    "note": stage.note,
                    "kind": stage.kind,
                    "shape": list(stage.values.shape),
                    "values": matrix_json(stage.values),
                }
                for stage in self.stages
            ],
            "missing": self.missing,
        }


def walk_head(backend, text: str, layer: int | str = 0, head: int | str = 0) -> StepsReport:
    """One head of one layer through every stage the backend has, on `text`."""
    from attn_cli.math import attention

    check_texts([text])
    info = backend.info
    layer = _one(layer, info.layers, "layer")
    head = _one(head, info.heads, "head")
    capture = backend.capture_batch([text], [layer], keep_inputs=True)[0]
    record = capture.layers[layer]
    kv_head = head // (record.q.shape[0] // record.k.shape[0])  # this layer's own grouping (it may differ by layer)
    q, k, v = record.q[head].float(), record.k[kv_head].float(), record.v[kv_head].float()  # (T, D)
    allowed = record.mask.full()  # (T, T): steps is for short sentences
    if record.head_mask is not None:  # Doge's: this head's own keys (and its learned bias, below)
        allowed = allowed & record.head_mask[head]
    stages = []
    if record.inputs is not None:
        stages.append(
            Stage("X", "one row per token: the vectors attention starts from", _rows(record.inputs), "tokens×dims")
        )
    own_weights = record.projected is not None  # the backend computes the layer itself (the toy)
    names = ("Q = X·W_Q", "K = X·W_K", "V = X·W_V") if own_weights else ("Q", "K", "V")
    notes = (
        "the queries: what each token looks for",
        "the keys: what each token offers to be found by",
        "the values: what each token hands over",
    )
    stages += [Stage(name, note, _rows(matrix), "tokens×dims") for name, note, matrix in zip(names, notes, (q, k, v))]
    score = record.scorer_for([head])
    if record.scorer is None:
        raw = q @ k.T  # (T, T)
        stages.append(Stage("Q·Kᵀ", "every query against every key: dot products", _rows(raw), "tokens×tokens"))
        scores = score(q[None], k[None])[0]
        stages.append(
            Stage(
                f"× {record.scale:.4g}",
                "scaled (1/√d for scaled dot product) so the softmax does not saturate",
                _rows(scores),
                "tokens×tokens",
            )
        )
    else:
        scores = score(q[None], k[None])[0]
        stages.append(Stage("score(Q, K)", "the model's own scoring function", _rows(scores), "tokens×tokens"))
    if record.head_mask is not None:
        scores = scores + record.bias[head].float()
        stages.append(
            Stage(
                "+ bias",
                "the model's learned per-head mask bias, added before the mask keeps this head's own keys",
                _rows(scores),
                "tokens×tokens",
            )
        )
    masked = scores.masked_fill(~allowed, float("nan"))
    stages.append(
        Stage("mask", "positions that may not be attended are removed (blank)", _rows(masked), "tokens×tokens")
    )
    if record.sink is None:
        weights = attention.masked_softmax(scores, allowed)
        stages.append(Stage("softmax", "each row becomes weights that sum to 1", _rows(weights), "tokens×tokens"))
    else:  # a learned sink logit (gpt-oss): one more column of every row's softmax, holding no value
        sink = float(record.sink[head])
        weights = attention.sink_softmax(scores[None], allowed, record.sink[head : head + 1].float())[0][0]
        stages.append(
            Stage(
                "softmax",
                f"each row becomes weights, with one more logit, the learned sink ({sink:.4g}): the keys' weights "
                "sum to 1 − the sink's share",
                _rows(weights),
                "tokens×tokens",
            )
        )
    output = attention.attend(weights, v)
    stages.append(
        Stage("·V", "each token's weighted mix of the values: this head's output", _rows(output), "tokens×dims")
    )
    missing = []
    if own_weights:  # the layer's own concat and W_O, from the same forward pass
        stages.append(
            Stage("concat heads", f"the {info.heads} heads' outputs side by side", _rows(record.concat), "tokens×dims")
        )
        stages.append(Stage("·W_O", "the output projection mixes the heads", _rows(record.projected), "tokens×dims"))
    else:
        missing = ["X·W_Q (the projection weights)", "concat heads", "·W_O"]
    return StepsReport(
        text, info, capture.tokens, layer, head, stages, missing, capture.device, capture.dtype, capture.truncated_from
    )


def _one(spec, count: int, what: str) -> int:
    chosen = parse_selection(spec, count, what)
    if len(chosen) != 1:
        raise BadInput(
            f"attn steps walks one {what}; --{what} {spec} names {len(chosen)}", f"pick one of 0-{count - 1}"
        )
    return chosen[0]


def _rows(matrix) -> np.ndarray:
    """(rows, columns) float32, NaN kept (masked)."""
    return matrix.detach().float().to("cpu", copy=True).numpy()
