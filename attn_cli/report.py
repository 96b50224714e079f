"""The Report: plain data that every renderer reads, and its one JSON serializer."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from attn_cli.backends.base import ModelInfo, Token

SCHEMA_VERSION = 1

Matrix = list[list[float | None]]  # rows of floats; None marks a masked cell


@dataclass(frozen=True)
class Symmetry:
    max_abs_diff: float  # max |S_ij - S_ji|
    relative: float  # ||S - Sᵀ||_F / ||S||_F
    symmetric: bool  # relative <= tolerance


@dataclass(frozen=True)
class ScoreStats:
    """Scores of one head against the √d argument (concepts.md §3).

    If q and k had independent zero-mean components of variances var_q, var_k, q·k would
    have variance d·var_q·var_k; the 1/√d scale brings unit-variance inputs back to 1.
    """

    mean: float  # of the allowed scores as the model uses them (scaled)
    variance: float
    unscaled_mean: float | None  # the same without the scale; None for scorings that are not q·k·scale
    unscaled_variance: float | None
    head_dim: int
    q_variance: float  # of the head's q components
    k_variance: float
    predicted_unscaled_variance: float  # head_dim · q_variance · k_variance


@dataclass
class TopKey:
    index: int
    token: str
    weight: float


@dataclass
class HeadReport:
    head: int
    kv_head: int | None  # None for raw, which has no per-head projections
    scale: float
    scores: Matrix | None  # (T, T) pre-softmax, scaled, masked → None
    weights: Matrix | None  # (T, T) post-softmax
    symmetry: Symmetry
    entropy: list[float]  # (T,) nats per query row
    self_weight: list[float]  # (T,) the diagonal of weights
    top: list[list[TopKey]]  # (T, ≤k) most-attended keys per query
    tensors: dict[str, Matrix] = field(default_factory=dict)  # q, k, v, output with --include qkv
    window: tuple[tuple[int, int], tuple[int, int]] | None = None  # (rows, cols) when scores/weights are a window
    score_stats: ScoreStats | None = None


@dataclass
class LayerReport:
    layer: int
    heads: list[HeadReport]


@dataclass
class InspectReport:
    text: str
    model: ModelInfo
    device: str
    dtype: str
    tokens: list[Token]
    layers: list[LayerReport]  # or, from run_inspect_batch(lazy=True), an iterator consumed once
    truncated_from: int | None = None
    variant: str = "baseline"  # the counterfactual applied (--shared-k, --no-scale, --scoring)
    propagate: bool = False  # the variant was injected into the model rather than recomputed per layer
    padding_side: str | None = None  # set when this text ran in a padded batch with others
    pre_rope: bool = False  # q and k (and so scores) are from before rotary position embeddings
    matrices_left_out: bool = False  # scores/weights not kept: past the size limit without --full

    def heads(self):
        """Every (layer, head) pair in the report, in order."""
        return [(layer.layer, head) for layer in self.layers for head in layer.heads]

    def json_header(self) -> dict:
        """Everything of the JSON document but "layers", which comes last (streamed by files.stream_json)."""
        document = {**_run_header(self, "inspect"), "variant": self.variant, "propagate": self.propagate,
                    "pre_rope": self.pre_rope, "matrices_left_out": self.matrices_left_out}
        if self.padding_side is not None:
            document["padding"] = self.padding_side
        return document

    def to_json_dict(self) -> dict:
        """The schema_version 1 document (README "JSON output"). Floats keep float32 precision."""
        return {**self.json_header(), "layers": layers_json(self.layers)}


@dataclass
class InspectBatch:
    """Several texts run as one padded batch: one report per text, padding already removed."""

    reports: list[InspectReport]
    padding_side: str  # "left" or "right"

    @property
    def model(self) -> ModelInfo:
        return self.reports[0].model

    def json_header(self) -> dict:
        return {"schema_version": SCHEMA_VERSION, "command": "inspect", "padding": self.padding_side}

    def to_json_dict(self) -> dict:
        return {**self.json_header(), "sequences": [report.to_json_dict() for report in self.reports]}


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
class CompareReport:
    text: str
    model: ModelInfo
    device: str
    dtype: str
    tokens: list[Token]
    propagate: bool
    runs: dict[str, list[LayerReport]]  # "baseline" first, then each variant
    diffs: dict[str, list[tuple[int, list[HeadDiff]]]]  # variant → [(layer, per-head diffs)]
    summaries: dict[str, VariantSummary]
    truncated_from: int | None = None

    def to_json_dict(self) -> dict:
        return {
            **_run_header(self, "compare"),
            "mode": "propagate" if self.propagate else "per-layer",
            "runs": {name: {"layers": layers_json(layers)} for name, layers in self.runs.items()},
            "diff": {
                name: {
                    "summary": _plain(asdict(self.summaries[name])),
                    "layers": [
                        {"layer": layer, "heads": [_plain(asdict(diff)) for diff in heads]}
                        for layer, heads in layers
                    ],
                }
                for name, layers in self.diffs.items()
            },
        }


def _run_header(report, command: str) -> dict:
    document = {
        "schema_version": SCHEMA_VERSION,
        "command": command,
        "text": report.text,
        "model": asdict(report.model),
        "device": report.device,
        "dtype": report.dtype,
        "tokens": [asdict(token) for token in report.tokens],
    }
    if report.truncated_from is not None:
        document["truncated_from"] = report.truncated_from
    return document


def layers_json(layers: list[LayerReport]) -> list[dict]:
    return [{"layer": layer.layer, "heads": [head_json(head) for head in layer.heads]} for layer in layers]


def _plain(record: dict) -> dict:
    """Round the floats of a flat-or-nested dict of numbers (Change → {"baseline", "variant"})."""
    return {key: _plain(value) if isinstance(value, dict) else _num(value) if isinstance(value, float) else value
            for key, value in record.items()}


def head_matrices(head: HeadReport) -> list[tuple[str, Matrix]]:
    """The head's matrix-valued JSON fields, in document order: scores, weights, then q, k, v, output."""
    named = [("scores", head.scores), ("weights", head.weights), *head.tensors.items()]
    return [(name, rows) for name, rows in named if rows is not None]


def head_json(head: HeadReport, matrices: bool = True) -> dict:
    """One head's JSON record; matrices=False leaves the matrix fields to a faster writer (files.py)."""
    record = {"head": head.head, "kv_head": head.kv_head, "scale": _num(head.scale)}
    if head.window is not None:
        (row_start, row_stop), (col_start, col_stop) = head.window
        record["window"] = {"rows": [row_start, row_stop], "cols": [col_start, col_stop]}
    record["symmetry"] = {
        "max_abs_diff": _num(head.symmetry.max_abs_diff),
        "relative": _num(head.symmetry.relative),
        "symmetric": head.symmetry.symmetric,
    }
    if head.score_stats is not None:
        record["score_stats"] = {key: _num(value) if isinstance(value, float) else value
                                 for key, value in asdict(head.score_stats).items()}
    record["entropy"] = [_num(x) for x in head.entropy]
    record["self_weight"] = [_num(x) for x in head.self_weight]
    record["top"] = [
        [{"index": t.index, "token": t.token, "weight": _num(t.weight)} for t in row] for row in head.top
    ]
    if matrices:
        record.update((name, matrix_json(rows)) for name, rows in head_matrices(head))
    return record


def _num(value: float | None) -> float | None:
    """7 significant digits (float32 precision); None for masked or non-finite, so JSON never has NaN.

    render/files.py writes matrices with the same f"{value:.7g}", straight to text.
    """
    if value is None or not math.isfinite(value):
        return None
    return float(f"{value:.7g}")


def matrix_json(rows: Matrix) -> Matrix:
    return [[_num(value) for value in row] for row in rows]
