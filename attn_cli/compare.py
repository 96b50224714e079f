"""The core of `attn compare`: the real model beside counterfactual variants, head by head."""

from __future__ import annotations

from dataclasses import dataclass
from statistics import fmean

from attn_cli.core import RunOptions, analyse_capture, check_options, load_for, matrix_window, select
from attn_cli.errors import BadInput
from attn_cli.report import Change, CompareReport, HeadDiff, HeadReport, VariantSummary


@dataclass(frozen=True)
class CompareRequest(RunOptions):
    variants: tuple[str, ...] = ("shared-k",)


def run_compare(request: CompareRequest, backend=None) -> CompareReport:
    """Baseline and each variant from the same forward pass (or, with propagate, one pass per variant)."""
    from attn_cli.variants import VARIANTS, check_injectable, variant_named

    check_options(request)
    variants = list({variant.name: variant for variant in map(variant_named, request.variants)}.values())
    variants = [variant for variant in variants if variant.name != "baseline"]
    if not variants:
        raise BadInput("nothing to compare the baseline with", "name a variant, e.g. --variant shared-k")
    check_injectable(variants, request.propagate)
    backend = backend or load_for(request)
    layers, heads = select(request, backend.info)
    baseline = VARIANTS["baseline"]
    keep_inputs = any(variant.uses_layer_input for variant in variants)
    capture = backend.capture(request.text, layers, truncate=request.truncate, keep_inputs=keep_inputs)
    window = require_whole_matrices(request, len(capture.tokens), len(layers) * len(heads))
    runs = {"baseline": list(analyse_capture(capture, layers, heads, baseline, request, window))}
    for variant in variants:
        if request.propagate:  # the model runs on with the variant in every layer
            injected = backend.capture(request.text, layers, truncate=request.truncate, inject=variant.transform)
            runs[variant.name] = list(analyse_capture(injected, layers, heads, baseline, request, window))
        else:
            runs[variant.name] = list(analyse_capture(capture, layers, heads, variant, request, window))
    diffs = {
        name: [
            (base_layer.layer, [head_diff(b, v) for b, v in zip(base_layer.heads, layer.heads)])
            for base_layer, layer in zip(runs["baseline"], run)
        ]
        for name, run in runs.items() if name != "baseline"
    }
    return CompareReport(
        text=request.text, model=backend.info, device=capture.device, dtype=capture.dtype, tokens=capture.tokens,
        propagate=request.propagate, runs=runs, diffs=diffs,
        summaries={name: summarise(runs[name], per_layer) for name, per_layer in diffs.items()},
        truncated_from=capture.truncated_from,
    )


def require_whole_matrices(request: CompareRequest, tokens: int, heads_selected: int):
    """The whole-matrix window; the comparison metrics read whole weight rows, so windows and
    over-limit selections are refused."""
    window = matrix_window(request, tokens, heads_selected)
    if window is None or window.rows != (0, tokens) or window.cols != (0, tokens):
        raise BadInput(
            f"compare needs whole matrices, and {heads_selected} heads × {tokens}² cells is past the "
            f"{request.matrix_cell_limit:,}-cell limit (or a window was asked for)",
            "select fewer layers or heads, or pass --full",
        )
    return window


def head_diff(base: HeadReport, other: HeadReport) -> HeadDiff:
    """How one head changed. Works from the reports' matrices (short inputs: both are present)."""
    import torch

    from attn_cli import analysis

    p, q = torch.tensor(base.weights), torch.tensor(other.weights)  # (T, T) each
    base_scores, other_scores = _scores(base), _scores(other)
    allowed = ~base_scores.isnan()
    rows = allowed.any(-1)  # query rows that attend anything
    return HeadDiff(
        head=base.head,
        asymmetry=Change(base.symmetry.relative, other.symmetry.relative),
        self_weight=Change(fmean(base.self_weight), fmean(other.self_weight)),
        entropy=Change(fmean(base.entropy), fmean(other.entropy)),
        score_variance=Change(analysis.score_variance(base_scores, allowed),
                              analysis.score_variance(other_scores, allowed)),
        js_divergence=float(analysis.js_divergence(p, q)[rows].mean()),
        top1_agreement=analysis.top1_agreement(p[rows], q[rows]),
    )


def _scores(head: HeadReport):
    import torch

    return torch.tensor([[float("nan") if x is None else x for x in row] for row in head.scores])


def summarise(run, per_layer: list[tuple[int, list[HeadDiff]]]) -> VariantSummary:
    """Means over every compared head, and how many of the variant's heads are symmetric."""
    diffs = [diff for _, heads in per_layer for diff in heads]
    variant_heads = [head for layer in run for head in layer.heads]

    def mean_change(name: str) -> Change:
        return Change(fmean(getattr(d, name).baseline for d in diffs), fmean(getattr(d, name).variant for d in diffs))

    return VariantSummary(
        heads=len(diffs),
        symmetric_heads=sum(head.symmetry.symmetric for head in variant_heads),
        max_asymmetry=max(head.symmetry.relative for head in variant_heads),
        self_weight=mean_change("self_weight"),
        entropy=mean_change("entropy"),
        score_variance=mean_change("score_variance"),
        js_divergence=fmean(d.js_divergence for d in diffs),
        top1_agreement=fmean(d.top1_agreement for d in diffs),
    )
