"""Relevance through the layers: gradient-weighted attention (Chefer et al. 2021) and attention flow
(Abnar & Zuidema 2020). Pure math on weights and gradients already captured; no model, no I/O.

Both read a list of per-layer matrices, first layer first, each (T, T) with row i the query
(output) token and column j the key (input) token.
"""

from __future__ import annotations

import torch

from attn_cli.math.measures import residual_mixed
from attn_cli.plumbing.errors import MissingPackage


def gradient_weighted(weights: torch.Tensor, grads: torch.Tensor) -> torch.Tensor:
    """Chefer et al. 2021, rule 5: Ā = E_h[(∇A ⊙ A)⁺], the heads' mean of the positive part.

    weights, grads: (H, T, T) one layer's softmax weights and the target's gradient with respect to
    them. A head whose weights push the target down counts 0, not negative. -> (T, T)
    """
    return (grads.double() * weights.double()).clamp(min=0).mean(dim=0)


def relevancy(layers: list[torch.Tensor]) -> torch.Tensor:
    """Chefer et al. 2021, rule 6: R = I; for each layer in order R ← R + Ā·R.

    layers: each layer's Ā (T, T), first layer first. The identity is the residual path; row i of R
    is how relevant each input token is to output token i for the target. A target that does not
    depend on the attention leaves every Ā = 0 and R = I. -> (T, T) float64
    """
    count = layers[0].shape[-1]
    rolled = torch.eye(count, dtype=torch.float64, device=layers[0].device)
    for mixed in layers:
        rolled = rolled + mixed.double() @ rolled
    return rolled


# Capacities in (0, 1] become whole numbers for scipy's max-flow (integers only): 2^30 keeps each within
# 5e-10 of its value and every sum of them inside int32. The flows agree with networkx's on floats to ~1e-9.
_FLOW_SCALE = 2**30


def attention_flow(layers: list[torch.Tensor]) -> torch.Tensor:
    """Abnar & Zuidema 2020: the maximum flow from each output token to each input token through the
    layered graph of residual-mixed attention, each row normalised to sum to 1.

    layers: each layer's head-fused weights (T, T), first layer first. Node l·T + i is token i after
    layer l (l = 0: the input); the edge from token i of layer l to token j of layer l-1 has capacity
    Â_l[i, j], Â_l = 0.5·A_l + 0.5·I rows renormalised (their code adds I and renormalises: the same).
    One max-flow per (output, input) pair, as their code does: T² max-flows over (L+1)·T nodes, by
    scipy's Dinic (compiled; networkx, which their code uses, is 15× slower here). -> (T, T) float64
    """
    import numpy as np

    try:
        from scipy.sparse import csr_array
        from scipy.sparse.csgraph import maximum_flow
    except ImportError:
        raise MissingPackage("attention flow needs scipy", "pip install 'attn-cli[flow]'") from None

    count, top = layers[0].shape[-1], len(layers)
    sources, targets, capacities = [], [], []
    for layer, weights in enumerate(layers, start=1):
        mixed = residual_mixed(weights).cpu().numpy()  # (T, T)
        rows, cols = np.nonzero(mixed > 0)
        sources.append(layer * count + rows)
        targets.append((layer - 1) * count + cols)
        capacities.append(np.rint(mixed[rows, cols] * _FLOW_SCALE).astype(np.int32))
    nodes = (top + 1) * count
    graph = csr_array(
        (np.concatenate(capacities), (np.concatenate(sources), np.concatenate(targets))), shape=(nodes, nodes)
    )
    flows = (
        np.array(
            [
                [maximum_flow(graph, top * count + i, j, method="dinic").flow_value for j in range(count)]
                for i in range(count)
            ],
            dtype=np.float64,
        )
        / _FLOW_SCALE
    )  # (T, T)
    return torch.from_numpy(flows / flows.sum(-1, keepdims=True))
