"""`attn attribute`: where each output token's information comes from, through whole layers.

Raw attention (and its rollout) sees only the weights. These methods measure each layer's token-to-token
contributions with the residual path, the value vectors and the LayerNorms in, then multiply the layers'
matrices first to last to reach the input tokens (math/attribution.py has the formulas):

    alti           Ferrando et al. 2022, distance-based (L1), clipped at 0, rows normalised
    globenc        Modarressi et al. 2022, norms through both LayerNorms (N_Enc)
    value-zeroing  Mohebbi et al. 2023, cosine distance after zeroing token j's values (T layer runs per layer)

one that splits a next-token logit instead of a representation (its own report, analyses/alti_logit.py):

    alti-logit     Ferrando et al. 2023, each input token's and each head's part of one logit (pre-norm decoders)

and two that read the attention weights only: gradient (Chefer et al. 2021: the weights times their
gradient for a target) and flow (Abnar & Zuidema 2020: max-flow through the layers), below.

Each method is `fn(backend, text, layers, **options) -> (per_layer (L, T, T) | None, matrix (T, T))` in
METHODS; a method without a per-layer form returns None for it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np

from attn_cli.analyses.inspect_report import TopKey
from attn_cli.backends.capabilities import (
    AttentionGradients,
    DecoderBlocks,
    EncoderBlocks,
    Tokenizes,
    require,
    supports,
)
from attn_cli.data.capture import ModelInfo
from attn_cli.data.document import SCHEMA_VERSION, Document, counted, matrix_json, num_json
from attn_cli.plumbing.errors import BadInput

# The max-flows alone for 6 layers (MiniLM), on the shared 2-core machine: 16 tokens 1.5 s, 32 tokens 9 s,
# 64 tokens 40 s.
FLOW_MAX_TOKENS = 32
VERSUS = ("attention",)  # what --vs can put beside the method: attention rollout over the same layers


@dataclass
class AttributionReport(Document):
    text: str
    model: ModelInfo
    device: str
    dtype: str
    tokens: list
    method: str  # a name in METHODS
    layers: list[int]  # rolled out, first to last
    per_layer: np.ndarray | None  # (L, T, T) row i: token i's output of layer l over that layer's input tokens
    matrix: np.ndarray  # (T, T) row i: output token i over the input tokens, all selected layers rolled out
    top: list[list[TopKey]]  # (T, ≤k) the input tokens each output token comes from most
    attention: np.ndarray | None = None  # (T, T) raw attention rolled out over the same layers (--vs attention)
    truncated_from: int | None = None
    target: dict | None = None  # gradient: what was differentiated (kind, which output, its value)

    def summary_shape(self) -> str:
        return f"{self.method}, {counted(len(self.tokens), 'token')}, {counted(len(self.layers), 'layer')}"

    def to_json_dict(self) -> dict:
        document = {
            "schema_version": SCHEMA_VERSION,
            "command": "attribute",
            "text": self.text,
            "model": asdict(self.model),
            "device": self.device,
            "dtype": self.dtype,
            "tokens": [token.to_json() for token in self.tokens],
            "method": self.method,
            "layers": self.layers,
            "per_layer": None if self.per_layer is None else [matrix_json(layer) for layer in self.per_layer],
            "attribution": matrix_json(self.matrix),
            "top": [
                [{"index": t.index, "token": t.token, "weight": num_json(t.weight)} for t in row] for row in self.top
            ],
        }
        if self.target is not None:
            document["target"] = self.target
        if self.attention is not None:
            document["attention_rollout"] = matrix_json(self.attention)
        if self.truncated_from is not None:
            document["truncated_from"] = self.truncated_from
        return document

    def to_arrow(self):
        """One row per (query, key): text, query, query_token, key, key_token, attribution (and
        attention_rollout with --vs attention)."""
        from attn_cli.data.tables import cells

        whole = (0, len(self.tokens))
        columns = {"attribution": self.matrix}
        if self.attention is not None:
            columns["attention_rollout"] = self.attention
        return cells([token.text for token in self.tokens], [({"text": self.text}, whole, whole, columns)])


def _blocks(backend, text: str, layers: list[int], truncate: bool = False):
    return require(backend, EncoderBlocks, "attn attribute").encoder_blocks(text, layers, truncate)


def alti(backend, text: str, layers: list[int], truncate: bool = False, **_):
    """On a causal model with a residual stream attn can split (a pre-norm decoder): each layer's attention
    and residual split over the source tokens (math/routes.alti_decoder_layer); else the post-LN encoder form."""
    from attn_cli.math.attribution import alti_layer

    if backend.info.causal and supports(backend, DecoderBlocks):
        from attn_cli.math.routes import alti_decoder_layer

        blocks = backend.decoder_blocks(text, truncate)
        return _rolled([alti_decoder_layer(blocks[layer]) for layer in layers])
    return _rolled([alti_layer(block) for block in _blocks(backend, text, layers, truncate)])


def globenc(backend, text: str, layers: list[int], truncate: bool = False, **_):
    """Each layer's N_Enc is shown row-normalised; the rollout multiplies the raw norms, as the reference
    does, and then normalises each row of the product (which keeps each row's ratios: its numbers up to scale)."""
    from attn_cli.math.attribution import globenc_layer, normalised, rolled_out

    norms = [globenc_layer(block) for block in _blocks(backend, text, layers, truncate)]
    per_layer = np.stack([normalised(layer).numpy() for layer in norms])
    return per_layer, normalised(rolled_out([layer.double() for layer in norms])).float().numpy()


def value_zeroing(backend, text: str, layers: list[int], truncate: bool = False, **_):
    """Costs T + 1 extra runs of each selected layer (batched as one call of T + 1 copies)."""
    from attn_cli.math.attribution import value_zeroing_layer

    per_layer = []
    for block in _blocks(backend, text, layers, truncate):
        runs = backend.rerun_zeroing_values(block.layer, block.inputs)  # (T + 1, T, d): the last one untouched
        per_layer.append(value_zeroing_layer(runs[-1], runs[:-1]))
    return _rolled(per_layer)


def _rolled(per_layer: list) -> tuple[np.ndarray, np.ndarray]:
    from attn_cli.math.attribution import rolled_out

    return np.stack([layer.numpy() for layer in per_layer]), rolled_out(per_layer).numpy()


def gradient(backend, text: str, layers: list[int], truncate: bool = False, target=None, **_):
    """--method gradient: gradient-weighted attention (Chefer et al. 2021, "Generic
    Attention-model Explainability for Interpreting Bi-Modal and Encoder-Decoder Transformers"), their rule
    for self-attention:

        Ā_l = E_h[(∇A_l ⊙ A_l)⁺]      the heads' mean of the positive part, ∇A_l = ∂target/∂A_l
        R = I;  R ← R + Ā_l·R          for each selected layer, first to last

    Row i of R is how relevant each input token is, through output token i, to the target (a class
    logit, the next-token logit, or the sentence embedding: backends/gradients.py says which). R's rows
    do not sum to 1; the identity is the residual path. Defined wherever the model's attention hands back
    its softmax weights (eager attention): post-LN encoders and pre-LN decoders alike, since the rule
    reads only A and ∇A.

    -> (per_layer Ā (L, T, T), matrix R (T, T), the target differentiated (a JSON-ready dict))."""
    from attn_cli.math.relevance import gradient_weighted, relevancy

    run = require(
        backend,
        AttentionGradients,
        "attn attribute --method gradient",
        hint="--method gradient needs a Hugging Face model, such as the default minilm",
    ).attention_gradients(text, layers, target, truncate=truncate)
    per_layer = [gradient_weighted(run.weights[layer], run.grads[layer]) for layer in layers]  # each (T, T)
    matrix = relevancy(per_layer)
    return np.stack([layer.float().numpy() for layer in per_layer]), matrix.float().numpy(), run.target


def flow(backend, text: str, layers: list[int], truncate: bool = False, **_):
    """--method flow: attention flow (Abnar & Zuidema 2020, "Quantifying Attention Flow in
    Transformers"). The layers' head-averaged attention, each mixed half and half with the identity for the
    residual path (Â_l = 0.5·A_l + 0.5·I, rows renormalised), is a layered graph whose edge from token i
    of layer l to token j of layer l-1 has capacity Â_l[i, j]; the flow of output token i to input token j
    is the maximum flow between them, and each row is normalised to sum to 1 (as their code does).

    T² max-flows over (L+1)·T nodes: short inputs only (FLOW_MAX_TOKENS).

    -> (None: flow has no per-layer form here, matrix (T, T) rows summing to 1)."""
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


def alti_logit(backend, text: str, layers: list[int], truncate: bool = False, target=None, **_):
    """--method alti-logit: one next-token logit split over the input tokens and the heads (Ferrando et al.
    2023), not a token × token matrix: attribute() hands back analyses/alti_logit.py's LogitAttributionReport."""
    from attn_cli.analyses.alti_logit import alti_logit as run

    return run(backend, text, target, truncate)


# A method may return a third item: what it measured relative to (gradient: the target, a JSON-ready dict).
METHODS: dict[str, Callable] = {
    "alti": alti,
    "globenc": globenc,
    "value-zeroing": value_zeroing,
    "gradient": gradient,
    "flow": flow,
    "alti-logit": alti_logit,
}


def refuse_unused(method: str, options: dict) -> None:
    """An option the method does not read (every method takes **_, so it would be dropped without a word, as
    --explain was under alti) is a usage error, like --dpi without a PNG."""
    import inspect

    taken = {
        name
        for name, parameter in inspect.signature(METHODS[method]).parameters.items()
        if parameter.kind is parameter.KEYWORD_ONLY or parameter.default is not parameter.empty
    }
    unused = [name for name in options if name not in taken]
    if unused:
        readers = [name for name, function in METHODS.items() if unused[0] in inspect.signature(function).parameters]
        option = OPTION_NAMES.get(unused[0], f"--{unused[0]}")
        raise BadInput(
            f"{option} is for --method {' or '.join(readers)}; {method} does not read it",
            f"drop {option}, or add --method {readers[0]}",
        )


ENCODER_ONLY = ("globenc", "value-zeroing")  # post-LayerNorm encoders only (backends/encoder_blocks)
WHOLE_MODEL = ("alti-logit",)


def matrix_methods(causal: bool) -> list[str]:
    """The token × token methods, in METHODS' order, that a model may run: not alti-logit (a token's logit, no
    matrix), and on a decoder (causal) not GlobEnc or value zeroing, which read a post-LayerNorm encoder."""
    skipped = WHOLE_MODEL + (ENCODER_ONLY if causal else ())
    return [
        method for method in METHODS if method not in skipped
    ]  # methods whose report is their own (a logit's parts), over every layer


def span(layers: list[int]) -> str:
    return f"layers {layers[0]}-{layers[-1]}" if len(layers) > 1 else f"layer {layers[0]}"


OPTION_NAMES = {"target": "--explain"}  # a method's keyword as the command line (and the API's explain=) spell it


def attribute(
    backend,
    text: str,
    method: str = "alti",
    layers="all",
    top_k: int = 3,
    truncate: bool = False,
    vs: str | None = None,
    **options,
):
    """The method's per-layer contributions over the selected consecutive layers, rolled out: an
    AttributionReport; for alti-logit, analyses/alti_logit.py's LogitAttributionReport."""
    import torch

    from attn_cli.analyses.rollout import consecutive_layers, roll_out
    from attn_cli.math.measures import top_keys

    if method not in METHODS:
        raise BadInput(f"--method {method!r}", f"use {', '.join(METHODS)}")
    if vs is not None and vs not in VERSUS:
        raise BadInput(f"--vs {vs!r}", f"use {', '.join(VERSUS)}")
    if method == "alti-logit":  # a model that cannot serve it is refused before its options are checked
        from attn_cli.analyses.alti_logit import served

        served(backend)
    refuse_unused(method, options)
    chosen = consecutive_layers(backend.info, layers, "attribute")
    if method in WHOLE_MODEL:
        if len(chosen) != backend.info.layers:
            raise BadInput(
                f"--method {method} splits the logit through every layer; --layer {layers} selects only "
                f"{span(chosen)} of layers 0-{backend.info.layers - 1}",
                "drop --layer",
            )
        if vs is not None:
            raise BadInput(f"--vs {vs} is for the token × token methods; {method} has no matrix", "drop --vs")
        return METHODS[method](backend, text, chosen, truncate=truncate, **options)
    per_layer, matrix, *measured = METHODS[method](backend, text, chosen, truncate=truncate, **options)
    tokens, truncated_from = backend.tokens(text, truncate)
    attention = roll_out(backend, text, chosen, truncate=truncate).matrix if vs == "attention" else None
    texts = [token.text for token in tokens]
    scores = torch.from_numpy(np.ascontiguousarray(matrix))
    top = [
        [TopKey(index, texts[index], weight) for index, weight in row]
        for row in top_keys(scores, torch.ones_like(scores, dtype=torch.bool), top_k)
    ]
    return AttributionReport(
        text,
        backend.info,
        backend.device,
        backend.dtype,
        tokens,
        method,
        chosen,
        per_layer,
        matrix,
        top,
        attention,
        truncated_from,
        measured[0] if measured else None,
    )
