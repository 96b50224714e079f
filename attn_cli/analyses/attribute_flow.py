"""`attn attribute --method flow`: attention flow (Abnar & Zuidema 2020, "Quantifying Attention Flow in
Transformers"). The layers' head-averaged attention, each mixed half and half with the identity for the
residual path (Â_l = 0.5·A_l + 0.5·I, rows renormalised), is a layered graph whose edge from token i
of layer l to token j of layer l-1 has capacity Â_l[i, j]; the flow of output token i to input token j
is the maximum flow between them, and each row is normalised to sum to 1 (as their code does).

T² max-flows over (L+1)·T nodes: short inputs only (FLOW_MAX_TOKENS).
"""

from __future__ import annotations

from attn_cli.backends.capabilities import Tokenizes, require
from attn_cli.plumbing.errors import BadInput

# The max-flows alone for 6 layers (MiniLM), on the shared 2-core machine: 16 tokens 1.5 s, 32 tokens 9 s,
# 64 tokens 40 s.
FLOW_MAX_TOKENS = 32


def flow(backend, text: str, layers: list[int], truncate: bool = False, **_):
    """-> (None: flow has no per-layer form here, matrix (T, T) rows summing to 1)."""
    from attn_cli.analyses.inspect import inspect_texts
    from attn_cli.analyses.rollout import fused_layers
    from attn_cli.data.selection import Analysis, Selection
    from attn_cli.math.relevance import attention_flow

    require(
        backend,
        Tokenizes,
        "attn attribute --method flow",
        hint="use a Hugging Face model, such as the default minilm, or attn rollout",
    )
    [report] = inspect_texts(backend, [text], Selection(layers=layers, full=True), Analysis(top_k=1), truncate=truncate)
    count = len(report.tokens)
    if count > FLOW_MAX_TOKENS:
        raise BadInput(
            f"attention flow takes at most {FLOW_MAX_TOKENS} tokens; this text is {count}",
            "it solves T² max-flow problems (64 tokens take about 40 s); shorten the text, or use attn rollout",
        )
    return None, attention_flow(fused_layers(report, "mean")).float().numpy()
