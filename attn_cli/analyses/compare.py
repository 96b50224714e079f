"""The core of `attn compare`: the real model beside counterfactual variants, head by head."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from statistics import fmean

from attn_cli.analyses.inspect import analyse_capture, check_texts
from attn_cli.analyses.inspect_report import (
    HeadReport,
    LayerReport,
    cell_table,
    find_head,
    layer_json,
    rounded,
    run_header,
)
from attn_cli.data.capture import ModelInfo, Token
from attn_cli.data.document import Document, counted
from attn_cli.data.selection import Analysis, Selection, Window
from attn_cli.plumbing.errors import BadInput


@dataclass(frozen=True)
class Change:
    """One statistic of a head, in the baseline and in the variant."""

    baseline: float
    variant: float


@dataclass
class HeadDiff:
    head: int
    asymmetry: Change  # relative ||S - Sᵀ|| / ||S||
    self_weight: Change  # mean of the diagonal of weights
    entropy: Change  # mean row entropy, nats
    score_variance: Change  # variance of the unmasked scores
    js_divergence: float  # mean over query rows of JS(baseline row, variant row), nats
    top1_agreement: float  # share of query rows whose most-attended key is the same


@dataclass
class VariantSummary:
    heads: int
    symmetric_heads: int  # heads whose variant score matrix is symmetric within tolerance
    max_asymmetry: float  # largest relative asymmetry of the variant over the heads
    self_weight: Change  # means over heads
    entropy: Change
    score_variance: Change
    js_divergence: float
    top1_agreement: float


@dataclass
class CompareReport(Document):
    text: str
    model: ModelInfo
    device: str
    dtype: str
    tokens: list[Token]
    propagate: bool
    runs: dict[str, list[LayerReport]]  # "baseline" first, then each variant
    descriptions: dict[str, str]  # variant → what it changes, in words
    diffs: dict[str, list[tuple[int, list[HeadDiff]]]]  # variant → [(layer, per-head diffs)]
    summaries: dict[str, VariantSummary]
    truncated_from: int | None = None

    def summary_shape(self) -> str:
        return f"{counted(len(self.tokens), 'token')}, {counted(len(self.runs) - 1, 'variant')}"

    def head(self, layer: int, head: int, run: str = "baseline") -> HeadReport:
        """One head of one run: result.head(0, 2, "shared-k")."""
        if run not in self.runs:
            raise BadInput(f"no run named {run!r}", f"runs: {', '.join(self.runs)}")
        return find_head(self.runs[run], layer, head)

    def to_json_dict(self) -> dict:
        return {
            **run_header(self, "compare"),
            "mode": "propagate" if self.propagate else "per-layer",
            "runs": {name: {"layers": [layer_json(layer) for layer in layers]} for name, layers in self.runs.items()},
            "diff": {
                name: {
                    "summary": rounded(asdict(self.summaries[name])),
                    "layers": [
                        {"layer": layer, "heads": [rounded(asdict(diff)) for diff in heads]} for layer, heads in layers
                    ],
                }
                for name, layers in self.diffs.items()
            },
        }

    def to_arrow(self):
        """Every run's cells, run by run: run (baseline, then each variant), then InspectReport.to_arrow's columns."""
        import pyarrow as pa

        return pa.concat_tables(
            [cell_table(self.text, self.tokens, layers, run=name) for name, layers in self.runs.items()]
        )


def compare_text(
    backend,
    text: str,
    selection: Selection,
    analysis: Analysis,
    *,
    variants: Sequence[str] = ("shared-k",),
    propagate: bool = False,
    truncate: bool = False,
) -> CompareReport:
    """Baseline and each variant from the same forward pass (or, with propagate, one pass per variant)."""
    from attn_cli.analyses.variants import VARIANTS, check_injectable, variant_named

    check_texts([text])
    if isinstance(variants, str):
        variants = [variants]
    chosen = list({variant.name: variant for variant in map(variant_named, variants)}.values())
    chosen = [variant for variant in chosen if variant.name != "baseline"]
    if not chosen:
        raise BadInput("nothing to compare the baseline with", "name a variant, e.g. --variant shared-k")
    check_injectable(chosen, propagate)
    layers, heads = selection.resolve(backend.info)
    baseline = VARIANTS["baseline"]
    keep_inputs = any(variant.uses_layer_input for variant in chosen)

    def capture(inject=None):
        return backend.capture_batch([text], layers, truncate=truncate, inject=inject, keep_inputs=keep_inputs)[0]

    captured = capture()
    window = require_whole_matrices(selection, analysis, len(captured.tokens), len(layers) * len(heads))
    runs = {"baseline": list(analyse_capture(captured, layers, heads, baseline, analysis, window))}
    for variant in chosen:
        if propagate:  # the model runs on with the variant in every layer
            runs[variant.name] = list(
                analyse_capture(capture(variant.transform), layers, heads, baseline, analysis, window)
            )
        else:
            runs[variant.name] = list(analyse_capture(captured, layers, heads, variant, analysis, window))
    diffs = {
        name: [
            (base_layer.layer, [head_diff(b, v) for b, v in zip(base_layer.heads, layer.heads)])
            for base_layer, layer in zip(runs["baseline"], run)
        ]
        for name, run in runs.items()
        if name != "baseline"
    }
    return CompareReport(
        text=text,
        model=backend.info,
        device=captured.device,
        dtype=captured.dtype,
        tokens=captured.tokens,
        propagate=propagate,
        runs=runs,
        descriptions={variant.name: variant.description for variant in (baseline, *chosen)},
        diffs=diffs,
        summaries={name: summarise(runs[name], per_layer) for name, per_layer in diffs.items()},
        truncated_from=captured.truncated_from,
    )


def require_whole_matrices(selection: Selection, analysis: Analysis, tokens: int, heads_selected: int) -> Window:
    """The whole-matrix window; the comparison metrics read whole weight rows, so windows and
    over-limit selections are refused."""
    window = selection.window(tokens, heads_selected, analysis.cell_limit)
    if not window.is_whole:
        raise BadInput(
            f"compare needs whole matrices, and {heads_selected} heads × {tokens}² cells is past the "
            f"{analysis.cell_limit:,}-cell limit (or a window was asked for)",
            "select fewer layers or heads, or pass --full",
        )
    return window


def head_diff(base: HeadReport, other: HeadReport) -> HeadDiff:
    """How one head changed. Works from the reports' matrices (short inputs: both are present)."""
    import torch

    from attn_cli.math import measures

    p, q = torch.from_numpy(base.weights), torch.from_numpy(other.weights)  # (T, T) each
    base_scores, other_scores = torch.from_numpy(base.scores), torch.from_numpy(other.scores)  # NaN: masked
    allowed = ~base_scores.isnan()
    rows = allowed.any(-1)  # query rows that attend anything
    return HeadDiff(
        head=base.head,
        asymmetry=Change(base.symmetry.relative, other.symmetry.relative),
        self_weight=Change(fmean(base.self_weight), fmean(other.self_weight)),
        entropy=Change(fmean(base.entropy), fmean(other.entropy)),
        score_variance=Change(
            measures.score_variance(base_scores, allowed), measures.score_variance(other_scores, allowed)
        ),
        js_divergence=float(measures.js_divergence(p, q)[rows].mean()),
        top1_agreement=measures.top1_agreement(p[rows], q[rows]),
    )


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
