"""Counterfactual attention: the real model's Q, K and scale, changed one idea at a time.

A variant is a pure transform of what an attention layer multiplies:

    (q (..., H, T, D), k (..., H_kv, T, D), scale) -> (q', k', scale')

so the same transform serves both modes of `attn compare`: applied after the
fact to a captured layer (per-layer mode), or inside the attention hook so the
model runs on with it (--propagate). `raw` is the exception: it drops the
projections and works on the layer input X (softmax(X·Xᵀ)·X).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from attn_cli.data.capture import LayerCapture
from attn_cli.math import scoring
from attn_cli.math.attention import expand_kv
from attn_cli.plumbing.errors import BadInput, UnsupportedModel


def _identity(q, k, scale) -> scoring.QKS:
    return q, k, scale


def _shared_k(q, k, scale) -> scoring.QKS:
    """Q := K: each query head uses its kv group's key, as if W_Q were W_K."""
    return expand_kv(k, q.shape[-3]), k, scale


@dataclass(frozen=True)
class Variant:
    name: str
    description: str
    transform: Callable[..., scoring.QKS] | None  # None: not a q/k transform (raw)
    formula: str = "q·kᵀ·{scale}"  # its scores as titles write them; {scale}: the model's scale

    def scores_formula(self, scale: float) -> str:
        return self.formula.format(scale=f"{scale:.4g}")

    @property
    def uses_layer_input(self) -> bool:
        return self.transform is None


VARIANTS = {
    variant.name: variant
    for variant in (
        Variant("baseline", "the model as it is", _identity),
        Variant("shared-k", "the query computed with the key's projection (Q := K)", _shared_k, "k·kᵀ·{scale}"),
        Variant("no-scale", "scores q·kᵀ without the 1/√d scale", scoring.FORMS["dot"].transform, "q·kᵀ"),
        Variant("raw", "no projections: softmax(X·Xᵀ)·X on the layer input X", None, "x·xᵀ"),
        *(
            Variant(f"scoring={name}", form.description, form.transform, form.formula)
            for name, form in scoring.FORMS.items()
        ),
    )
}


def variant_named(name: str) -> Variant:
    """Look a variant up by its name; `cosine` is accepted for `scoring=cosine`."""
    key = name.strip().lower()
    if key in VARIANTS:
        return VARIANTS[key]
    form = key.removeprefix("scoring=")
    if f"scoring={form}" in VARIANTS:
        return VARIANTS[f"scoring={form}"]
    if form in scoring.PARAMETRISED:
        raise BadInput(
            f"{form} scoring ({scoring.PARAMETRISED[form]}) has learned parameters that a pretrained "
            "model does not have",
            "use dot, scaled-dot or cosine, which need nothing but the model's own Q and K "
            f"(the toy model computes with it: --model toy -O scoring={form})",
        )
    raise BadInput(f"unknown variant {name!r}", f"choose from {', '.join(VARIANTS)}")


def check_injectable(variants: list[Variant], propagate: bool) -> None:
    """--propagate feeds each variant's q, k into the model; raw has none to feed."""
    if propagate and any(variant.uses_layer_input for variant in variants):
        raise BadInput("raw has no projections to inject into the model", "use raw without --propagate")


def apply_variant(layer: LayerCapture, variant: Variant, heads: int) -> LayerCapture:
    """A captured layer as the variant would have computed it (per-layer mode).

    raw: q = k = v = X for every head (T, d_model), scale 1, the model's mask.
    A weights-only layer (no q and k) has its baseline only: every other variant is refused in one line.
    """
    if layer.weights is not None:
        if variant.name != "baseline":
            raise UnsupportedModel(f"the {variant.name} variant needs Q and K", layer.without_qkv)
        return layer
    transform = variant.transform
    if transform is None:  # variant.uses_layer_input
        if layer.inputs is None:
            raise BadInput("raw needs the attention layer's input X, which was not captured for this model")
        x = layer.inputs  # (T, d_model)
        kv_heads = layer.k.shape[0]
        return LayerCapture(
            layer.layer,
            x.expand(heads, *x.shape),
            x.expand(kv_heads, *x.shape),
            x.expand(kv_heads, *x.shape),
            layer.mask,
            1.0,
            x,
        )  # raw: plain X·Xᵀ
    q, k, scale = transform(layer.q, layer.k, layer.scale)
    scorer = layer.scorer.with_scale(scale) if isinstance(layer.scorer, scoring.Softcapped) else layer.scorer
    return replace(layer, q=q, k=k, scale=scale, scorer=scorer)
