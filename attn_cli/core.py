"""The engine of `inspect`: texts → backend → Captures → variants and math → analysis → Reports.

Pure orchestration over a loaded backend: no loading, no printing. The Python API
(api.py) and so every command call it.
"""

from __future__ import annotations

from typing import Callable, Iterator, Sequence

import numpy as np

from attn_cli.capture import Capture, LayerCapture
from attn_cli.errors import BadInput, UnsupportedModel
from attn_cli.report import HeadReport, InspectReport, LayerReport, ScoreStats, TopKey
from attn_cli.selection import Analysis, Selection, Window

Progress = Callable[[int, int], None]  # progress(done, total), per analysed layer


def check_texts(texts: Sequence[str]) -> None:
    """Reject what is wrong before the model runs."""
    if not texts:
        raise BadInput("no text given", "pass a sentence, or - to read it from stdin")
    for text in texts:
        if not isinstance(text, str):
            raise BadInput(f"the text must be a string, not {type(text).__name__}")
        if not text.strip():
            raise BadInput("the text is empty", "pass a sentence, or - to read it from stdin")


def inspect_texts(backend, texts: Sequence[str], selection: Selection, analysis: Analysis, *,
                  variant: str = "baseline", propagate: bool = False, truncate: bool = False,
                  padding_side: str | None = None, pre_rope: bool = False, lazy: bool = False,
                  progress: Progress | None = None) -> list[InspectReport]:
    """Run the model once on all the texts (padded together); one report per text.

    lazy=True leaves each report's layers as an iterator, analysed as it is consumed (the
    streaming JSON writer).
    """
    from attn_cli.variants import VARIANTS, check_injectable, variant_named

    check_texts(texts)
    if padding_side not in (None, "left", "right"):
        raise BadInput(f"padding {padding_side!r}", "use left or right")
    chosen = variant_named(variant)
    check_injectable([chosen], propagate)
    layers, heads = selection.resolve(backend.info)
    if propagate:  # the captures already hold what the variant computed
        inject, view, keep_inputs = chosen.transform, VARIANTS["baseline"], False
    else:
        inject, view, keep_inputs = None, chosen, chosen.uses_layer_input
    captures = backend.capture_batch(list(texts), layers, truncate=truncate, inject=inject, keep_inputs=keep_inputs,
                                     padding_side=padding_side, pre_rope=pre_rope)
    reports = []
    for text, capture in zip(texts, captures):
        window = selection.window(len(capture.tokens), len(layers) * len(heads), analysis.cell_limit)
        analysed = analyse_capture(capture, layers, heads, view, analysis, window, progress)
        reports.append(InspectReport(
            text=text,
            model=backend.info,
            device=capture.device,
            dtype=capture.dtype,
            tokens=capture.tokens,
            layers=analysed if lazy else list(analysed),
            window=window,
            truncated_from=capture.truncated_from,
            variant=chosen.name,
            propagate=propagate,
            padding_side=capture.padding_side,
            pre_rope=pre_rope,
        ))
    return reports


def analyse_capture(capture: Capture, layers: list[int], heads: list[int], view, analysis: Analysis,
                    window: Window, progress: Progress | None = None) -> Iterator[LayerReport]:
    """Every selected head of every selected layer, seen through a variant (per-layer mode).

    Lazy: each layer is analysed when it is asked for, so a JSON writer can write it and
    let it go before the next one exists.
    """
    from attn_cli.variants import apply_variant

    token_texts = [token.text for token in capture.tokens]
    for done, layer in enumerate(layers):
        if progress is not None:
            progress(done, len(layers))
        seen = apply_variant(capture.layers[layer], view, capture.model.heads)
        kv_heads = [None if view.uses_layer_input else capture.model.kv_head_of(head) for head in heads]
        yield LayerReport(layer, analyse_heads(seen, heads, kv_heads, token_texts, analysis, window,
                                               view.scores_formula(seen.scale)))


def analyse_heads(layer: LayerCapture, heads: list[int], kv_heads: list[int | None], token_texts: list[str],
                  analysis: Analysis, window: Window, formula: str | None = None) -> list[HeadReport]:
    """Statistics of the heads, and their matrices within `window`, in float32 whatever the model's dtype.

    kv_heads[i]: the key/value head query head heads[i] reads; None when the layer has no per-head
    projections (raw): every head then reads row 0. formula: the scores as titles write them.
    """
    from attn_cli.head_rows import analyse_rows

    reads = [kv or 0 for kv in kv_heads]
    q = layer.q[heads].float()  # (h, T, D)
    k = layer.k[reads].float()  # (h, T, D): each query head's key head
    v = layer.v[reads].float()  # (h, T, D)
    dot_form = layer.scorer is None
    rows = analyse_rows(q, k, v, layer.mask, layer.scorer_for(heads), top_k=analysis.top_k,
                        tolerance=analysis.tolerance, window=window, want_output=analysis.vectors,
                        dot_scale=layer.scale if dot_form else None)
    named = [("scores", rows.scores), ("weights", rows.weights), ("entropy", rows.entropy),
             ("self_weight", rows.self_weight), ("norms", _norms(layer, heads, kv_heads, v, rows.weights, window)
                                                  if analysis.norms else None)]
    if analysis.vectors:
        named += [("q", q), ("k", k), ("v", v), ("output", rows.output)]
    arrays = {name: None if tensor is None else _array(tensor) for name, tensor in named}
    reports = []
    for i, (head, kv_head) in enumerate(zip(heads, kv_heads)):
        tensors = {name: arrays[name][i] for name in ("q", "k", "v", "output")} if analysis.vectors else {}
        reports.append(HeadReport(
            head=head,
            kv_head=kv_head,
            scale=layer.scale,
            window=window,
            scores=None if arrays["scores"] is None else arrays["scores"][i],
            weights=None if arrays["weights"] is None else arrays["weights"][i],
            norms=None if arrays["norms"] is None else arrays["norms"][i],
            symmetry=rows.symmetry[i],
            entropy=arrays["entropy"][i],
            self_weight=arrays["self_weight"][i],
            top=[[TopKey(index, token_texts[index], weight) for index, weight in row] for row in rows.top[i]],
            tensors=tensors,
            score_stats=score_stats(q[i], k[i], layer.scale, rows.score_moments[i], dot_form),
            formula=formula if dot_form else None,
        ))
    return reports


def _norms(layer: LayerCapture, heads: list[int], kv_heads: list[int | None], v, weights, window: Window):
    """The value-weighted norms ‖α_ij · v_j·W_Oʰ‖ over the window: weights × each key's ‖f(x_j)‖. (h, rows, cols)"""
    from attn_cli.analysis import value_norms

    if None in kv_heads:
        raise BadInput("norms need each head's output projection; raw has no per-head projections")
    if layer.w_o is None:
        raise UnsupportedModel(f"attn cannot find the attention output projection W_O of layer {layer.layer}",
                               "norms are available for the BERT, GPT-2, Llama, Qwen, Mistral and DistilBERT families")
    if weights is None:
        return None
    start, stop = window.cols
    return weights * value_norms(v[:, start:stop], layer.w_o, heads)[:, None, :]  # (h, rows, cols)


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


def _array(tensor) -> np.ndarray:
    """A float32 tensor as a numpy array the report owns (NaN where masked)."""
    return tensor.detach().to("cpu", copy=True).numpy()
