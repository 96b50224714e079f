"""Token-to-token contributions of a whole post-LN encoder layer, and their rollout to the input tokens.

Pure tensor math, no model: each function takes what a layer computed (T tokens, d = d_model, H heads,
D head dim). A layer's output at token i decomposes over its input tokens j (Kobayashi et al. 2021):

    y_i = LN1(x_i + Σ_h Σ_j A^h_ij v^h_j W^h_O + b_O)
        = Σ_j T_i(x_j) + (L(b_O) / s_i + β)          with T_i(x_j) = L(δ_ij x_j + Σ_h A^h_ij v^h_j W^h_O) / s_i

where L(u) = (u − mean(u)) ⊙ γ is LayerNorm's linear part and s_i = √(var(pre-LN_i) + ε) its scale at
token i. ALTI and GlobEnc measure the T_i(x_j); value zeroing re-runs the layer instead.
"""

from __future__ import annotations

import torch


def linear_part(vectors: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
    """LayerNorm without its scale and bias: (u − mean(u)) ⊙ γ over the last dimension."""
    return (vectors - vectors.mean(-1, keepdim=True)) * gamma


def ln_scale(pre_ln: torch.Tensor, eps: float) -> torch.Tensor:
    """s_i = √(var(u_i) + ε), (T, 1): what LayerNorm divides token i by."""
    return (pre_ln.var(-1, unbiased=False, keepdim=True) + eps).sqrt()


def mixed_vectors(inputs, weights, values, w_o) -> torch.Tensor:
    """δ_ij x_j + Σ_h A^h_ij v^h_j W^h_O: (T i, T j, d), the attention sublayer plus its residual, per source.

    inputs (T, d), weights (H, T, T), values (H, T, D), w_o (H, D, d)."""
    transformed = torch.einsum("hjv,hvd->hjd", values, w_o)  # (H, T, d) f^h(x_j) = v^h_j W^h_O
    mixed = torch.einsum("hij,hjd->ijd", weights, transformed)  # (T, T, d) summed over heads
    return mixed + torch.diag_embed(inputs.T).permute(1, 2, 0)  # + δ_ij x_j


def decomposed(block) -> tuple[torch.Tensor, torch.Tensor]:
    """(T_i(x_j) (T, T, d), y_i (T, d)): LN1's output split over the input tokens, and the output itself."""
    scale = ln_scale(block.pre_ln1, block.ln1.eps)  # (T, 1)
    parts = linear_part(mixed_vectors(block.inputs, block.weights, block.values, block.w_o), block.ln1.weight)
    parts = parts / scale.unsqueeze(-1)  # (T, T, d)
    outputs = parts.sum(1) + linear_part(block.b_o, block.ln1.weight) / scale + block.ln1.bias
    return parts, outputs


def alti_layer(block) -> torch.Tensor:
    """ALTI (Ferrando et al. 2022), (T, T) rows summing to 1:
    c_ij = max(0, ‖y_i‖₁ − ‖y_i − T_i(x_j)‖₁), then c_ij / Σ_j c_ij."""
    parts, outputs = decomposed(block)
    distance = (parts - outputs.unsqueeze(1)).abs().sum(-1)  # (T, T) Manhattan ‖y_i − T_i(x_j)‖₁
    return normalised((outputs.abs().sum(-1, keepdim=True) - distance).clamp_min(0))


def globenc_layer(block) -> torch.Tensor:
    """GlobEnc's N_Enc (Modarressi et al. 2022), (T, T) unnormalised: ‖L₂(T_i(x_j)) / s₂_i‖₂, each part
    carried on through the second LayerNorm's linear part (the feed-forward itself is left out)."""
    parts, _ = decomposed(block)
    scale = ln_scale(block.pre_ln2, block.ln2.eps).unsqueeze(-1)  # (T, 1, 1)
    return (linear_part(parts, block.ln2.weight) / scale).norm(dim=-1)


def value_zeroing_layer(outputs: torch.Tensor, zeroed: torch.Tensor) -> torch.Tensor:
    """Value zeroing (Mohebbi et al. 2023), (T, T) rows summing to 1: c_ij = 1 − cos(y_i, ỹ^(j)_i), where
    ỹ^(j) is the layer's output with token j's value vectors zeroed; then c_ij / Σ_j c_ij.

    outputs (T, d) y; zeroed (T j, T i, d) ỹ^(j). Many distances are ~1e-7 (a token that barely moves
    another), the size of float32's rounding, so they are taken in float64 and as 1 − cos = ½‖ŷ − ỹ̂‖² of the
    unit vectors: no cancellation, and exactly 0 where zeroing changed nothing."""
    unit = lambda vectors: vectors.double() / vectors.double().norm(dim=-1, keepdim=True)  # noqa: E731
    distance = 0.5 * (unit(zeroed) - unit(outputs).unsqueeze(0)).pow(2).sum(-1)  # (T j, T i)
    return normalised(distance.T).float()  # (T i, T j)


def normalised(scores: torch.Tensor) -> torch.Tensor:
    """Each row divided by its sum (a row of zeros stays zeros)."""
    total = scores.sum(-1, keepdim=True)
    return torch.where(total > 0, scores / torch.where(total > 0, total, 1), 0.0)


def rolled_out(per_layer: list[torch.Tensor]) -> torch.Tensor:
    """C_L ⋯ C_2 C_1: the layers' contributions multiplied, first to last, no residual added (each C_l
    already holds its residual path). (T, T)"""
    joint = per_layer[0]
    for layer in per_layer[1:]:
        joint = layer @ joint
    return joint
