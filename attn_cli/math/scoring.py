"""Scoring functions a(q, k): the one place scores are made (pure torch).

Every stage that needs scores calls `scores`: the analysis of a head, the
toy's forward pass, `attn steps`. The parameter-free scorings are (q, k, scale)
forms of q·kᵀ·scale, so they apply to any model's Q and K; bilinear and
additive have learned parameters, so only a model that defines them (the toy)
can use them, through a scorer it hands over with its capture.

Adding a scoring function: a form here (parameter-free: a (q, k, scale)
transform in FORMS; learned: a function like `bilinear` that a model wraps
into its scorer), and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch

QKS = tuple[torch.Tensor, torch.Tensor, float]


def scores(
    q: torch.Tensor, k: torch.Tensor, scale: float, scorer: Callable | None = None, head: int = 0
) -> torch.Tensor:
    """Attention scores, unmasked. q (..., Tq, D), k (..., Tk, D) -> (..., Tq, Tk).

    scorer(q (Tq, D), k (Tk, D), head) replaces q·kᵀ·scale for learned scorings (one head at a time).
    """
    if scorer is not None:
        return scorer(q, k, head)
    return (q @ k.transpose(-2, -1)).mul_(scale)  # in place: the product is ours, one (Tq, Tk) fewer


class Softcapped:
    """Attention-logit softcapping (Gemma 2, VaultGemma): the scores as the model computes them,
    cap·tanh(q·kᵀ·scale / cap), before the mask; a scorer(q, k, head) for LayerCapture.scorer. The raw q·kᵀ·scale
    is the same q and k without it (`formula` says which a report used)."""

    def __init__(self, cap: float, scale: float):
        self.cap, self.scale = float(cap), float(scale)

    def __call__(self, q: torch.Tensor, k: torch.Tensor, head: int = 0) -> torch.Tensor:
        # the order of eager's arithmetic: (q·kᵀ·scale) / cap, tanh, · cap
        return torch.tanh(scores(q, k, self.scale) / self.cap) * self.cap

    def with_scale(self, scale: float) -> Softcapped:
        """The same cap over a variant's scale."""
        return Softcapped(self.cap, scale)

    @property
    def formula(self) -> str:
        return f"{self.cap:g}·tanh(q·kᵀ·{self.scale:.4g}/{self.cap:g})"


def dot(q: torch.Tensor, k: torch.Tensor, scale: float) -> QKS:
    """qᵀk: no scale."""
    return q, k, 1.0


def scaled_dot(q: torch.Tensor, k: torch.Tensor, scale: float) -> QKS:
    """qᵀk/√d: the scale the model uses (1/√d unless the model says otherwise)."""
    return q, k, scale


def cosine(q: torch.Tensor, k: torch.Tensor, scale: float) -> QKS:
    """qᵀk / (|q| |k|): unit vectors and no scale; scores lie in [-1, 1]."""
    return torch.nn.functional.normalize(q, dim=-1), torch.nn.functional.normalize(k, dim=-1), 1.0


class Form(NamedTuple):
    transform: Callable[..., QKS]  # (q, k, scale) -> (q', k', scale') for q'·k'ᵀ·scale'
    description: str
    formula: str  # the scores as a heatmap's title writes them; {scale} is the model's scale


# The parameter-free scorings.
FORMS: dict[str, Form] = {
    "dot": Form(dot, "dot-product scores q·kᵀ", "q·kᵀ"),
    "scaled-dot": Form(scaled_dot, "scaled dot-product q·kᵀ/√d (the transformer default)", "q·kᵀ·{scale}"),
    "cosine": Form(cosine, "cosine similarity qᵀk/(|q||k|)", "q̂·k̂ᵀ"),  # q̂ = q/|q|
}
PARAMETER_FREE = tuple(FORMS)
# Scorings with learned parameters, and their formulas (for messages).
PARAMETRISED = {"bilinear": "qᵀ·W·k", "additive": "w_vᵀ·tanh(W_q·q + W_k·k)"}


def bilinear(q: torch.Tensor, k: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """qᵀ·W·k, W (D, D): a learned metric; symmetric in q, k only if W is. (c, D), (n, D) -> (c, n)"""
    return q @ w @ k.T


def additive(q: torch.Tensor, k: torch.Tensor, w_q: torch.Tensor, w_k: torch.Tensor, w_v: torch.Tensor) -> torch.Tensor:
    """Bahdanau: w_vᵀ·tanh(W_q·q + W_k·k). W_q, W_k (h, D), w_v (h,).

    (c, 1, h) + (1, n, h) -> tanh -> · w_v -> (c, n)
    """
    return torch.tanh((q @ w_q.T)[:, None, :] + (k @ w_k.T)[None, :, :]) @ w_v
