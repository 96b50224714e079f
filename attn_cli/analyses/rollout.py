"""`attn rollout`: how much of each output token traces back to each input token, across layers.

Attention rollout (Abnar & Zuidema 2020) multiplies the layers' attention, each mixed half and
half with the identity for the residual connection: Â_l = 0.5·fuse_h(A_l) + 0.5·I, rows
renormalised, rollout = Â_L ⋯ Â_1 over the selected (consecutive) layers.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import numpy as np

from attn_cli.analyses.inspect import inspect_texts
from attn_cli.analyses.inspect_report import TopKey
from attn_cli.backends.capabilities import Seq2Seq, supports
from attn_cli.data.document import SCHEMA_VERSION, Document, counted, matrix_json, num_json
from attn_cli.data.selection import Analysis, Selection
from attn_cli.plumbing.errors import BadInput

if TYPE_CHECKING:
    from attn_cli.data.capture import ModelInfo
    from attn_cli.data.image import PatchGrid


@dataclass
class RolloutReport(Document):
    text: str
    model: ModelInfo
    device: str
    dtype: str
    tokens: list
    layers: list[int]  # rolled out, first to last
    head_fusion: str  # mean | max | min
    matrix: np.ndarray  # (T, T) row i: output token i over input tokens; rows sum to 1
    top: list[list[TopKey]]  # (T, ≤k) the input tokens each output token traces back to most
    truncated_from: int | None = None
    image: PatchGrid | None = None  # when a vision transformer read an image (data/image.py)

    def summary_shape(self) -> str:
        return f"{counted(len(self.tokens), 'token')}, {counted(len(self.layers), 'layer')} rolled out"

    def to_json_dict(self) -> dict:
        document = {
            "schema_version": SCHEMA_VERSION,
            "command": "rollout",
            "text": self.text,
            "model": asdict(self.model),
            "device": self.device,
            "dtype": self.dtype,
            "tokens": [token.to_json() for token in self.tokens],
            "layers": self.layers,
            "head_fusion": self.head_fusion,
            "rollout": matrix_json(self.matrix),
            "top": [
                [{"index": t.index, "token": t.token, "weight": num_json(t.weight)} for t in row] for row in self.top
            ],
        }
        if self.truncated_from is not None:
            document["truncated_from"] = self.truncated_from
        if self.image is not None:
            document["image"] = self.image.to_json()
        return document

    def to_arrow(self):
        """One row per (query, key): text, query, query_token, key, key_token, rollout (each row sums to 1)."""
        from attn_cli.data.tables import cells

        whole = (0, len(self.tokens))
        return cells(
            [token.text for token in self.tokens], [({"text": self.text}, whole, whole, {"rollout": self.matrix})]
        )


def consecutive_layers(info, layers, command: str) -> list[int]:
    """The selected layers, first to last, refused when they have gaps (a rollout multiplies neighbours)."""
    chosen, _ = Selection(layers=layers, full=True).resolve(info)
    # a hybrid's layers without an attention matrix are no gap: the chain runs over its attention layers only
    other = set(getattr(info, "no_attention_layers", ()))
    if chosen != [layer for layer in range(chosen[0], chosen[-1] + 1) if layer not in other]:
        raise BadInput(f"{command} multiplies consecutive layers; --layer {layers} has gaps", "use a range like 2-5")
    return chosen


def roll_out(
    backend,
    text: str | None,
    layers="all",
    head_fusion: str = "mean",
    top_k: int = 3,
    truncate: bool = False,
    image: tuple | None = None,
) -> RolloutReport:
    """Every head's weights of the selected layers (whole matrices), fused per layer, rolled out.
    image: (PIL image, its source) for a vision transformer instead of text (analyses/image.py). On an
    encoder–decoder model, its encoder's layers: cross-attention maps target tokens to source tokens, so layers
    of it do not chain, and the decoder's layers each read the source too; neither has a rollout."""
    import torch

    from attn_cli.math.measures import HEAD_FUSIONS, attention_rollout, top_keys

    if head_fusion not in HEAD_FUSIONS:
        raise BadInput(f"--head-fusion {head_fusion!r}", f"use {', '.join(HEAD_FUSIONS)}")
    chosen = consecutive_layers(backend.info, layers, "rollout")
    selection = Selection(layers=chosen, full=True)
    if image is not None:
        from attn_cli.analyses.image import inspect_image

        report = inspect_image(backend, image[0], image[1], selection, Analysis(top_k=top_k))
        text = report.text  # the image's source: what the report says it was run on
    elif text is None:  # the API's rule (api.Model.rollout), which attribute's call keeps too
        raise BadInput("rollout takes a text or an image", "pass TEXT, or --image FILE")
    elif supports(backend, Seq2Seq):  # the encoder's self-attention: a chain of square maps over the source
        from attn_cli.analyses.seq2seq import inspect_pair

        report = inspect_pair(backend, text, None, selection, Analysis(top_k=top_k), ["encoder"]).stacks[0]
    else:
        [report] = inspect_texts(backend, [text], selection, Analysis(top_k=top_k), truncate=truncate)
    matrix = attention_rollout(fused_layers(report, head_fusion))
    allowed = torch.ones_like(matrix, dtype=torch.bool)
    texts = [token.text for token in report.tokens]
    top = [[TopKey(index, texts[index], weight) for index, weight in row] for row in top_keys(matrix, allowed, top_k)]
    return RolloutReport(
        text,
        report.model,
        report.device,
        report.dtype,
        report.tokens,
        chosen,
        head_fusion,
        matrix.numpy(),
        top,
        report.truncated_from,
        report.image,
    )


def fused_layers(report, head_fusion: str = "mean") -> list:
    """Each layer's heads of an inspect report (whole matrices) fused into one (T, T) tensor, first layer first."""
    import torch

    from attn_cli.math.measures import fuse_heads

    return [
        fuse_heads(torch.from_numpy(np.stack([head.weights for head in layer.heads])), head_fusion)
        for layer in report.layers
    ]
