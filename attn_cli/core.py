"""The core of `attn inspect`: request → backend → Capture → math → analysis → Report."""

from __future__ import annotations

from dataclasses import dataclass

from attn_cli.errors import BadInput
from attn_cli.report import HeadReport, InspectReport, LayerReport, TopKey
from attn_cli.selection import parse_selection


@dataclass(frozen=True)
class InspectRequest:
    text: str
    model: str = "minilm"
    layers: str = "all"  # selection syntax of attn_cli.selection
    heads: str = "all"
    top_k: int = 3
    device: str = "auto"
    dtype: str = "auto"  # auto = as the model was saved
    include_qkv: bool = False
    truncate: bool = False
    allow_pickle: bool = False
    symmetry_tolerance: float = 1e-5


def run_inspect(request: InspectRequest, backend=None) -> InspectReport:
    """Run the model once and analyse the selected heads. `backend` may be passed in already loaded."""
    if not request.text.strip():
        raise BadInput("the text is empty", "pass a sentence, or - to read it from stdin")
    if request.top_k < 1:
        raise BadInput(f"--top-k must be at least 1, not {request.top_k}")
    if backend is None:
        from attn_cli.backends.registry import load_backend
        from attn_cli.devices import resolve_device

        device = resolve_device(request.device)
        backend = load_backend(request.model, device=device, dtype=request.dtype, allow_pickle=request.allow_pickle)
    info = backend.info
    layers = parse_selection(request.layers, info.layers, "layer")
    heads = parse_selection(request.heads, info.heads, "head")
    capture = backend.capture(request.text, layers, truncate=request.truncate)
    token_texts = [token.text for token in capture.tokens]
    layer_reports = [
        LayerReport(layer, [analyse_head(capture.layers[layer], head, info, token_texts, request) for head in heads])
        for layer in layers
    ]
    return InspectReport(
        text=request.text,
        model=info,
        device=capture.device,
        dtype=capture.dtype,
        tokens=capture.tokens,
        layers=layer_reports,
        truncated_from=capture.truncated_from,
    )


def analyse_head(layer, head: int, info, token_texts: list[str], request: InspectRequest) -> HeadReport:
    """Scores, weights and statistics of one head, in float32 whatever the model's dtype."""
    import torch

    from attn_cli import analysis, attention

    kv_head = info.kv_head_of(head)
    q = layer.q[head].float()  # (T, D)
    k = layer.k[kv_head].float()  # (T, D)
    v = layer.v[kv_head].float()  # (T, D)
    raw_scores = attention.score_matrix(q, k, layer.scale)  # (T, T) unmasked
    weights = attention.masked_softmax(raw_scores, layer.allowed)  # (T, T)
    valid = layer.allowed.any(dim=0)  # (T,) keys some query may attend: the non-padding tokens
    masked_scores = torch.where(layer.allowed, raw_scores, torch.full_like(raw_scores, float("nan")))
    tensors = {}
    if request.include_qkv:
        output = attention.attend(weights, v)  # (T, D)
        tensors = {name: t.cpu().tolist() for name, t in (("q", q), ("k", k), ("v", v), ("output", output))}
    return HeadReport(
        head=head,
        kv_head=kv_head,
        scale=layer.scale,
        scores=_with_none_for_nan(masked_scores),
        weights=weights.cpu().tolist(),
        symmetry=analysis.symmetry_report(raw_scores, valid, request.symmetry_tolerance),
        entropy=analysis.row_entropy(weights).cpu().tolist(),
        self_weight=analysis.self_weight(weights).cpu().tolist(),
        top=[
            [TopKey(index, token_texts[index], weight) for index, weight in row]
            for row in analysis.top_keys(weights, layer.allowed, request.top_k)
        ],
        tensors=tensors,
    )


def _with_none_for_nan(matrix) -> list[list[float | None]]:
    """(T, T) tensor with NaN at masked cells → rows of floats with None there."""
    return [[None if value != value else value for value in row] for row in matrix.cpu().tolist()]
