"""What an inspect run returns — HeadReport, LayerReport, InspectReport — and their JSON.

Its own module, apart from the inspect engine, because every other analysis builds on these
shapes (compare, diff, generate, rollout and steps run inspect and keep its head reports) and
every renderer reads them.

Matrices are numpy float32 arrays (masked scores are NaN) so a Python user can
use them directly; JSON turns NaN into null and keeps float32 precision (7
significant digits). Every report writes itself as JSON text in chunks
(`json_chunks`), so a long document is streamed layer by layer; `to_json_dict`
is the same document as a dict.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from attn_cli.data.capture import ModelInfo, Token, Word
from attn_cli.data.document import (
    SCHEMA_VERSION,
    Document,
    counted,
    dumps,
    matrix_json,
    matrix_text,
    num_json,
    object_chunks,
    vector_json,
)
from attn_cli.data.image import PatchGrid
from attn_cli.data.selection import Window
from attn_cli.math.measures import Symmetry
from attn_cli.plumbing.errors import BadInput

if TYPE_CHECKING:
    from attn_cli.data.registry import Measure


@dataclass(frozen=True)
class ScoreStats:
    """Scores of one head against the √d argument.

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


class TopKeys(Sequence):
    """A head's most-attended keys per query row, (T, ≤k), kept as arrays: row i is a list of TopKey
    made when it is read (top[i]), and JSON is written from the arrays, so a row nobody reads costs nothing.

    indices, weights, kept (T, k) numpy: key index, weight (heaviest first), and False for the entries
    that only fill up a row with fewer than k allowed keys (left out). names: the key tokens' texts.
    """

    def __init__(self, indices: np.ndarray, weights: np.ndarray, kept: np.ndarray, names: Sequence[str]):
        self.indices, self.weights, self.kept, self.names = indices, weights, kept, names

    @classmethod
    def of(cls, top, names: Sequence[str]) -> TopKeys:
        """From math.measures.TopKeyTensors (T, k) of one head."""
        return cls(_numpy(top.indices), _numpy(top.weights), _numpy(top.kept), names)

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, row):
        if isinstance(row, slice):
            return [self[i] for i in range(*row.indices(len(self)))]
        return [
            TopKey(index, self.names[index], weight)
            for index, weight, ok in zip(
                self.indices[row].tolist(), self.weights[row].tolist(), self.kept[row].tolist()
            )
            if ok
        ]

    def __eq__(self, other) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    def __repr__(self) -> str:
        return f"TopKeys({list(self)!r})"

    def json(self) -> list[list[dict]]:
        """The rows as JSON objects {"index", "token", "weight"}, straight from the arrays."""
        names = self.names
        return [
            [
                {"index": index, "token": names[index], "weight": num_json(weight)}
                for index, weight, ok in zip(row_i, row_w, row_ok)
                if ok
            ]
            for row_i, row_w, row_ok in zip(self.indices.tolist(), self.weights.tolist(), self.kept.tolist())
        ]


def _numpy(tensor) -> np.ndarray:
    return tensor.detach().cpu().numpy()


def top_json(top: Sequence[Sequence[TopKey]]) -> list[list[dict]]:
    """A head's top keys as JSON: from TopKeys' arrays, or from any rows of TopKey."""
    if isinstance(top, TopKeys):
        return top.json()
    return [[{"index": t.index, "token": t.token, "weight": num_json(t.weight)} for t in row] for row in top]


@dataclass
class HeadReport:
    """One head. Matrices cover `window` (rows × cols of the whole T × T); per-row statistics every row."""

    head: int
    kv_head: int | None  # None for raw, which has no per-head projections
    scale: float
    window: Window
    scores: np.ndarray | None  # (rows, cols) pre-softmax, scaled; NaN where masked; None for an empty window
    weights: np.ndarray | None  # (rows, cols) post-softmax; masked cells exactly 0
    symmetry: Symmetry
    entropy: np.ndarray  # (T,) nats per query row
    self_weight: np.ndarray  # (T,) the diagonal of weights
    top: Sequence[list[TopKey]]  # (T, ≤k) most-attended keys per query (TopKeys: rows made when read)
    tensors: dict[str, np.ndarray] = field(default_factory=dict)  # q, k, v (T, D) and output, when kept
    score_stats: ScoreStats | None = None
    # --measure NAME: the Measure (data/registry.py) and its (rows, cols) matrix over the window, e.g. the norms
    # ‖α_ij · v_j·W_Oʰ‖ with --measure norm; empty without one
    measured: dict[Measure, np.ndarray] = field(default_factory=dict)
    formula: str | None = None  # the scores as titles write them ("k·kᵀ·0.1768" under shared-k); None: q·kᵀ·scale
    # (W, W) bool under --words (analyses/words.py): which word may attend which. Set only there, where the
    # scores, which carry the mask otherwise (NaN), are left out; the matrices are then over words.
    allowed: np.ndarray | None = None
    # (T,) the learned sink's share p of each query row (GPT-OSS's s_aux): the ⟨sink⟩ column of the softmax,
    # which the weights leave out (each row of them sums to 1 − p). None: the layer has no sink.
    sink: np.ndarray | None = None
    # Weights-only (a model whose attention does not go through the attention interface): why there are no
    # scores, symmetry, q, k or v (the JSON's are null), and the window's (rows, cols) bool of masked cells
    # (the scores' NaN say it otherwise).
    without_qkv: str | None = None
    blocked: np.ndarray | None = None

    @property
    def norms(self) -> np.ndarray | None:
        """The value-weighted norms ‖α_ij · v_j·W_Oʰ‖ (measure="norm"), or None."""
        return next((matrix for measure, matrix in self.measured.items() if measure.field == "norms"), None)

    @property
    def merged(self) -> bool:
        """The matrices and per-row statistics are over words (--words), not tokens."""
        return self.allowed is not None

    def masked(self, matrix: np.ndarray | None) -> np.ndarray | None:
        """A (rows, cols) matrix of this head with NaN where the query may not attend the key, as every view
        draws it (blank): the mask from the scores' NaN, or under --words from `allowed`."""
        if matrix is None:
            return None
        if self.allowed is not None:
            return np.where(self.allowed, matrix, np.nan)
        if self.blocked is not None:
            return np.where(self.blocked, np.nan, matrix)
        return matrix if self.scores is None else np.where(np.isnan(self.scores), np.nan, matrix)


@dataclass
class LayerReport:
    layer: int
    heads: list[HeadReport]
    # An encoder–decoder model's layers (analyses/seq2seq.py): which attention this is, "encoder" (source ×
    # source), "decoder" (target × target) or "cross" (target × source); None for a model with one stack.
    stack: str | None = None


@dataclass
class InspectReport(Document):
    text: str
    model: ModelInfo
    device: str
    dtype: str
    tokens: list[Token]
    layers: list[LayerReport] | Iterator[LayerReport]  # a lazy run's: an iterator consumed once (analysed as read)
    window: Window  # the part of each head's matrices kept (whole, a window, or nothing)
    truncated_from: int | None = None
    variant: str = "baseline"  # the counterfactual applied (--variant)
    propagate: bool = False  # the variant was injected into the model rather than recomputed per layer
    padding_side: str | None = None  # set when this text ran in a padded batch with others
    pre_rope: bool = False  # q and k (and so scores) are from before rotary position embeddings
    words: list[Word] | None = None  # --words: the matrices are over these words (each names its pieces)
    image: PatchGrid | None = None  # --image: the patch grid the tokens lie on (data/image.py); text is its file
    # Cross-attention (analyses/seq2seq.py): the key tokens (the source) when they are not `tokens` (the
    # queries, the target): every matrix is then (T_query, T_key).
    keys: list[Token] | None = None

    def layer_list(self) -> list[LayerReport]:
        """The layers as a list: a lazy run's are analysed to the end first (and kept, as the list)."""
        if not isinstance(self.layers, list):
            self.layers = list(self.layers)
        return self.layers

    def summary_shape(self) -> str:
        shape = counted(len(self.axis), "word" if self.words is not None else "token")
        if isinstance(self.layers, list) and self.layers:  # a lazy run's layers are not read for a summary
            shape += f", {counted(len(self.layers), 'layer')} × {counted(len(self.layers[0].heads), 'head')}"
        return shape

    @property
    def key_axis(self) -> list:
        """What the matrices' columns are: the keys where they are other tokens than the rows, else `axis`."""
        return self.axis if self.keys is None else self.keys

    @property
    def axis(self) -> list:
        """What the matrices' rows and columns are: the tokens, or under --words the words (each with
        index, text and special, as a token has)."""
        return self.tokens if self.words is None else self.words

    @property
    def matrices_left_out(self) -> bool:
        """Scores and weights not kept: past the size limit without --full or a window."""
        return self.window.is_empty

    def heads(self) -> list[tuple[int, HeadReport]]:
        """Every (layer, head) pair in the report, in order."""
        return [(layer.layer, head) for layer in self.layers for head in layer.heads]

    def head(self, layer: int, head: int) -> HeadReport:
        """One head's report: report.head(0, 2).weights is its (T, T) weight matrix."""
        return find_head(self.layers, layer, head)

    def json_header(self) -> dict:
        """Everything of the JSON document but "layers", which comes last."""
        document = {
            **run_header(self, "inspect"),
            "variant": self.variant,
            "propagate": self.propagate,
            "pre_rope": self.pre_rope,
            "matrices_left_out": self.matrices_left_out,
        }
        if self.padding_side is not None:
            document["padding"] = self.padding_side
        if self.image is not None:
            document["image"] = self.image.to_json()
        if self.words is not None:
            document["word_merge"] = WORD_MERGE
            document["words"] = words_json(self.words, self.tokens)
        return document

    def json_chunks(self) -> Iterator[str]:
        """The schema_version 1 document; each layer is analysed (if lazy) as its text is made."""
        return object_chunks(self.json_header(), "layers", (iter([layer_text(layer)]) for layer in self.layers))

    def to_json_dict(self) -> dict:
        """The schema_version 1 document (docs/json.md). Floats keep float32 precision."""
        return {**self.json_header(), "layers": [layer_json(layer) for layer in self.layers]}

    def to_arrow(self):
        """One row per (layer, head, query, key) of the kept window: text, layer, head, query, query_token,
        key, key_token, weight, score (pre-softmax; null where masked), and norm with measure="norm"."""
        if self.matrices_left_out:
            raise BadInput(
                f"the matrices of this {len(self.tokens)}-token text were not kept (past the cell limit)",
                "pass full=True, or rows= and cols= for a window",
            )
        return cell_table(self.text, self.axis, self.layers)  # under --words the rows and keys are words


@dataclass
class InspectBatch(Document):
    """Several texts run as one padded batch: one report per text, padding already removed."""

    reports: list[InspectReport]
    padding_side: str  # "left" or "right"

    def summary_parts(self) -> list[str | None]:
        return [self.model.name, f"{counted(len(self.reports), 'text')} padded {self.padding_side}"]

    @property
    def model(self) -> ModelInfo:
        return self.reports[0].model

    def json_header(self) -> dict:
        return {"schema_version": SCHEMA_VERSION, "command": "inspect", "padding": self.padding_side}

    def json_chunks(self) -> Iterator[str]:
        return object_chunks(self.json_header(), "sequences", (report.json_chunks() for report in self.reports))

    def to_json_dict(self) -> dict:
        return {**self.json_header(), "sequences": [report.to_json_dict() for report in self.reports]}

    def to_arrow(self):
        """Every text's rows (InspectReport.to_arrow), one after another; the text column tells them apart."""
        import pyarrow as pa

        return pa.concat_tables([report.to_arrow() for report in self.reports])


def cell_table(text: str, tokens: list, layers: Iterable[LayerReport], **labels):
    """The cells of every head of `layers` (data/tables.cells): labels (run=…) first, then text, layer, head.
    tokens: what the matrices' rows and keys are (Tokens, or Words under --words); each has a .text."""
    from attn_cli.data.tables import cells

    return cells(
        [token.text for token in tokens],
        (
            (
                {**labels, "text": text, "layer": layer.layer, "head": head.head},
                head.window.rows,
                head.window.cols,
                {
                    "weight": head.weights,
                    "score": head.scores,
                    **{measure.column: matrix for measure, matrix in head.measured.items()},
                },
            )
            for layer in layers
            for head in layer.heads
        ),
    )


def find_head(layers: Iterable[LayerReport], layer: int, head: int) -> HeadReport:
    for entry in layers:
        if entry.layer == layer:
            for record in entry.heads:
                if record.head == head:
                    return record
            raise BadInput(
                f"head {head} of layer {layer} is not in this report",
                f"heads here: {', '.join(str(h.head) for h in entry.heads)}",
            )
    raise BadInput(f"layer {layer} is not in this report")


def run_header(report, command: str) -> dict:
    document = {
        "schema_version": SCHEMA_VERSION,
        "command": command,
        "text": report.text,
        "model": asdict(report.model),
        "device": report.device,
        "dtype": report.dtype,
        "tokens": [token.to_json() for token in report.tokens],
    }
    if report.truncated_from is not None:
        document["truncated_from"] = report.truncated_from
    return document


# --words, said in the document: how the token matrices became word matrices (analyses/words.py)
WORD_MERGE = {
    "to_word": "sum over the word's pieces (key columns)",
    "from_word": "mean over the word's pieces (query rows): rows still sum to 1",
    "mask": 'a word may attend a word when any of its pieces may attend any of the other\'s ("allowed")',
    "scores": "left out: softmax inputs of pieces do not add up to a word's score",
    "token_level": ["symmetry", "score_stats"],
}


def words_json(words: list[Word], tokens: list[Token]) -> list[dict]:
    """Which pieces made which word: its token positions and their texts."""
    return [
        {
            "index": word.index,
            "text": word.text,
            "special": word.special,
            "pieces": list(word.pieces),
            "piece_texts": [tokens[piece].text for piece in word.pieces],
        }
        for word in words
    ]


def rounded(record: dict) -> dict:
    """Round the floats of a flat-or-nested dict of numbers (Change → {"baseline", "variant"})."""
    return {
        key: rounded(value) if isinstance(value, dict) else num_json(value) if isinstance(value, float) else value
        for key, value in record.items()
    }


def head_matrices(head: HeadReport) -> list[tuple[str, np.ndarray]]:
    """The head's matrix-valued JSON fields, in document order: scores, weights, a measure's (norms), then q, k,
    v, output."""
    named = [
        ("scores", head.scores),
        ("weights", head.weights),
        *((measure.field, matrix) for measure, matrix in head.measured.items()),
        *head.tensors.items(),
    ]
    return [(name, rows) for name, rows in named if rows is not None]


def head_json(head: HeadReport, matrices: bool = True) -> dict:
    """One head's JSON record; matrices=False leaves the matrix fields to layer_text's faster path."""
    record: dict[str, object] = {"head": head.head, "kv_head": head.kv_head, "scale": num_json(head.scale)}
    if head.window.is_partial:
        record["window"] = {"rows": list(head.window.rows), "cols": list(head.window.cols)}
    symmetry: dict[str, object] = {
        "max_abs_diff": num_json(head.symmetry.max_abs_diff),
        "relative": num_json(head.symmetry.relative),
        "symmetric": head.symmetry.symmetric,
    }
    if head.symmetry.reason is not None:  # a cross-attention head: why there is none (the numbers are null)
        symmetry["not_applicable"] = head.symmetry.reason
    record["symmetry"] = symmetry
    if head.score_stats is not None:
        record["score_stats"] = {
            key: num_json(value) if isinstance(value, float) else value
            for key, value in asdict(head.score_stats).items()
        }
    record["entropy"] = vector_json(head.entropy)
    record["self_weight"] = vector_json(head.self_weight)
    if head.sink is not None:  # the ⟨sink⟩ column: each row of weights sums to 1 − sink[row]
        record["sink"] = vector_json(head.sink)
        record["sink_mass"] = num_json(float(np.mean(head.sink)))
    record["top"] = top_json(head.top)
    if head.allowed is not None:
        record["allowed"] = np.asarray(head.allowed, dtype=bool).tolist()
    if head.without_qkv is not None:  # weights-only: what needs Q, K and V is null, and why
        record.update(dict.fromkeys(("scores", "q", "k", "v"), None), without_qkv=head.without_qkv)
    if matrices:
        record.update((name, matrix_json(rows)) for name, rows in head_matrices(head))
    return record


def layer_json(layer: LayerReport) -> dict:
    return {"layer": layer.layer, **_stack_json(layer), "heads": [head_json(head) for head in layer.heads]}


def _stack_json(layer: LayerReport) -> dict:
    return {} if layer.stack is None else {"stack": layer.stack}


def layer_text(layer: LayerReport) -> str:
    """layer_json as JSON text; matrices are formatted straight to text (the slow part of big documents)."""
    heads = []
    for head in layer.heads:
        text = dumps(head_json(head, matrices=False))[:-1]  # the record, left open
        for name, rows in head_matrices(head):
            text += f', "{name}": ' + matrix_text(rows)
        heads.append(text + "}")
    stack = dumps(_stack_json(layer))[1:-1]  # '"stack": "cross"', or nothing
    return f'{{"layer": {layer.layer}, {stack + ", " if stack else ""}"heads": [{", ".join(heads)}]}}'
