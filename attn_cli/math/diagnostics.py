"""Model-wide diagnostics of one text (pure torch): the attention sink rate and massive activations.

Sink rate (Gu et al. 2024, "When Attention Sink Emerges in Language Models"). A head's weight on the
first token, averaged over the text's T query rows (every row sees token 0, causal or not; the
first row of a causal model puts all its weight there, and counts, as in the paper's 1/(T−k+1) Σ_{i≥k}
with k the first token):

    α[l, h] = (1/T) Σ_i A_{l,h}[i, 0]

and the share of a layer's heads, and of all the model's heads, whose α exceeds ε (0.3, the paper's):

    sink_rate(l) = (1/H) Σ_h 1[α[l, h] > ε]        sink_rate = (1/L) Σ_l sink_rate(l)

Over a corpus both are the mean of the texts' rates (the paper averages over sampled sequences).
Token 0 is whatever the tokenizer puts first: [CLS], BOS, or the first word of a tokenizer without one.

Massive activations (Sun et al. 2024, "Massive Activations in Large Language Models"). In the
residual stream h_l (T, d_model) after layer l, with m_l the median of |h_l| over all T · d_model entries:

    entry (t, k) is massive  when  |h_l[t, k]| > ratio · m_l  and  |h_l[t, k]| > floor

Sun et al. take "larger than 100 and about 1,000 times the median"; the defaults here are
ratio 100 and floor 100 (MASSIVE_RATIO, MASSIVE_FLOOR).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

MASSIVE_RATIO = 100.0  # times the layer's median magnitude
MASSIVE_FLOOR = 100.0  # and larger than this in absolute value (Sun et al.)


def first_token_sums(weights: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """Σ_i A[i, 0] over the real rows of a block: weights (B, h, c, T), rows (B, c) bool -> (B, h)."""
    return (weights[..., 0] * rows[:, None, :].to(weights.dtype)).sum(-1)


def sink_rates(alpha: torch.Tensor, epsilon: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per layer and over the model: alpha (..., L, H) first-token weights -> ((..., L), (...,)) shares."""
    per_layer = (alpha > epsilon).to(torch.float64).mean(-1)
    return per_layer, per_layer.mean(-1)


@dataclass(frozen=True)
class Entry:
    """One entry of a hidden state: where it is and how large, against its layer's median."""

    layer: int
    position: int  # token position in the text
    dim: int  # dimension of the residual stream
    value: float  # signed
    ratio: float  # |value| / the layer's median magnitude (inf where the median is 0)
    massive: bool


def layer_entries(
    state: torch.Tensor, layer: int, ratio: float, floor: float, top: int
) -> tuple[float, list[Entry], int, list[int]]:
    """One text's residual stream after one layer, state (T, d_model) over its real tokens:
    (median magnitude, its `top` largest entries, how many entries are massive, the dims holding one)."""
    magnitude = state.detach().abs().float()
    median = float(magnitude.median())
    massive = (magnitude > ratio * median) & (magnitude > floor)  # (T, d)
    values, flat = magnitude.flatten().topk(min(top, magnitude.numel()))
    width = magnitude.shape[1]
    entries = []
    for value, index in zip(values.tolist(), flat.tolist()):
        position, dim = divmod(index, width)
        entries.append(
            Entry(
                layer,
                position,
                dim,
                float(state[position, dim]),
                value / median if median > 0 else float("inf"),
                bool(massive[position, dim]),
            )
        )
    return median, entries, int(massive.sum()), massive.any(0).nonzero().flatten().tolist()
