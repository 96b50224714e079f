"""ALTI-Logit (Ferrando et al. 2023, "Explaining How Transformers Use Context to Build Predictions"): a pre-norm
decoder's logit for one token at one position split over the input tokens and over the heads, as
mt-upc/logit-explanations' src/contributions.py and extract_explanations.py compute it.

Pure tensor math over the decoder blocks of backends/decoder_blocks.py (L layers, T tokens, d = d_model, H heads).
The residual stream at position p before the final norm is z = x⁰_p + Σ_l (Σ_h Σ_j A^h_pj v^h_j W^h_O + b^l_O +
f^l_p), and the logit of token w is u_w · Norm(z) + b_w. With the norm's scale frozen at z (s = √(var z + ε) for a
LayerNorm, √(mean z² + ε) for an RMSNorm), Norm(z) = N(z)/s + β is linear in z's parts, N(v) = (v − mean v) ⊙ γ
(LayerNorm) or v ⊙ γ (RMSNorm); so each part's logit is r · part, with

    r = centre(γ ⊙ u_w) / s   (LayerNorm: centring is its own adjoint),     r = γ ⊙ u_w / s   (RMSNorm)

and the logit is exactly the sum of (the reference's names in brackets)

    Δ^l_{h,j} = r · A^h_pj v^h_j W^h_O    head h of layer l moving source j  ("aff_x_j_h": v with Norm1's β and
                                           b_V in, as the model computed it)
    r · x⁰_p                               the embedding at p               ("init_logit")
    r · f^l_p                              layer l's FFN                    ("mlp_logit_layers")
    r · b^l_O                              layer l's attention output bias  ("b_o_logits_layers")
    u_w · β + b_w                          the final norm's bias and the unembedding's ("lnf_bias"; GPT-2 has no b_w)

ALTI-Logit carries each layer's Δ^l_j = Σ_h Δ^l_{h,j} down to the input tokens through the ALTI rollout of the
layers below (M_{l−1} = C_{l−1} ⋯ C_0, C the per-layer ALTI matrices of math/routes.alti_decoder_layer):

    ALTI-Logit^l = Δ^l · M_{l−1}   (M_{−1} = I),   token j's ALTI-Logit = Σ_l ALTI-Logit^l_j

Each M's rows sum to 1, so the tokens' ALTI-Logit sums to Σ_l Σ_j Δ^l_j, and with the other terms to the logit.
A token after p has A^h_pj = 0 and M lower-triangular: it contributes exactly 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class FinalNorm:
    kind: str  # "layernorm" (subtracts the mean, then scales) or "rmsnorm" (scales only)
    weight: torch.Tensor  # (d,) γ
    bias: torch.Tensor  # (d,) β (zeros for an RMSNorm, or a LayerNorm without one)
    eps: float


def frozen_scale(norm: FinalNorm, whole: torch.Tensor) -> torch.Tensor:
    """s: the final norm's divisor at the explained position, from the residual it normalised, whole (d,)."""
    if norm.kind == "layernorm":
        return torch.sqrt(whole.var(unbiased=False) + norm.eps)
    return torch.sqrt(whole.pow(2).mean() + norm.eps)


def normed(norm: FinalNorm, whole: torch.Tensor) -> torch.Tensor:
    """Norm(whole) (d,) as FinalNorm describes it: checked against what the model's own norm returned."""
    centred = whole - whole.mean() if norm.kind == "layernorm" else whole
    return centred * norm.weight / frozen_scale(norm, whole) + norm.bias


def logit_direction(norm: FinalNorm, whole: torch.Tensor, unembedding: torch.Tensor) -> torch.Tensor:
    """r (d,): a part v of the residual `whole` (d,) adds r · v to the logit whose unembedding row is
    `unembedding` (d,), the norm's scale frozen at whole."""
    scaled = norm.weight * unembedding
    if norm.kind == "layernorm":
        scaled = scaled - scaled.mean()
    return scaled / frozen_scale(norm, whole)


@dataclass
class LogitDecomposition:
    """One logit split into its parts (shapes: L layers, H heads, T tokens); every float is in logit units."""

    by_head_source: torch.Tensor  # (L, H, T) Δ^l_{h,j}: head h of layer l moving source j (not carried down)
    per_layer: torch.Tensor  # (L, T) ALTI-Logit^l: layer l's attention carried down to the input tokens
    contributions: torch.Tensor  # (T,) each input token's ALTI-Logit, Σ_l per_layer
    heads: torch.Tensor  # (L, H) each head's part of the logit, Σ_j Δ^l_{h,j}
    embedding: float  # r · x⁰_p
    mlp: torch.Tensor  # (L,) r · f^l_p
    attention_bias: torch.Tensor  # (L,) r · b^l_O
    final_norm_bias: float  # u_w · β
    unembedding_bias: float  # b_w
    rollout: torch.Tensor  # (L, T, T) M_l: ALTI rolled out through layers 0..l

    def total(self) -> float:
        """Every part summed: the logit, exactly (before any normalisation), up to float rounding."""
        return float(
            self.contributions.sum()
            + self.embedding
            + self.mlp.sum()
            + self.attention_bias.sum()
            + self.final_norm_bias
            + self.unembedding_bias
        )


def decompose_logit(
    blocks: list, norm: FinalNorm, unembedding: torch.Tensor, unembedding_bias: float, position: int
) -> LogitDecomposition:
    """ALTI-Logit of the logit whose unembedding row is `unembedding` (d,) at `position`, over every layer's
    DecoderBlock (the module docstring has the formulas)."""
    from attn_cli.math.routes import alti_decoder_layer

    whole = blocks[-1].resid_post[position]  # (d,) z: what the final norm reads
    r = logit_direction(norm, whole, unembedding)  # (d,)
    by_head_source = torch.stack(
        [block.weights[:, position, :] * (block.values @ (block.w_o @ r).unsqueeze(-1)).squeeze(-1) for block in blocks]
    )  # (L, H, T): A^h_pj · (v^h_j · (W^h_O r)), values (H, T, D) · (H, D, 1)
    count = by_head_source.shape[-1]
    carried, below = [], torch.eye(count)  # below: M_{l−1}, the identity under layer 0
    rollout = []
    for layer, block in enumerate(blocks):
        carried.append(by_head_source[layer].sum(0) @ below)  # (T,)
        below = alti_decoder_layer(block) @ below
        rollout.append(below)
    per_layer = torch.stack(carried)
    return LogitDecomposition(
        by_head_source=by_head_source,
        per_layer=per_layer,
        contributions=per_layer.sum(0),
        heads=by_head_source.sum(-1),
        embedding=float(r @ blocks[0].resid_pre[position]),
        mlp=torch.stack([r @ (block.resid_post[position] - block.resid_mid[position]) for block in blocks]),
        attention_bias=torch.stack([r @ block.b_o for block in blocks]),
        final_norm_bias=float(unembedding @ norm.bias),
        unembedding_bias=float(unembedding_bias),
        rollout=torch.stack(rollout),
    )
