"""A pre-norm decoder layer's residual stream split into its parts, and the information-flow graph built
from them (Ferrando & Voita 2024, "Information Flow Routes: Automatically Interpreting Language Models at
Scale").

Pure tensor math over what backends/decoder_blocks.py captured (T tokens, d = d_model, H heads, D head dim):

    mid_i  = x_i + Σ_h Σ_j A^h_ij v^h_j W^h_O + b_O        the attention: one part per (source j, head h)
    post_i = mid_i + f_i                                    the FFN as one block, f = post − mid

The parts sum exactly to the whole (before any normalisation); a key the mask hides has A^h_ij = 0, so its
part is the zero vector.

Each part's contribution is its L1 proximity to the whole, as llm-transparency-tool's
routes/contributions.py computes it (facebookresearch/llm-transparency-tool):

    c_k = max(ε, ‖s‖₁ − ‖s − c_k + δ‖₁),  normalised to sum to 1 over the parts of s

with ε = 1e-5 and δ = 1e-6 (torch's pairwise_distance adds δ to the difference). Adaptations, each stated:
- a part the causal mask hides (A^h_ij = 0: the zero vector) gets 0, not ε: it carried nothing, and the
  reference's ε for each of the (T − i − 1)·H hidden parts only adds (T·H·ε)/Σ to its denominator;
- the attention's output bias b_O is in the whole (mid) and in no part, as in the reference;
- contributions are computed only for the residual states the pruned search reaches (each row is
  normalised on its own, so they are the same numbers the reference's full graph holds at those states).

The graph (the reference's routes/graph.py): nodes X0_p (the embedding at position p), A{l}_p (the residual
after layer l's attention), M{l}_p (layer l's FFN block), I{l}_p (the residual after layer l). Edges, each
weighted by its contribution to its head node: I{l-1}_j → A{l}_p (attention, summed over heads; a head's
share is kept per edge), I{l-1}_p → A{l}_p (the residual; merged with the self-attention edge into one edge,
as the reference's DiGraph does), A{l}_p → M{l}_p → I{l}_p (the FFN), A{l}_p → I{l}_p (the residual). The
route of position p is every edge of weight > τ reachable backwards from I{L-1}_p through such edges.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

EPS = 1e-5  # the reference's floor on a part's proximity
DELTA = 1e-6  # torch.nn.functional.pairwise_distance's eps, added to the difference


def head_parts(weights: torch.Tensor, values: torch.Tensor, w_o: torch.Tensor, rows=None) -> torch.Tensor:
    """A^h_ij v^h_j W^h_O for the query rows `rows` (all if None): (R, T j, H, d).

    weights (H, T, T), values (H, T, D), w_o (H, D, d)."""
    transformed = torch.einsum("hjv,hvd->hjd", values, w_o)  # (H, T, d) v^h_j W^h_O
    chosen = weights if rows is None else weights[:, rows]  # (H, R, T)
    return (chosen.unsqueeze(-1) * transformed.unsqueeze(1)).permute(1, 2, 0, 3)  # (R, T, H, d)


def proximities(parts: torch.Tensor, whole: torch.Tensor, carried: torch.Tensor) -> torch.Tensor:
    """The L1 proximity of each part to the whole, normalised: (N, P) summing to 1 over P.

    parts (N, P, d), whole (N, d), carried (N, P) bool: False for a part that is masked (it gets 0)."""
    distance = (parts - whole.unsqueeze(1) + DELTA).abs().sum(-1)  # (N, P)
    score = (whole.abs().sum(-1, keepdim=True) - distance).clamp_min(EPS) * carried
    return score / score.sum(-1, keepdim=True)


def attention_contributions(block, rows: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(c_attn (R, T j, H), c_residual (R,)) for the residual after the attention at positions `rows`."""
    parts = head_parts(block.weights, block.values, block.w_o, rows)  # (R, T, H, d)
    count, tokens, heads, width = parts.shape
    carried = (block.weights[:, rows] > 0).permute(1, 2, 0).reshape(count, tokens * heads)  # (R, T·H)
    flat = torch.cat([parts.reshape(count, tokens * heads, width), block.resid_pre[rows].unsqueeze(1)], dim=1)
    carried = torch.cat([carried, torch.ones(count, 1, dtype=torch.bool)], dim=1)
    shares = proximities(flat, block.resid_mid[rows], carried)  # (R, T·H + 1)
    return shares[:, :-1].reshape(count, tokens, heads), shares[:, -1]


def ffn_contributions(block) -> tuple[torch.Tensor, torch.Tensor]:
    """(c_ffn (T,), c_residual (T,)): the FFN block's and the residual's shares of the layer's output."""
    ffn = block.resid_post - block.resid_mid  # (T, d)
    parts = torch.stack([ffn, block.resid_mid], dim=1)  # (T, 2, d)
    shares = proximities(parts, block.resid_post, torch.ones(parts.shape[:2], dtype=torch.bool))
    return shares[:, 0], shares[:, 1]


def alti_decoder_layer(block) -> torch.Tensor:
    """ALTI on a pre-norm decoder layer (Ferrando et al. 2022; for decoders as mt-upc/logit-explanations'
    src/contributions.py measures it), (T, T) rows summing to 1. Token j's part of the residual after the
    attention at i is T_i(x_j) = Σ_h A^h_ij v^h_j W^h_O + δ_ij x_j (the values with Norm1's affine terms and
    b_V in, as the reference's "affine" vectors); the whole is mid_i, b_O included:

        c_ij = max(0, ‖mid_i‖₁ − ‖mid_i − T_i(x_j)‖₁),  then c_ij / Σ_j c_ij

    A key the causal mask hides has T_i(x_j) = 0, so c_ij = 0 exactly. The FFN is token-wise and left out,
    as ALTI does."""
    mixed = head_parts(block.weights, block.values, block.w_o).sum(2)  # (T i, T j, d)
    mixed = mixed + torch.diag_embed(block.resid_pre.T).permute(1, 2, 0)  # + δ_ij x_j
    whole = block.resid_mid  # (T, d)
    distance = (mixed - whole.unsqueeze(1)).abs().sum(-1)  # (T, T)
    scores = (whole.abs().sum(-1, keepdim=True) - distance).clamp_min(0)
    return scores / scores.sum(-1, keepdim=True)


@dataclass
class Edge:
    source: str
    target: str
    kind: str  # attention (another position), residual (same position: residual + self-attention), ffn
    weight: float
    heads: list[float] = field(default_factory=list)  # attention: each head's share (summed into weight)


def node(kind: str, layer: int, position: int) -> str:
    """The reference's node names: X0_p, A{l}_p, M{l}_p, I{l}_p."""
    return f"{kind}{layer}_{position}"


def route(blocks: list, position: int, threshold: float) -> list[Edge]:
    """The edges of weight > threshold reachable backwards from the last layer's residual at `position`,
    in the order the search met them (from the top down)."""
    last = len(blocks) - 1
    ffn = [ffn_contributions(block) for block in blocks]  # cheap: every position at once
    attention: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}
    edges: list[Edge] = []
    queue, seen = [node("I", last, position)], {node("I", last, position)}

    def visit(edge: Edge) -> None:
        if edge.weight > threshold:
            edges.append(edge)
            if edge.source not in seen:
                seen.add(edge.source)
                queue.append(edge.source)

    while queue:
        name = queue.pop(0)
        kind, rest = name[0], name[1:]
        layer, at = (int(part) for part in rest.split("_"))
        if kind == "I":
            f, r = ffn[layer]
            visit(Edge(node("M", layer, at), name, "ffn", float(f[at])))
            visit(Edge(node("A", layer, at), name, "residual", float(r[at])))
        elif kind == "M":
            visit(Edge(node("A", layer, at), name, "ffn", float(ffn[layer][0][at])))
        elif kind == "A":
            if (layer, at) not in attention:
                c_attn, c_resid = attention_contributions(blocks[layer], [at])
                attention[layer, at] = (c_attn[0], c_resid[0])
            c_attn, c_resid = attention[layer, at]  # (T, H), ()
            below = "X" if layer == 0 else "I"
            for source in range(c_attn.shape[0]):  # a masked key's share is 0: never above τ >= 0
                heads = c_attn[source]
                weight = float(heads.sum()) + (float(c_resid) if source == at else 0.0)
                kind_of = "residual" if source == at else "attention"
                visit(Edge(node(below, max(layer - 1, 0), source), name, kind_of, weight, heads.tolist()))
    return edges
