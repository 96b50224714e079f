"""The engine of `inspect`: texts → backend → Captures → variants and math → analysis → Reports.

Pure orchestration over a loaded backend: no loading, no printing. The Python API
(api.py) and so every command call it.

The analysis itself (analyse_rows, at the end) takes the heads of a layer together, a block of
query rows at a time: memory O(h·T·(D + rows)), never O(T²).

Every statistic attn reports per head is a function of single rows of S and
softmax(S) (entropy, self-weight, top-k), or a sum over rows (symmetry). Rows
a:b of S are q[a:b]·kᵀ·scale; the same columns, for the symmetry, are
(q·k[a:b]ᵀ·scale)ᵀ. When one block holds every row and key (a text or an image
of up to ~590 tokens at 12 heads), the symmetry is S − Sᵀ of that block's scores.
Matrices are kept only for the rows and columns asked for.
All selected heads of a layer go through each block at once (h, c, n), so a
short text costs a few tensor operations per layer, not per head.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from attn_cli.analyses.inspect_report import HeadReport, InspectReport, LayerReport, ScoreStats, TopKeys
from attn_cli.data.capture import Capture, LayerCapture
from attn_cli.data.registry import measure_named
from attn_cli.data.selection import Analysis, Selection, Window
from attn_cli.math import attention, measures
from attn_cli.math.masks import AttentionMask
from attn_cli.math.measures import Symmetry
from attn_cli.plumbing.errors import BadInput, UnsupportedModel
from attn_cli.plumbing.textio import check_text

Progress = Callable[[int, int], None]  # progress(done, total), per analysed layer


def check_texts(texts: Sequence[str]) -> None:
    """Reject what is wrong before the model runs."""
    if not texts:
        raise BadInput("no text given", "pass a sentence, or - to read it from stdin")
    for text in texts:
        check_text(text, "the text")


def inspect_texts(
    backend,
    texts: Sequence[str],
    selection: Selection,
    analysis: Analysis,
    *,
    variant: str = "baseline",
    propagate: bool = False,
    truncate: bool = False,
    padding_side: str | None = None,
    pre_rope: bool = False,
    lazy: bool = False,
    words: bool = False,
    progress: Progress | None = None,
) -> list[InspectReport]:
    """Run the model once on all the texts (padded together); one report per text.

    lazy=True leaves each report's layers as an iterator, analysed as it is consumed (the
    streaming JSON writer). words=True merges subword pieces into words (analyses/words.py).
    """
    from attn_cli.analyses import words as merging
    from attn_cli.analyses.variants import VARIANTS, check_injectable, variant_named

    check_texts(texts)
    if words:
        merging.check_words(selection, analysis)
    if padding_side not in (None, "left", "right"):
        raise BadInput(f"padding {padding_side!r}", "use left or right")
    chosen = variant_named(variant)
    check_injectable([chosen], propagate)
    layers, heads = selection.resolve(backend.info)
    if propagate:  # the captures already hold what the variant computed
        inject, view, keep_inputs = chosen.transform, VARIANTS["baseline"], False
    else:
        inject, view, keep_inputs = None, chosen, chosen.uses_layer_input
    captures = backend.capture_batch(
        list(texts),
        layers,
        truncate=truncate,
        inject=inject,
        keep_inputs=keep_inputs,
        padding_side=padding_side,
        pre_rope=pre_rope,
    )
    reports = []
    for text, capture in zip(texts, captures):
        window = selection.window(len(capture.tokens), len(layers) * len(heads), analysis.cell_limit)
        analysed = analyse_capture(capture, layers, heads, view, analysis, window, progress)
        merged = None
        if words:
            merging.check_window(window)
            merged = merging.words_of(capture)
            analysed, window = merging.merge_layers(analysed, merged, analysis.top_k), Window.whole(len(merged))
        reports.append(
            InspectReport(
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
                words=merged,
            )
        )
    return reports


def analyse_capture(
    capture: Capture,
    layers: list[int],
    heads: list[int],
    view,
    analysis: Analysis,
    window: Window,
    progress: Progress | None = None,
) -> Iterator[LayerReport]:
    """Every selected head of every selected layer, seen through a variant (per-layer mode).

    Lazy: each layer is analysed when it is asked for, so a JSON writer can write it and
    let it go before the next one exists.
    """
    from attn_cli.analyses.variants import apply_variant

    token_texts = [token.text for token in capture.keys or capture.tokens]  # what the top keys are named by
    for done, layer in enumerate(layers):
        if progress is not None:
            progress(done, len(layers))
        seen = apply_variant(capture.layers[layer], view, capture.model.heads)
        kv_heads = [None if view.uses_layer_input else kv_head_of(capture, layer, head) for head in heads]
        yield LayerReport(
            layer,
            analyse_heads(
                seen,
                heads,
                kv_heads,
                token_texts,
                analysis,
                window,
                view.scores_formula(seen.scale),
                cross=capture.keys is not None,
            ),
        )


def kv_head_of(capture: Capture, layer: int, head: int) -> int:
    """The key/value head a query head reads in this layer: from the layer's own k, where layers differ (MiMo-V2-
    Flash's sliding layers have twice the kv heads of its full ones), else the model's grouping."""
    kv = capture.layers[layer].k.shape[0]
    heads = capture.model.heads
    return head // (heads // kv) if 0 < kv <= heads and heads % kv == 0 else capture.model.kv_head_of(head)


def analyse_heads(
    layer: LayerCapture,
    heads: list[int],
    kv_heads: list[int | None],
    token_texts: list[str],
    analysis: Analysis,
    window: Window,
    formula: str | None = None,
    cross: bool = False,
) -> list[HeadReport]:
    """Statistics of the heads, and their matrices within `window`, in float32 whatever the model's dtype.

    kv_heads[i]: the key/value head query head heads[i] reads; None when the layer has no per-head
    projections (raw): every head then reads row 0. formula: the scores as titles write them.
    cross: the queries and keys are different tokens (cross-attention; token_texts name the keys): the
    matrices are (T_query, T_key), and symmetry and self-weight, which pair query i with key i, are not defined.
    """

    if layer.weights is not None:
        return _weights_only_heads(layer, heads, kv_heads, token_texts, analysis, window)
    reads = [kv or 0 for kv in kv_heads]
    q = _heads_of(layer.q, heads).float()  # (h, T, D)  (h, T_query, D) under cross-attention
    k = _heads_of(layer.k, reads).float()  # (h, T, D): each query head's key head  (h, T_key, D)
    v = _heads_of(layer.v, reads).float() if analysis.vectors else None  # (h, T, D): the heads' outputs
    bias = None if layer.bias is None else layer.bias.float()[heads]  # (h, T_q, T_k): T5's position bias
    dot_form = layer.scorer is None and bias is None  # scores are q·kᵀ·scale and nothing else
    rows = analyse_rows(
        q,
        k,
        v,
        layer.mask,
        layer.scorer_for(heads),
        top_k=analysis.top_k,
        tolerance=analysis.tolerance,
        window=window,
        want_output=analysis.vectors,
        dot_scale=layer.scale if dot_form else None,
        cross=cross,
        bias=bias,
        sink=None if layer.sink is None else layer.sink.float()[heads],
        head_allowed=None if layer.head_mask is None else layer.head_mask[heads],
    )
    named = [
        ("scores", rows.scores),
        ("weights", rows.weights),
        ("entropy", rows.entropy),
        ("self_weight", rows.self_weight),
    ]
    measure = None if analysis.measure is None else measure_named(analysis.measure)
    if measure is not None:  # --measure NAME: its matrix over the window, beside the weights
        named.append(("measured", measure.compute(layer, heads, kv_heads, rows.weights, window)))
    if analysis.vectors:
        named += [("q", q), ("k", k), ("v", v), ("output", rows.output)]
    arrays = {name: _array(tensor) for name, tensor in named if tensor is not None}  # a matrix not kept: absent
    top_indices, top_weights, top_kept = (_array(t) for t in (rows.top.indices, rows.top.weights, rows.top.kept))
    variances = list(zip(measures.head_variance(q).tolist(), measures.head_variance(k).tolist()))  # (h,) each
    head_dim = q.shape[-1]
    reports = []
    for i, (head, kv_head) in enumerate(zip(heads, kv_heads)):
        tensors: dict[str, np.ndarray] = {name: arrays[name][i] for name in ("q", "k", "v", "output") if name in arrays}
        reports.append(
            HeadReport(
                head=head,
                kv_head=kv_head,
                scale=layer.scale,
                window=window,
                scores=arrays["scores"][i] if "scores" in arrays else None,
                weights=arrays["weights"][i] if "weights" in arrays else None,
                measured={} if measure is None or "measured" not in arrays else {measure: arrays["measured"][i]},
                symmetry=rows.symmetry[i],
                entropy=arrays["entropy"][i],
                self_weight=arrays["self_weight"][i],
                sink=None if rows.sink is None else _array(rows.sink[i]),
                top=TopKeys(top_indices[i], top_weights[i], top_kept[i], token_texts),
                tensors=tensors,
                score_stats=score_stats(variances[i], head_dim, layer.scale, rows.score_moments[i], dot_form),
                formula=f"q·kᵀ·{layer.scale:.4g} + the model's per-head mask bias"
                if layer.head_mask is not None
                else f"q·kᵀ·{layer.scale:.4g} + position bias"
                if bias is not None
                else formula
                if dot_form
                else getattr(layer.scorer, "formula", None),  # softcapping's cap·tanh(q·kᵀ·scale/cap)
            )
        )
    return reports


def _weights_only_heads(
    layer: LayerCapture,
    heads: list[int],
    kv_heads: list[int | None],
    token_texts: list[str],
    analysis: Analysis,
    window: Window,
) -> list[HeadReport]:
    """analyse_heads of a weights-only layer (LayerCapture.weights, the model's own softmax weights): entropy,
    self-weight, top keys and the weights' window as for any layer; no scores, symmetry, score statistics,
    q, k, v or norms, which need Q, K and V (their JSON is null, and `without_qkv` says why)."""
    if analysis.vectors or analysis.measure:
        wanted = ["--include qkv"] * analysis.vectors + [f"--measure {analysis.measure}"] * bool(analysis.measure)
        raise UnsupportedModel(f"{' and '.join(wanted)} need{'s' * (len(wanted) == 1)} Q, K and V", layer.without_qkv)
    weights = _heads_of(layer.weights, heads).float()  # (h, T, T)
    count = weights.shape[1]
    allowed = layer.mask.rows(0, count)  # (T, T)
    top = measures.top_key_tensors(weights, allowed, analysis.top_k, offset=0, keys=weights.shape[2])
    entropy, self_weight = (_array(t) for t in (measures.row_entropy(weights), measures.self_weight(weights, 0)))
    top_indices, top_weights, top_kept = (_array(t) for t in (top.indices, top.weights, top.kept))
    kept = blocked = None
    if not window.is_empty:
        (r0, r1), (c0, c1) = window.rows, window.cols
        kept = _array(weights[:, r0:r1, c0:c1].masked_fill(~allowed[r0:r1, c0:c1], 0.0))
        blocked = _array(~allowed[r0:r1, c0:c1])
    nan = float("nan")
    return [
        HeadReport(
            head=head,
            kv_head=kv_head,
            scale=nan,
            window=window,
            scores=None,
            weights=None if kept is None else kept[i],
            symmetry=Symmetry(nan, nan, None, f"no scores to measure: {layer.without_qkv}"),
            entropy=entropy[i],
            self_weight=self_weight[i],
            top=TopKeys(top_indices[i], top_weights[i], top_kept[i], token_texts),
            without_qkv=layer.without_qkv,
            blocked=blocked,
        )
        for i, (head, kv_head) in enumerate(zip(heads, kv_heads))
    ]


def _heads_of(tensor, heads: list[int]):
    """tensor[heads] (h, T, D): every head in order is the tensor itself (no copy)."""
    return tensor if heads == list(range(tensor.shape[0])) else tensor[heads]


def value_weighted_norms(layer: LayerCapture, heads: list[int], kv_heads: list[int | None], weights, window: Window):
    """--measure norm (a Measure, registered in render/builtins.py): the value-weighted norms ‖α_ij · v_j·W_Oʰ‖
    over the window, weights × each key's ‖f(x_j)‖ (Kobayashi et al. 2020). (h, rows, cols)"""
    from attn_cli.math.measures import value_norms

    if None in kv_heads:
        raise BadInput("norms need each head's output projection; raw has no per-head projections")
    if layer.w_o is None:
        raise UnsupportedModel(
            f"attn cannot find the attention output projection W_O of layer {layer.layer}",
            "norms are available for the BERT, GPT-2, Llama, Qwen, Mistral and DistilBERT families",
        )
    if weights is None:
        return None
    start, stop = window.cols
    v = _heads_of(layer.v, [kv or 0 for kv in kv_heads]).float()  # (h, T, D): each query head's value head
    return weights * value_norms(v[:, start:stop], layer.w_o, heads)[:, None, :]  # (h, rows, cols)


def score_stats(
    variances: tuple[float, float], head_dim: int, scale: float, moments: tuple[float, float], dot_form: bool
) -> ScoreStats:
    """The head's score moments beside the √d prediction from its own q and k variances (variances)."""
    mean, variance = moments
    q_variance, k_variance = variances
    return ScoreStats(
        mean=mean,
        variance=variance,
        unscaled_mean=mean / scale if dot_form and scale else None,
        unscaled_variance=variance / scale**2 if dot_form and scale else None,
        head_dim=head_dim,
        q_variance=q_variance,
        k_variance=k_variance,
        predicted_unscaled_variance=head_dim * q_variance * k_variance,
    )


def _array(tensor) -> np.ndarray:
    """A float32 tensor as a numpy array the report owns (NaN where masked)."""
    return tensor.detach().to("cpu", copy=True).numpy()


CHUNK_CELLS = 1 << 22  # ~4M scores per block over all heads: 16 MB in float32, a few such temporaries at once


@dataclass
class HeadRows:
    """The statistics of h heads (in the order given)."""

    entropy: torch.Tensor  # (h, T) nats
    self_weight: torch.Tensor  # (h, T)
    top: measures.TopKeyTensors  # (h, T, k) key index and weight, heaviest first (kept: not a short row's fill)
    symmetry: list[Symmetry]  # (h,)
    score_moments: list[tuple[float, float]]  # (h,) mean and variance of the allowed scores, as used (scaled)
    scores: torch.Tensor | None  # (h, rows, cols) the window of S, NaN where masked; None for an empty window
    weights: torch.Tensor | None  # (h, rows, cols) the window of softmax(S)
    output: torch.Tensor | None  # (h, T, D) weights @ v, when asked for
    sink: torch.Tensor | None = None  # (h, T) the learned sink's share of each row, where the layer has one


def analyse_rows(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor | None,
    mask: AttentionMask,
    score: Callable,
    *,
    top_k: int,
    tolerance: float,
    window: Window,
    want_output: bool,
    dot_scale: float | None,
    cross: bool = False,
    bias: torch.Tensor | None = None,
    sink: torch.Tensor | None = None,
    head_allowed: torch.Tensor | None = None,
) -> HeadRows:
    """q (h, T, D), and each query head's k and v (h, T, D), float32 (v is read only for want_output).
    cross: q (h, T_query, D) and k, v (h, T_key, D) are different tokens; symmetry and self-weight are then
    not defined (NaN, and why).
    bias: (h, T_q, T_k) added to the scores before the softmax (T5's relative position bias): the scores
    reported include it, and symmetry is of the whole S.
    sink: (h,) a learned sink logit per head, one more column of every row's softmax (attention.sink_softmax):
    the weights of a row then sum to 1 − its sink share, HeadRows.sink.
    head_allowed: (h, T_q, T_k) bool, which keys each head may attend, where the model masks per head (Doge's
    per-head top-k): mask then holds the keys any head may attend, and score moments are over those.

    score(q_rows (h, c, D), keys (h, n, D)) -> (h, c, n): the heads' scoring (LayerCapture.scorer_for).
    dot_scale: the scale when the scores are q·kᵀ·scale (symmetry over several blocks then comes from a
    cheaper identity), None for learned scorings.
    """
    keep = not window.is_empty
    heads, count = q.shape[0], q.shape[1]
    block = max(1, CHUNK_CELLS // max(count * heads, 1))  # query rows per block
    entropy = torch.empty(heads, count, device=q.device)
    self_weight = torch.empty(heads, count, device=q.device)
    output = torch.empty_like(q) if want_output else None
    sink_share = None if sink is None else torch.empty(heads, count, device=q.device)
    top = []  # TopKeyTensors (h, c, top_k) per block
    valid = mask.valid_keys()
    # One block of every row and key is the whole S: its symmetry comes from those scores, after the loop. A
    # biased S is no longer a bilinear form of q and k: its symmetry comes from the whole S, recomputed after it.
    whole = not cross and 0 < count <= block and mask.key_span(0, count) == (0, k.shape[1])
    symmetry = (
        None
        if cross or whole or bias is not None
        else measures.SymmetryAccumulator(q, k, dot_scale, valid)
        if dot_scale is not None
        else measures.BlockSymmetry(q, k, score, valid)
    )
    moments = measures.ScoreMoments(heads)
    kept_scores, kept_weights = [], []
    for start in range(0, count, block):
        stop = min(start + block, count)
        first, end = mask.key_span(start, stop)  # keys outside are masked for every row here
        if end <= first:  # these rows may attend nothing: one masked column keeps the shapes (weights 0)
            first, end = 0, 1
        scores = score(q[:, start:stop], k[:, first:end])  # (h, c, end - first) of S
        if bias is not None:
            scores = scores + bias[:, start:stop, first:end]
        allowed = mask.rows(start, stop, first, end)  # (c, end - first)
        moments.add(scores, allowed)  # over the keys any head may attend
        if head_allowed is not None:  # a per-head mask (Doge's top-k): (h, c, end - first)
            allowed = allowed & head_allowed[:, start:stop, first:end]
        if sink is None:
            weights = attention.masked_softmax(scores, allowed)  # (h, c, end - first); scores stay unmasked
        else:  # keys outside first:end are masked: they add nothing to the sink's softmax either
            assert sink_share is not None  # made above whenever there is a sink
            weights, sink_share[:, start:stop] = attention.sink_softmax(scores, allowed, sink)
        entropy[:, start:stop] = measures.row_entropy(weights)
        self_weight[:, start:stop] = measures.self_weight(weights, offset=start - first)  # w[i, i]
        top.append(measures.top_key_tensors(weights, allowed, top_k, offset=first, keys=k.shape[1]))
        if symmetry is not None:
            symmetry.add(start, stop)
        if output is not None:
            assert v is not None  # want_output comes with v
            output[:, start:stop] = attention.attend(weights, v[:, first:end])  # (h, c, D)
        if keep and start < window.rows[1] and stop > window.rows[0]:
            rows = slice(max(start, window.rows[0]) - start, min(stop, window.rows[1]) - start)
            kept_scores.append(
                _widen(scores[:, rows].masked_fill(~allowed[..., rows, :], float("nan")), first, window, float("nan"))
            )
            kept_weights.append(_widen(weights[:, rows], first, window, 0.0))
    if cross:  # no token is both a query and a key: no diagonal
        self_weight.fill_(float("nan"))
    return HeadRows(
        entropy=entropy,
        self_weight=self_weight,
        top=measures.cat_top_keys(top),
        symmetry=(
            measures.not_applicable(heads, count, k.shape[1])
            if cross
            else measures.dense_symmetry(scores, valid, tolerance)
            if whole  # the one block's scores: all of S
            else measures.dense_symmetry(score(q, k) + bias, valid, tolerance)
            if symmetry is None
            else symmetry.result(tolerance)
        ),
        score_moments=moments.mean_variance(),
        scores=_cat_rows(kept_scores) if keep else None,
        weights=_cat_rows(kept_weights) if keep else None,
        output=output,
        sink=sink_share,
    )


def _cat_rows(blocks: list[torch.Tensor]) -> torch.Tensor:
    """Blocks of rows (h, r, cols) -> (h, rows, cols)."""
    return blocks[0] if len(blocks) == 1 else torch.cat(blocks, dim=1)


def _widen(block: torch.Tensor, first: int, window: Window, fill: float) -> torch.Tensor:
    """Columns first:first + n of some rows (h, r, n), placed into the window's columns (fill where not computed)."""
    start, stop = window.cols
    if first == start and first + block.shape[-1] == stop:  # the block's columns are the window's
        return block
    out = torch.full((*block.shape[:-1], stop - start), fill, dtype=block.dtype, device=block.device)
    lo, hi = max(start, first), min(stop, first + block.shape[-1])
    if lo < hi:
        out[..., lo - start : hi - start] = block[..., lo - first : hi - first]
    return out
