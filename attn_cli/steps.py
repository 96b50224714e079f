"""`attn steps`: one head walked through the formula on the user's sentence, stage by stage.

X → Q = X·W_Q, K, V → Q·Kᵀ → ÷√d → mask → softmax → ·V → concat heads → W_O,
each stage a matrix with its shape, as the background articles compute it. The
toy has every stage; another backend shows the stages it has (no weights of
its own to multiply: its Q, K, V as the model computed them, no W_O).
"""

from __future__ import annotations

from dataclasses import dataclass

from attn_cli.core import RunOptions, check_options, load_for
from attn_cli.errors import BadInput
from attn_cli.report import SCHEMA_VERSION, matrix_json
from attn_cli.selection import parse_selection


@dataclass(frozen=True)
class StepsRequest(RunOptions):
    model: str = "toy"
    layers: str = "0"
    heads: str = "0"


@dataclass
class Stage:
    name: str  # "Q = X·W_Q"
    note: str  # what the stage does, in a sentence
    values: list[list[float | None]]  # rows; None where masked
    kind: str  # "tokens×dims" (a vector per token) or "tokens×tokens"


@dataclass
class StepsReport:
    text: str
    model: object  # ModelInfo
    tokens: list
    layer: int
    head: int
    stages: list[Stage]
    missing: list[str]  # stages this backend cannot show
    device: str = "cpu"
    dtype: str = "float32"
    truncated_from: int | None = None

    def to_json_dict(self) -> dict:
        from dataclasses import asdict

        return {
            "schema_version": SCHEMA_VERSION,
            "command": "steps",
            "text": self.text,
            "model": asdict(self.model),
            "tokens": [asdict(token) for token in self.tokens],
            "layer": self.layer,
            "head": self.head,
            "stages": [{"name": stage.name, "note": stage.note, "kind": stage.kind,
                        "shape": [len(stage.values), len(stage.values[0]) if stage.values else 0],
                        "values": matrix_json(stage.values)} for stage in self.stages],
            "missing": self.missing,
        }


def run_steps(request: StepsRequest, backend=None) -> StepsReport:
    import torch

    from attn_cli import attention

    check_options(request)
    backend = backend or load_for(request)
    info = backend.info
    layer = _one(request.layers, info.layers, "layer")
    head = _one(request.heads, info.heads, "head")
    capture = backend.capture(request.text, [layer], keep_inputs=True)
    record = capture.layers[layer]
    kv_head = info.kv_head_of(head)
    q, k, v = record.q[head].float(), record.k[kv_head].float(), record.v[kv_head].float()  # (T, D)
    allowed = record.mask.full()  # (T, T): steps is for short sentences
    stages = []
    if record.inputs is not None:
        stages.append(Stage("X", "one row per token: the vectors attention starts from", _rows(record.inputs),
                            "tokens×dims"))
    toy = getattr(backend, "weights", None)
    names = ("Q = X·W_Q", "K = X·W_K", "V = X·W_V") if toy is not None else ("Q", "K", "V")
    notes = ("the queries: what each token looks for", "the keys: what each token offers to be found by",
             "the values: what each token hands over")
    stages += [Stage(name, note, _rows(matrix), "tokens×dims") for name, note, matrix in zip(names, notes, (q, k, v))]
    if record.scorer is None:
        raw = q @ k.T  # (T, T)
        stages.append(Stage("Q·Kᵀ", "every query against every key: dot products", _rows(raw), "tokens×tokens"))
        scores = raw * record.scale
        stages.append(Stage(f"× {record.scale:.4g}", "scaled (1/√d for scaled dot product) so the softmax does not "
                            "saturate", _rows(scores), "tokens×tokens"))
    else:
        scores = record.scorer(q, k, head)
        stages.append(Stage("score(Q, K)", "the model's own scoring function", _rows(scores), "tokens×tokens"))
    masked = scores.masked_fill(~allowed, float("nan"))
    stages.append(Stage("mask", "positions that may not be attended are removed (blank)", _rows(masked),
                        "tokens×tokens"))
    weights = attention.masked_softmax(scores, allowed)
    stages.append(Stage("softmax", "each row becomes weights that sum to 1", _rows(weights), "tokens×tokens"))
    output = attention.attend(weights, v)
    stages.append(Stage("·V", "each token's weighted mix of the values: this head's output", _rows(output),
                        "tokens×dims"))
    missing = []
    if toy is not None:
        heads = [attention.attend(attention.masked_softmax(_head_scores(record, h, info.kv_head_of(h)), allowed),
                                  record.v[info.kv_head_of(h)].float()) for h in range(info.heads)]
        concat = torch.cat(heads, dim=-1)  # (T, d_model)
        stages.append(Stage("concat heads", f"the {info.heads} heads' outputs side by side", _rows(concat),
                            "tokens×dims"))
        w_o, b_o = toy[f"layers.{layer}.w_o"], toy[f"layers.{layer}.b_o"]
        stages.append(Stage("·W_O", "the output projection mixes the heads", _rows(concat @ w_o.T + b_o),
                            "tokens×dims"))
    else:
        missing = ["X·W_Q (the projection weights)", "concat heads", "·W_O"]
    return StepsReport(request.text, info, capture.tokens, layer, head, stages, missing, capture.device,
                       capture.dtype)


def _head_scores(record, head: int, kv_head: int):
    q, k = record.q[head].float(), record.k[kv_head].float()
    return q @ k.T * record.scale if record.scorer is None else record.scorer(q, k, head)


def _one(spec: str, count: int, what: str) -> int:
    chosen = parse_selection(spec, count, what)
    if len(chosen) != 1:
        raise BadInput(f"attn steps walks one {what}; --{what} {spec} names {len(chosen)}", f"pick one of 0-{count - 1}")
    return chosen[0]


def _rows(matrix) -> list[list[float | None]]:
    return [[None if value != value else value for value in row] for row in matrix.detach().cpu().tolist()]
