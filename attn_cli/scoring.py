"""Scoring functions a(q, k) for a block of queries against a block of keys (pure torch).

q (c, D), k (n, D) -> scores (c, n). The parameter-free ones apply to any model's
Q and K; bilinear and additive have learned parameters, so only a model that
defines them (the toy) can use them.
"""

from __future__ import annotations

import math

import torch

PARAMETER_FREE = ("dot", "scaled-dot", "cosine")
PARAMETRISED = ("bilinear", "additive")


def dot(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    return q @ k.T


def scaled_dot(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    return q @ k.T / math.sqrt(q.shape[-1])


def cosine(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.normalize(q, dim=-1) @ torch.nn.functional.normalize(k, dim=-1).T


def bilinear(q: torch.Tensor, k: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """qᵀ·W·k, W (D, D): a learned metric; symmetric in q, k only if W is."""
    return q @ w @ k.T


def additive(q: torch.Tensor, k: torch.Tensor, w_q: torch.Tensor, w_k: torch.Tensor, w_v: torch.Tensor) -> torch.Tensor:
    """Bahdanau: w_vᵀ·tanh(W_q·q + W_k·k). W_q, W_k (h, D), w_v (h,).

    (c, 1, h) + (1, n, h) -> tanh -> · w_v -> (c, n)
    """
    return torch.tanh((q @ w_q.T)[:, None, :] + (k @ w_k.T)[None, :, :]) @ w_v
