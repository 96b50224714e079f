"""Counterfactual attention: the real model's Q, K and scale, changed one idea at a time.

A variant is a pure transform of what an attention layer multiplies:

    (q (..., H, T, D), k (..., H_kv, T, D), scale) -> (q', k', scale')

so the same transform serves both modes of `attn compare`: applied after the
fact to a captured layer (per-layer mode), or inside the attention hook so the
model runs on with it (--propagate). `raw` is the exception: it drops the
projections and works on the layer input X (softmax(X·Xᵀ)·X).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from attn_cli.attention import expand_kv
from attn_cli.errors import BadInput

QKS = tuple[torch.Tensor, torch.Tensor, float]


def _identity(q, k, scale) -> QKS:
    return q, k, scale


def _shared_k(q, k, scale) -> QKS:
    """Q := K: each query head uses its kv group's key, as if W_Q were W_K."""
    return expand_kv(k, q.shape[-3]), k, scale


def _no_scale(q, k, scale) -> QKS:
    return q, k, 1.0


def _cosine(q, k, scale) -> QKS:
    """qᵀk / (|q| |k|): unit vectors and no scale; scores lie in [-1, 1]."""
    return torch.nn.functional.normalize(q, dim=-1), torch.nn.functional.normalize(k, dim=-1), 1.0


@dataclass(frozen=True)
class Variant:
    name: str
    description: str
    transform: Callable[..., QKS] | None  # None: not a q/k transform (raw)

    @property
    def uses_layer_input(self) -> bool:
        return self.transform is None


VARIANTS = {
    variant.name: variant
    for variant in (
        Variant("baseline", "the model as it is", _identity),
        Variant("shared-k", "the query computed with the key's projection (Q := K)", _shared_k),
        Variant("no-scale", "scores q·kᵀ without the 1/√d scale", _no_scale),
        Variant("raw", "no projections: softmax(X·Xᵀ)·X on the layer input X", None),
        Variant("scoring=dot", "dot-product scores q·kᵀ", _no_scale),
        Variant("scoring=scaled-dot", "scaled dot-product q·kᵀ/√d (the transformer default)", _identity),
        Variant("scoring=cosine", "cosine similarity qᵀk/(|q||k|)", _cosine),
    )
}
# Scoring functions with learned parameters: only a model that defines them can use them.
PARAMETRISED_SCORING = {"bilinear": "qᵀ·W·k", "additive": "w_vᵀ·tanh(W_q·q + W_k·k)"}


def variant_named(name: str) -> Variant:
    """Look a variant up by its name; `cosine` is accepted for `scoring=cosine`."""
    key = name.strip().lower()
    if key in VARIANTS:
        return VARIANTS[key]
    scoring = key.removeprefix("scoring=")
    if f"scoring={scoring}" in VARIANTS:
        return VARIANTS[f"scoring={scoring}"]
    if scoring in PARAMETRISED_SCORING:
        raise BadInput(
            f"{scoring} scoring ({PARAMETRISED_SCORING[scoring]}) has learned parameters that a pretrained "
            "model does not have",
            "use dot, scaled-dot or cosine, which need nothing but the model's own Q and K",
        )
    raise BadInput(f"unknown variant {name!r}", f"choose from {', '.join(VARIANTS)}")


def check_injectable(variants: list[Variant], propagate: bool) -> None:
    """--propagate feeds each variant's q, k into the model; raw has none to feed."""
    if propagate and any(variant.uses_layer_input for variant in variants):
        raise BadInput("raw has no projections to inject into the model", "use raw without --propagate")


def apply_variant(layer, variant: Variant, heads: int):
    """A captured layer as the variant would have computed it (per-layer mode). Returns a LayerCapture.

    raw: q = k = v = X for every head (T, d_model), scale 1, the model's mask.
    """
    from attn_cli.backends.base import LayerCapture

    if variant.uses_layer_input:
        if layer.inputs is None:
            raise BadInput("raw needs the attention layer's input X, which was not captured for this model")
        x = layer.inputs  # (T, d_model)
        kv_heads = layer.k.shape[0]
        return LayerCapture(layer.layer, x.expand(heads, *x.shape), x.expand(kv_heads, *x.shape),
                            x.expand(kv_heads, *x.shape), layer.mask, 1.0, x)  # raw: plain X·Xᵀ
    q, k, scale = variant.transform(layer.q, layer.k, layer.scale)
    return LayerCapture(layer.layer, q, k, layer.v, layer.mask, scale, layer.inputs, layer.scorer)
