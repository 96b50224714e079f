"""The engine of `attn circuits`: every head's QK and OV circuits from the model's weights (no text is run),
their singular values, the OV copying score, the positional/content split of QK, and the Q-, K- and
V-composition of every pair of heads in different layers (math/circuits.py has the formulas).

The weights are processed as TransformerLens processes them when it loads a model, so the numbers are
TransformerLens' numbers: the norm each attention reads through has its scale folded into W_Q, W_K, W_V
(and, for a LayerNorm, those are centred over d_model); with LayerNorms the weights that write to the
residual stream (W_O, W_E, W_pos) are centred over d_model; W_U gets the final norm folded in and is
centred over the vocabulary. Biases stay out of the circuits (see BIAS_NOTE).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

from attn_cli.backends.capabilities import CircuitWeights, require
from attn_cli.data.capture import ModelInfo
from attn_cli.data.document import SCHEMA_VERSION, Document, counted, num_json, vector_json
from attn_cli.plumbing.errors import BadInput

TOP_PAIRS = 5  # strongest pairs listed per composition mode
BIAS_NOTE = (
    "biases are left out of QK and OV (as TransformerLens'): b_V only adds a constant to a head's "
    "output, since its weights sum to 1; b_K adds the same to every key of a query, which softmax "
    "ignores; b_Q·W_Kᵀ adds a term linear in the key"
)
ROTARY_NOTE = (
    "rotary positions: QK is the bilinear form of a query and a key at the same position; at offset "
    "i − j the model rotates the key side by i − j first (composition uses the same QK)"
)
MODE_NAMES = {"q": "Q-composition", "k": "K-composition", "v": "V-composition"}


@dataclass(frozen=True)
class HeadCircuit:
    layer: int
    head: int
    kv_head: int
    qk_singular: np.ndarray  # (r,) singular values of W_Q·W_Kᵀ, largest first (before the 1/√r scale)
    ov_singular: np.ndarray  # (r,) of W_V·W_O
    copying: float | None  # Σλ/Σ|λ| of W_E·W_OV·W_U; None where not defined (CircuitsReport.copying_note)
    split: dict[str, float] | None  # {"content", "position", "mixed"} shares; None where not defined


@dataclass(frozen=True)
class Pair:
    mode: str  # "q", "k" or "v"
    writer: tuple[int, int]  # (layer, head) of the earlier head
    reader: tuple[int, int]  # (layer, head) of the later one
    score: float
    over_median: float | None  # score / the median of the mode's scores: how far it stands out


@dataclass
class CircuitsReport(Document):
    model: ModelInfo
    device: str
    dtype: str
    heads: list[HeadCircuit]  # every head, layer by layer
    composition: dict[str, np.ndarray]  # mode → (N, N) [writer, reader] over `heads`' order; NaN: not earlier
    processing: dict  # how the weights were folded (see the module's docstring)
    copying_note: str | None  # why the copying score is not defined, or None
    position_note: str  # how the positional split is made, or why it is not defined
    notes: list[str] = field(default_factory=list)  # GQA, biases, rotary

    def summary_shape(self) -> str:
        return counted(len(self.heads), "head")

    def head(self, layer: int, head: int) -> HeadCircuit:
        """report.head(1, 2).copying"""
        return self.heads[self._index(layer, head)]

    def score(self, mode: str, writer: tuple[int, int], reader: tuple[int, int]) -> float | None:
        """The `mode` composition of head `writer` (layer, head) into `reader`; None where not defined."""
        value = float(self._mode(mode)[self._index(*writer), self._index(*reader)])
        return None if math.isnan(value) else value

    def median(self, mode: str) -> float | None:
        defined = self._mode(mode)[~np.isnan(self._mode(mode))]
        return float(np.median(defined)) if defined.size else None

    def top(self, mode: str, count: int = TOP_PAIRS) -> list[Pair]:
        """The `count` strongest pairs of a mode, strongest first."""
        matrix = self._mode(mode)
        median = self.median(mode)
        order = np.argsort(np.where(np.isnan(matrix), -np.inf, matrix), axis=None)[::-1]
        pairs = []
        for flat in order[:count]:
            writer, reader = np.unravel_index(flat, matrix.shape)
            value = float(matrix[writer, reader])
            if math.isnan(value):
                break
            pairs.append(
                Pair(mode, self._place(writer), self._place(reader), value, value / median if median else None)
            )
        return pairs

    def _mode(self, mode: str) -> np.ndarray:
        if mode not in self.composition:
            raise BadInput(f"no composition mode {mode!r}", "modes: q, k, v")
        return self.composition[mode]

    def _index(self, layer: int, head: int) -> int:
        if not (0 <= layer < self.model.layers and 0 <= head < self.model.heads):
            raise BadInput(
                f"head {layer}.{head} is not in this model",
                f"layers 0-{self.model.layers - 1}, heads 0-{self.model.heads - 1}",
            )
        return layer * self.model.heads + head

    def _place(self, index) -> tuple[int, int]:
        return int(index) // self.model.heads, int(index) % self.model.heads

    def to_json_dict(self) -> dict:
        return {
            "schema_version": SCHEMA_VERSION,
            "command": "circuits",
            "model": asdict(self.model),
            "device": self.device,
            "dtype": self.dtype,
            "processing": dict(self.processing),
            "copying_note": self.copying_note,
            "position_note": self.position_note,
            "notes": list(self.notes),
            "heads": [
                {
                    "layer": head.layer,
                    "head": head.head,
                    "kv_head": head.kv_head,
                    "qk_singular_values": vector_json(head.qk_singular),
                    "ov_singular_values": vector_json(head.ov_singular),
                    "copying": num_json(head.copying),
                    "position_split": None
                    if head.split is None
                    else {name: num_json(v) for name, v in head.split.items()},
                }
                for head in self.heads
            ],
            "composition": {
                mode: {
                    "heads": [[head.layer, head.head] for head in self.heads],
                    "scores": [[num_json(value) for value in row] for row in matrix.tolist()],
                    "median": num_json(self.median(mode)),
                    "top": [
                        {
                            "writer": list(pair.writer),
                            "reader": list(pair.reader),
                            "score": num_json(pair.score),
                            "over_median": num_json(pair.over_median),
                        }
                        for pair in self.top(mode)
                    ],
                }
                for mode, matrix in self.composition.items()
            },
        }


# ---- the run


def run_circuits(backend) -> CircuitsReport:
    """Every head's circuits and every pair's composition, from the backend's weights."""
    import torch

    from attn_cli.math import circuits

    weights = require(
        backend,
        CircuitWeights,
        "attn circuits",
        hint="try a GPT-2, BERT or Llama-style model (the toy has no circuits view)",
    ).circuit_weights()
    info = backend.info
    folded = _folded(weights)
    layers, heads = info.layers, info.heads
    flat = lambda tensor: tensor.reshape(layers * heads, *tensor.shape[2:])  # noqa: E731 (L, H, …) → (N, …)
    qk = circuits.qk_circuit(flat(folded["w_q"]), flat(folded["w_k"]))
    ov = circuits.ov_circuit(flat(folded["w_v"]), flat(folded["w_o"]))
    copying, copying_note = _copying(ov, folded, weights, info)
    split, position_note = _split(qk, folded, weights)
    layer_of = torch.arange(layers).repeat_interleave(heads)  # (N,)
    composition = {mode: circuits.composition_scores(qk, ov, layer_of, mode).numpy() for mode in circuits.MODES}
    qk_singular, ov_singular = qk.singular_values().numpy(), ov.singular_values().numpy()
    report_heads = [
        HeadCircuit(
            layer=index // heads,
            head=index % heads,
            kv_head=info.kv_head_of(index % heads),
            qk_singular=qk_singular[index],
            ov_singular=ov_singular[index],
            copying=None if copying is None else float(copying[index]),
            split=None
            if split is None
            else {name: float(getattr(split, name)[index]) for name in ("content", "position", "mixed")},
        )
        for index in range(layers * heads)
    ]
    return CircuitsReport(
        model=info,
        device=backend.device,
        dtype=backend.dtype,
        heads=report_heads,
        composition=composition,
        processing=_processing(weights),
        copying_note=copying_note,
        position_note=position_note,
        notes=_notes(weights, info),
    )


def _folded(weights) -> dict:
    """The weights as TransformerLens processes them on load (fold_ln, center_writing_weights, center_unembed)."""
    import torch

    from attn_cli.math import circuits

    layernorm = bool(weights.reading_norms) and all(
        norm is not None and norm.kind == "layernorm" for norm in weights.reading_norms
    )

    def reading(name: str):
        return torch.stack(
            [
                circuits.fold_reading_norm(
                    matrix, None if norm is None else norm.scale, norm is not None and norm.kind == "layernorm"
                )
                for matrix, norm in zip(getattr(weights, name), weights.reading_norms)
            ]
        )

    centre = circuits.centre_writing if layernorm else (lambda matrix: matrix)
    folded = {name: reading(name) for name in ("w_q", "w_k", "w_v")}
    folded["w_o"] = centre(weights.w_o)
    folded["w_e"] = None if weights.w_e is None else centre(weights.w_e)
    folded["w_pos"] = None if weights.w_pos is None else centre(weights.w_pos)
    final = weights.final_norm
    folded["w_u"] = (
        None
        if weights.w_u is None
        else circuits.fold_unembedding(
            weights.w_u, None if final is None else final.scale, final is not None and final.kind == "layernorm"
        )
    )
    return folded


def _copying(ov, folded, weights, info):
    from attn_cli.math import circuits

    if folded["w_u"] is None:
        return None, f"not defined: {weights.unembedding}"
    return circuits.copying_scores(ov, folded["w_e"], folded["w_u"]), None


def _split(qk, folded, weights):
    from attn_cli.math import circuits

    if weights.positions == "rotary":
        return None, (
            "not defined: rotary positions rotate q and k by their positions, a factor inside every "
            "term rather than a term added to the token's, so the score has no additive position part"
        )
    if folded["w_pos"] is None:
        return None, "not defined: the model adds no learned position embeddings to its tokens"
    return circuits.position_split(qk, folded["w_e"], folded["w_pos"]), (
        "learned positions added to the tokens: shares of the mean square of the direct-path score "
        "(embeddings straight into the head, no earlier layer) in token·token (content), position·position "
        "and mixed terms, tokens and positions drawn uniformly"
    )


def _processing(weights) -> dict:
    kinds = sorted({norm.kind for norm in weights.reading_norms if norm is not None})
    return {
        "norms_folded": kinds,  # the norm kinds whose scales were folded into W_Q, W_K, W_V
        "norm_placement": weights.norm_placement,
        "centred": kinds == ["layernorm"],  # W_Q/W_K/W_V and W_O, W_E, W_pos centred over d_model
        "unembedding": weights.unembedding if weights.w_u is not None else None,
        "positions": weights.positions,
        "like": "TransformerLens fold_ln, center_writing_weights, center_unembed",
    }


def _notes(weights, info) -> list[str]:
    notes = []
    if info.kv_heads < info.heads:
        notes.append(
            f"grouped-query attention: {info.heads} query heads read {info.kv_heads} key/value heads; "
            "each query head's W_K and W_V are its kv head's, so heads of one group share them"
        )
    if weights.positions == "rotary":
        notes.append(ROTARY_NOTE)
    if weights.norm_placement == "post":
        notes.append(
            "post-norm layers (BERT): each attention reads the LayerNorm that ends the sublayer before; "
            "composition ignores the norms between a writer and its reader"
        )
    if weights.norm_placement == "none":
        notes.append("no norm found before the attention: W_Q, W_K, W_V are as stored, nothing folded")
    if weights.qk_norms:
        notes.append(
            "this model normalises q and k per head (q_norm, k_norm) before the scores; QK leaves "
            "that normalisation out"
        )
    if weights.biases:
        notes.append(f"{BIAS_NOTE} (this model has {', '.join('b_' + name.upper() for name in weights.biases)})")
    return notes
