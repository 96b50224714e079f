"""`attn attribute --method alti-logit --explain TOKEN`: one next-token logit of a pre-norm decoder split over the
input tokens and over the heads (Ferrando et al. 2023; math/alti_logit.py has the formulas).

The logit explained is TOKEN's at the last position (the prediction of the token after the text, as
--method gradient's). One forward of the language model gives every layer's residual stream; the final norm's
scale is frozen at the last residual, so the logit is exactly the sum of its parts: each head moving each source
token, the embedding at the explained position, each FFN, each attention output bias, the final norm's bias and
the LM head's. ALTI-Logit carries each layer's attention parts down to the input tokens through the ALTI rollout
of the layers below.

Two checks guard the linear reading of the model (refused in one line where they fail): the final norm rebuilt
from its γ, β and ε returns what the model's own norm returned, and the parts sum to the logit the model computed
(a logit scale or soft-cap would not).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from attn_cli.backends.capabilities import LogitBlocks, require
from attn_cli.data.capture import ModelInfo
from attn_cli.data.document import SCHEMA_VERSION, Document, counted, matrix_json, num_json, vector_json
from attn_cli.plumbing.errors import BadInput, UnsupportedModel

METHOD = "alti-logit"
HOW = (
    "use a pre-norm decoder with its LM head (GPT-2, Llama, Qwen, Mistral, --model lab); for an encoder, --method alti"
)


@dataclass
class LogitAttributionReport(Document):
    text: str
    model: ModelInfo
    device: str
    dtype: str
    tokens: list
    method: str  # "alti-logit"
    position: int  # the logit explained is the prediction made at this token (the last)
    target: dict  # kind "next-token-logit", token, token_id, logit (as the model computed it), position
    contributions: np.ndarray  # (T,) each input token's ALTI-Logit
    per_layer: np.ndarray  # (L, T) layer l's attention carried down to the input tokens
    sources: np.ndarray  # (L, T) layer l's attention by the position it read (not carried down)
    heads: np.ndarray  # (L, H) each head's part of the logit (its sources summed, not carried down)
    terms: dict  # the rest of the logit: embedding, mlp (L,), attention_bias (L,), final_norm_bias, unembedding_bias
    truncated_from: int | None = None

    @property
    def total(self) -> float:
        """The tokens' ALTI-Logit and every other term summed: the logit (exact before any normalisation)."""
        return float(
            self.contributions.sum()
            + self.terms["embedding"]
            + np.sum(self.terms["mlp"])
            + np.sum(self.terms["attention_bias"])
            + self.terms["final_norm_bias"]
            + self.terms["unembedding_bias"]
        )

    def strongest_heads(self, count: int) -> list[tuple[int, int, float]]:
        """(layer, head, part of the logit) of the `count` heads whose part is largest in size, largest first."""
        flat = [(layer, head, float(value)) for (layer, head), value in np.ndenumerate(self.heads)]
        return sorted(flat, key=lambda item: -abs(item[2]))[:count]

    def summary_shape(self) -> str:
        return f"{self.method} of {self.target['token']!r}, {counted(len(self.tokens), 'token')}"

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
            "position": self.position,
            "target": self.target,
            "contributions": vector_json(self.contributions),
            "per_layer": matrix_json(self.per_layer),
            "sources": matrix_json(self.sources),
            "heads": matrix_json(self.heads),
            "terms": {
                "tokens": num_json(float(self.contributions.sum())),
                "embedding": num_json(self.terms["embedding"]),
                "mlp": vector_json(self.terms["mlp"]),
                "attention_bias": vector_json(self.terms["attention_bias"]),
                "final_norm_bias": num_json(self.terms["final_norm_bias"]),
                "unembedding_bias": num_json(self.terms["unembedding_bias"]),
            },
            "total": num_json(self.total),
        }
        if self.truncated_from is not None:
            document["truncated_from"] = self.truncated_from
        return document

    def to_arrow(self):
        """One row per input token: text, position, token, alti_logit, and layer_L (each layer's share of it)."""
        import pyarrow as pa

        columns = {
            "text": [self.text] * len(self.tokens),
            "position": list(range(len(self.tokens))),
            "token": [token.text for token in self.tokens],
            "alti_logit": self.contributions.tolist(),
        }
        for layer, row in enumerate(self.per_layer):
            columns[f"layer_{layer}"] = row.tolist()
        return pa.table(columns)


def served(backend) -> LogitBlocks:
    """The backend, typed as having LogitBlocks, or the refusal every command gives a model that cannot serve it
    (capabilities.require's UnsupportedModel, exit 1, `attn attribute --method alti-logit: NAME …; HOW`). Asked
    before any option is checked: an encoder is told it predicts no next token, not first to add --explain."""
    if not backend.info.causal:  # an encoder's backend has the methods (LogitBlocks) but no next token to explain
        raise UnsupportedModel(
            f"attn attribute --method alti-logit: {backend.info.name} is not a decoder (it predicts no next token)",
            HOW,
        )
    return require(backend, LogitBlocks, "attn attribute --method alti-logit", hint=HOW)


def alti_logit(backend, text: str, target=None, truncate: bool = False) -> LogitAttributionReport:
    """ALTI-Logit of `target`'s logit at the last position (the module docstring says how)."""
    from attn_cli.math.alti_logit import decompose_logit, normed

    source = served(backend)
    if target is None:
        raise BadInput(
            "--method alti-logit needs --explain TOKEN: the next token whose logit is split over the input",
            "add --explain and a token, such as the one attn generate predicts after the text",
        )
    blocks, readout = source.logit_blocks(text, target, truncate)
    tokens, truncated_from = backend.tokens(text, truncate)
    position = len(tokens) - 1
    whole = blocks[-1].resid_post[position]
    logit = float(readout.logits[position])
    loose = 1e-3 if backend.dtype == "float32" else 5e-2  # half precision: its residual parts add up to ~1e-2
    rebuilt = normed(readout.norm, whole)
    if float((rebuilt - readout.normalised[position]).abs().max()) > loose * (1 + float(rebuilt.abs().max())):
        raise UnsupportedModel(
            f"{backend.info.name}'s final norm does not compute (z − mean)·γ/s + β or z·γ/rms as attn rebuilds it",
            HOW,
        )
    parts = decompose_logit(blocks, readout.norm, readout.unembedding, readout.unembedding_bias, position)
    if abs(parts.total() - logit) > loose * (1 + abs(logit)):
        raise UnsupportedModel(
            f"{backend.info.name}'s logit is not its LM head applied to the final norm (a logit scale or soft-cap?)",
            HOW,
        )
    return LogitAttributionReport(
        text,
        backend.info,
        backend.device,
        backend.dtype,
        tokens,
        METHOD,
        position,
        {
            "kind": "next-token-logit",
            "token": readout.token or str(target),
            "token_id": readout.token_id,
            "logit": num_json(logit),
            "position": position,
        },
        parts.contributions.numpy(),
        parts.per_layer.numpy(),
        parts.by_head_source.sum(1).numpy(),
        parts.heads.numpy(),
        {
            "embedding": parts.embedding,
            "mlp": parts.mlp.numpy(),
            "attention_bias": parts.attention_bias.numpy(),
            "final_norm_bias": parts.final_norm_bias,
            "unembedding_bias": parts.unembedding_bias,
        },
        truncated_from,
    )
