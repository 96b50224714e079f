"""The core of `attn inspect`: request → backend → Capture → math → analysis → Report."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator

from attn_cli.errors import BadInput
from attn_cli.report import HeadReport, InspectReport, LayerReport, ScoreStats, TopKey
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
    full: bool = False  # keep whole score/weight matrices however large
    rows: tuple[int, int] | None = None  # keep only this window of query rows (start, stop) …
    cols: tuple[int, int] | None = None  # … and of key columns
    matrix_cell_limit: int = 2_000_000  # past this many cells over all selected heads, matrices are left out
    toy: dict = field(default_factory=dict)  # --model toy settings: d_model, heads, scoring, causal, weights …

    def texts(self) -> list[str]:
        return [self.text, *self.batch_texts]


@dataclass(frozen=True)
class InspectRequest(RunOptions):
    variant: str = "baseline"  # a single counterfactual: shared-k, no-scale, scoring=cosine, …


# ToyConfig fields whose flag is not simply --field-name.
TOY_FLAGS = {"heads": "--toy-heads", "layers": "--toy-layers", "causal": "--mask"}


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
    if request.toy and request.model != "toy":
        setting = next(iter(request.toy))
        flag = TOY_FLAGS.get(setting, "--" + setting.replace("_", "-"))
        raise BadInput(f"{flag} is a setting of the toy model", "use it with --model toy")
    return load_backend(request.model, device=device, dtype=request.dtype, allow_pickle=request.allow_pickle,
                        revision=request.revision, trust_remote_code=request.trust_remote_code,
                        device_map=request.device_map, toy=request.toy)


def select(request: RunOptions, info) -> tuple[list[int], list[int]]:
    return parse_selection(request.layers, info.layers, "layer"), parse_selection(request.heads, info.heads, "head")


def run_inspect(request: InspectRequest, backend=None) -> InspectReport:
    """Run the model once on request.text and analyse the selected heads."""
    return run_inspect_batch(request, backend)[0]


def run_inspect_batch(request: InspectRequest, backend=None, *, lazy: bool = False,
                      progress: Callable[[int, int], None] | None = None) -> list[InspectReport]:
    """Run the model once on all the request's texts (padded together); one report per text.

    `backend` may be passed in already loaded. lazy=True leaves each report's layers as an
    iterator, analysed as it is consumed (the streaming JSON writer); progress(done, total)
    is called per analysed layer.
    """
    from attn_cli.variants import VARIANTS, check_injectable, variant_named

    check_options(request)
    variant = variant_named(request.variant)
    check_injectable([variant], request.propagate)
    backend = backend or load_for(request)
    layers, heads = select(request, backend.info)
    if request.propagate:  # the captures already hold what the variant computed
        inject, view, keep_inputs = variant.transform, VARIANTS["baseline"], False
    else:
        inject, view, keep_inputs = None, variant, variant.uses_layer_input
    captures = backend.capture_batch(request.texts(), layers, truncate=request.truncate, inject=inject,
                                     keep_inputs=keep_inputs, padding_side=request.padding_side,
                                     pre_rope=request.pre_rope)
    reports = []
    for text, capture in zip(request.texts(), captures):
        window = matrix_window(request, len(capture.tokens), len(layers) * len(heads))
        analysed = analyse_capture(capture, layers, heads, view, request, window, progress)
        reports.append(InspectReport(
            text=text,
            model=backend.info,
            device=capture.device,
            dtype=capture.dtype,
            tokens=capture.tokens,
            layers=analysed if lazy else list(analysed),
            matrices_left_out=window is None,
            truncated_from=capture.truncated_from,
            variant=variant.name,
            propagate=request.propagate,
            padding_side=capture.padding_side,
            pre_rope=request.pre_rope,
        ))
    return reports


def matrix_window(request: RunOptions, tokens: int, heads_selected: int):
    """Which part of each head's matrices to keep: a Window, or None (statistics only).

    --rows/--cols pick a window; otherwise the whole matrix when --full is given or
    all selected heads together stay within the cell limit (configs/defaults.toml).
    """
    from attn_cli.head_rows import Window

    if request.rows is not None or request.cols is not None:
        return Window(_span(request.rows, tokens, "--rows"), _span(request.cols, tokens, "--cols"))
    if request.full or heads_selected * tokens * tokens <= request.matrix_cell_limit:
        return Window((0, tokens), (0, tokens))
    return None


def _span(span: tuple[int, int] | None, tokens: int, option: str) -> tuple[int, int]:
    if span is None:
        return 0, tokens
    start, stop = span[0], min(span[1], tokens)
    if not 0 <= start < stop:
        raise BadInput(f"{option} {span[0]}:{span[1]} selects nothing of the {tokens} tokens",
                       f"use START:STOP with 0 <= START < STOP <= {tokens}")
    return start, stop


def analyse_capture(capture, layers: list[int], heads: list[int], view, request: RunOptions, window,
                    progress: Callable[[int, int], None] | None = None) -> Iterator[LayerReport]:
    """Every selected head of every selected layer, seen through a variant (per-layer mode).

    Lazy: each layer is analysed when it is asked for, so a JSON writer can write it and
    let it go before the next one exists. window: from matrix_window (None: statistics only).
    progress(done, total) is called per layer.
    """
    from attn_cli.variants import apply_variant

    token_texts = [token.text for token in capture.tokens]
    for done, layer in enumerate(layers):
        if progress is not None:
            progress(done, len(layers))
        seen = apply_variant(capture.layers[layer], view, capture.model.heads)
        kv_head_of = (lambda head: None) if view.uses_layer_input else capture.model.kv_head_of
        yield LayerReport(layer, [
            analyse_head(seen, head, kv_head_of(head), token_texts, request, window) for head in heads
        ])


def analyse_head(layer, head: int, kv_head: int | None, token_texts: list[str], request: RunOptions,
                 window=None) -> HeadReport:
    """Statistics of one head, and its matrices within `window`, in float32 whatever the model's dtype.

    kv_head None: the layer has no per-head projections (raw); every head reads row 0.
    """
    from attn_cli.head_rows import analyse_rows

    q = layer.q[head].float()  # (T, D)
    k = layer.k[kv_head or 0].float()  # (T, D)
    v = layer.v[kv_head or 0].float()  # (T, D)
    scorer = None if layer.scorer is None else (lambda rows, keys: layer.scorer(rows, keys, head))
    rows = analyse_rows(q, k, v, layer.scale, layer.mask, top_k=request.top_k, scorer=scorer,
                        tolerance=request.symmetry_tolerance, window=window, want_output=request.include_qkv)
    tensors = {}
    if request.include_qkv:
        tensors = {name: t.cpu().tolist() for name, t in (("q", q), ("k", k), ("v", v), ("output", rows.output))}
    whole = window is not None and window.rows == (0, len(token_texts)) and window.cols == (0, len(token_texts))
    return HeadReport(
        head=head,
        kv_head=kv_head,
        scale=layer.scale,
        scores=None if rows.scores is None else _with_none_for_nan(rows.scores),
        weights=None if rows.weights is None else rows.weights.cpu().tolist(),
        symmetry=rows.symmetry,
        entropy=rows.entropy.cpu().tolist(),
        self_weight=rows.self_weight.cpu().tolist(),
        top=[[TopKey(index, token_texts[index], weight) for index, weight in row] for row in rows.top],
        tensors=tensors,
        window=None if window is None or whole else (window.rows, window.cols),
        score_stats=score_stats(q, k, layer.scale, rows.score_moments, scorer is None),
    )


def score_stats(q, k, scale: float, moments: tuple[float, float], dot_form: bool) -> ScoreStats:
    """The head's score moments beside the √d prediction from its own q and k variances."""
    mean, variance = moments
    q_variance, k_variance = float(q.var(unbiased=False)), float(k.var(unbiased=False))
    return ScoreStats(
        mean=mean,
        variance=variance,
        unscaled_mean=mean / scale if dot_form and scale else None,
        unscaled_variance=variance / scale**2 if dot_form and scale else None,
        head_dim=q.shape[-1],
        q_variance=q_variance,
        k_variance=k_variance,
        predicted_unscaled_variance=q.shape[-1] * q_variance * k_variance,
    )


def _with_none_for_nan(matrix) -> list[list[float | None]]:
    """(T, T) tensor with NaN at masked cells → rows of floats with None there."""
    return [[None if value != value else value for value in row] for row in matrix.cpu().tolist()]
