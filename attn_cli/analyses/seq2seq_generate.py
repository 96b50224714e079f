"""`attn generate SOURCE` on an encoder–decoder model: each generated token's decoder self-attention row (over
the decoder's tokens so far) and cross-attention row (over the source), recorded while model.generate() runs.

Row i is the step that produced generated token i: the decoder's input i (its start token for the first) as
the query. A teacher-forced forward over the start token and the generated ids gives the same rows (tested).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from attn_cli.analyses.generate import (
    GeneratedLayer,
    GenerateReport,
    check_options,
    generated_layer,
    kv_heads_of,
    step_row,
)
from attn_cli.analyses.inspect import check_texts
from attn_cli.data.capture import Token
from attn_cli.data.document import SCHEMA_VERSION, Document, counted, short
from attn_cli.data.selection import Selection


@dataclass
class PairGenerateReport(Document):
    """decoder: a GenerateReport over the decoder's tokens (its start token is the "prompt"); cross: per layer,
    each head's (N, T_source) rows over the source."""

    prompt: str  # the source
    tokens: list[Token]  # the source's
    decoder: GenerateReport
    cross: list[GeneratedLayer]

    def summary_shape(self) -> str:
        return f"from {short(self.prompt)}, {counted(len(self.decoder.tokens) - self.decoder.prompt_tokens, 'token')} generated"

    @property
    def text(self) -> str:
        return self.decoder.text

    @property
    def model(self):
        return self.decoder.model

    def to_json_dict(self) -> dict:
        decoder = self.decoder
        targets = [{**token.to_json(), "generated": token.index >= decoder.prompt_tokens} for token in decoder.tokens]
        generated = targets[decoder.prompt_tokens - 1 : -1]  # the queries: each step's input token

        def layer(entry: GeneratedLayer, stack: str, keys: list) -> dict:
            return {
                "layer": entry.layer,
                "stack": stack,
                "queries": generated,
                "keys": keys,
                "heads": [head.to_json_dict() for head in entry.heads],
            }

        return {
            "schema_version": SCHEMA_VERSION,
            "command": "generate",
            "prompt": self.prompt,
            "text": self.text,
            "model": asdict(self.model),
            "device": decoder.device,
            "dtype": decoder.dtype,
            "sample": decoder.sample,
            "stop": decoder.stop,
            "tokens": [token.to_json() for token in self.tokens],
            "target_tokens": targets,
            "rows": "row i: the step that produced generated token i (its query: the decoder's input token i)",
            "layers": [layer(entry, "decoder", targets) for entry in decoder.layers]
            + [layer(entry, "cross", [token.to_json() for token in self.tokens]) for entry in self.cross],
        }


def generate_pair(
    backend,
    source: str,
    selection: Selection,
    *,
    max_new_tokens: int = 20,
    sample: bool = False,
    temperature: float = 1.0,
    seed: int | None = None,
    top_k: int = 3,
) -> PairGenerateReport:
    """Generate from `source` on an encoder–decoder model, recording each generated token's decoder and cross
    rows in the selected heads."""
    check_texts([source])
    check_options(max_new_tokens, sample, temperature, seed)
    info = backend.stack_info("decoder")
    layers, heads = selection.resolve(info)
    groups: dict[tuple[str, int], int] = {}  # each (stack, layer)'s own query heads per kv head, as captured
    # per (stack, layer), per step: (0, its row (h, K)): the decoder's cache and the source are whole
    rows: dict[tuple[str, int], list] = {(stack, layer): [] for stack in ("decoder", "cross") for layer in layers}

    def keep_row(stack: str, record) -> None:
        rows[(stack, record.layer)].append((0, step_row(record, heads)))
        groups[(stack, record.layer)] = record.q.shape[1] // record.k.shape[1]

    source_tokens, ids, stop = backend.capture_pair_generation(
        source,
        {"decoder": layers, "cross": layers},
        keep_row,
        max_new_tokens=max_new_tokens,
        sample=sample,
        temperature=temperature,
        seed=seed,
    )
    tokenizer = backend.tokenizer
    special = set(tokenizer.all_special_ids)
    targets = [
        Token(i, name, token_id, token_id in special)
        for i, (name, token_id) in enumerate(zip(tokenizer.convert_ids_to_tokens(ids), ids))
    ]
    count = len(ids) - 1  # generated tokens: one row each

    def layer_of(stack: str, layer: int, keys: list[Token]) -> GeneratedLayer:
        texts = [token.text for token in keys]
        kv_heads = kv_heads_of(info, heads, groups.get((stack, layer)))
        return generated_layer(layer, heads, kv_heads, rows[(stack, layer)], count, texts, top_k)

    decoder = GenerateReport(
        source,
        tokenizer.decode(ids[1:], skip_special_tokens=False),
        info,
        backend.device,
        backend.dtype,
        targets,
        1,
        [layer_of("decoder", layer, targets) for layer in layers],
        stop,
        sample,
    )
    return PairGenerateReport(
        source, source_tokens, decoder, [layer_of("cross", layer, source_tokens) for layer in layers]
    )
