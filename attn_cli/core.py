"""The core of `attn inspect`: request → backend → Capture → math → analysis → Report."""

from __future__ import annotations

from dataclasses import dataclass

from attn_cli.errors import BadInput
from attn_cli.report import HeadReport, InspectReport, LayerReport, TopKey
from attn_cli.selection import parse_selection


@dataclass(frozen=True)
class RunOptions:
    """What every command shares: the text, the model, the selection and how to run it."""

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
    propagate: bool = False  # inject variants into the model instead of recomputing per layer
    symmetry_tolerance: float = 1e-5
    batch_texts: tuple[str, ...] = ()  # more texts, run with `text` as one padded batch
    padding_side: str | None = None  # left | right for batches; None = the tokenizer's own
    pre_rope: bool = False  # show q and k before rotary position embeddings (for study)
    revision: str | None = None  # a hub id's branch, tag or commit
    trust_remote_code: bool = False  # run a hub model's own Python code (never by default)
    device_map: str | None = None  # accelerate placement ("auto") for models larger than one device

    def texts(self) -> list[str]:
        return [self.text, *self.batch_texts]


@dataclass(frozen=True)
class InspectRequest(RunOptions):
    variant: str = "baseline"  # a single counterfactual: shared-k, no-scale, scoring=cosine, …


def check_options(request: RunOptions) -> None:
    """Reject what is wrong before spending seconds loading a model."""
    if any(not text.strip() for text in request.texts()):
        raise BadInput("the text is empty", "pass a sentence, or - to read it from stdin")
    if request.padding_side not in (None, "left", "right"):
        raise BadInput(f"--padding {request.padding_side!r}", "use left or right")
    if request.top_k < 1:
        raise BadInput(f"--top-k must be at least 1, not {request.top_k}")


def load_for(request: RunOptions):
    from attn_cli.backends.registry import load_backend
    from attn_cli.devices import resolve_device

    device = resolve_device(request.device)
    return load_backend(request.model, device=device, dtype=request.dtype, allow_pickle=request.allow_pickle,
                        revision=request.revision, trust_remote_code=request.trust_remote_code,
                        device_map=request.device_map)


def select(request: RunOptions, info) -> tuple[list[int], list[int]]:
    return parse_selection(request.layers, info.layers, "layer"), parse_selection(request.heads, info.heads, "head")


def run_inspect(request: InspectRequest, backend=None) -> InspectReport:
    """Run the model once on request.text and analyse the selected heads."""
    return run_inspect_batch(request, backend)[0]


def run_inspect_batch(request: InspectRequest, backend=None) -> list[InspectReport]:
    """Run the model once on all the request's texts (padded together); one report per text.

    `backend` may be passed in already loaded.
    """
    from attn_cli.variants import VARIANTS, variant_named

    check_options(request)
    variant = variant_named(request.variant)
    if request.propagate and variant.uses_layer_input:
        raise BadInput("raw has no projections to inject into the model", "use raw without --propagate")
    backend = backend or load_for(request)
    layers, heads = select(request, backend.info)
    if request.propagate:  # the captures already hold what the variant computed
        inject, view, keep_inputs = variant.transform, VARIANTS["baseline"], False
    else:
        inject, view, keep_inputs = None, variant, variant.uses_layer_input
    captures = backend.capture_batch(request.texts(), layers, truncate=request.truncate, inject=inject,
                                     keep_inputs=keep_inputs, padding_side=request.padding_side,
                                     pre_rope=request.pre_rope)
    return [
        InspectReport(
            text=text,
            model=backend.info,
            device=capture.device,
            dtype=capture.dtype,
            tokens=capture.tokens,
            layers=analyse_capture(capture, layers, heads, view, request),
            truncated_from=capture.truncated_from,
            variant=variant.name,
            propagate=request.propagate,
            padding_side=capture.padding_side,
            pre_rope=request.pre_rope,
        )
        for text, capture in zip(request.texts(), captures)
    ]


def analyse_capture(capture, layers: list[int], heads: list[int], view, request: RunOptions) -> list[LayerReport]:
    """Every selected head of every selected layer, seen through a variant (per-layer mode)."""
    from attn_cli.variants import apply_variant

    token_texts = [token.text for token in capture.tokens]
    reports = []
    for layer in layers:
        seen = apply_variant(capture.layers[layer], view, capture.model.heads)
        kv_head_of = (lambda head: None) if view.uses_layer_input else capture.model.kv_head_of
        reports.append(LayerReport(layer, [
            analyse_head(seen, head, kv_head_of(head), token_texts, request) for head in heads
        ]))
    return reports


def analyse_head(layer, head: int, kv_head: int | None, token_texts: list[str], request: RunOptions) -> HeadReport:
    """Scores, weights and statistics of one head, in float32 whatever the model's dtype.

    kv_head None: the layer has no per-head projections (raw); every head reads row 0.
    """
    import torch

    from attn_cli import analysis, attention

    q = layer.q[head].float()  # (T, D)
    k = layer.k[kv_head or 0].float()  # (T, D)
    v = layer.v[kv_head or 0].float()  # (T, D)
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
