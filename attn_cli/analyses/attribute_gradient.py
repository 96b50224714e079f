"""`attn attribute --method gradient`: gradient-weighted attention (Chefer et al. 2021, "Generic
Attention-model Explainability for Interpreting Bi-Modal and Encoder-Decoder Transformers"), their rule
for self-attention:

    Ā_l = E_h[(∇A_l ⊙ A_l)⁺]      the heads' mean of the positive part, ∇A_l = ∂target/∂A_l
    R = I;  R ← R + Ā_l·R          for each selected layer, first to last

Row i of R is how relevant each input token is, through output token i, to the target (a class
logit, the next-token logit, or the sentence embedding: backends/gradients.py says which). R's rows
do not sum to 1; the identity is the residual path. Defined wherever the model's attention hands back
its softmax weights (eager attention): post-LN encoders and pre-LN decoders alike, since the rule
reads only A and ∇A.
"""

from __future__ import annotations

import numpy as np

from attn_cli.backends.capabilities import AttentionGradients, require


def gradient(backend, text: str, layers: list[int], truncate: bool = False, target=None, **_):
    """-> (per_layer Ā (L, T, T), matrix R (T, T), the target differentiated (a JSON-ready dict))."""
    from attn_cli.math.relevance import gradient_weighted, relevancy

    run = require(
        backend,
        AttentionGradients,
        "attn attribute --method gradient",
        hint="--method gradient needs a Hugging Face model, such as the default minilm",
    ).attention_gradients(text, layers, target, truncate=truncate)
    per_layer = [gradient_weighted(run.weights[layer], run.grads[layer]) for layer in layers]  # each (T, T)
    matrix = relevancy(per_layer)
    return np.stack([layer.float().numpy() for layer in per_layer]), matrix.float().numpy(), run.target
