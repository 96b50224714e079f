"""`attn generate SOURCE` on an encoder–decoder model: each generated token's decoder self-attention row (over
the decoder's tokens so far) and cross-attention row (over the source), recorded while model.generate() runs.

Row i is the step that produced generated token i: the decoder's input i (its start token for the first) as
the query. A teacher-forced forward over the start token and the generated ids gives the same rows (tested).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from attn_cli.analyses.generate import GeneratedHead, GeneratedLayer, GenerateReport
from attn_cli.analyses.inspect_report import TopKey, matrix_json, num_json
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
        targets = [{**asdict(token), "generated": token.index >= decoder.prompt_tokens} for token in decoder.tokens]
        generated = targets[decoder.prompt_tokens - 1 : -1]  # the queries: each step's input token

        def layer(entry: GeneratedLayer, stack: str, keys: list) -> dict:
            return {
                "layer": entry.layer,
                "stack": stack,
                "queries": generated,
                "keys": keys,
                "heads": [
                    {
                        "head": head.head,
                        "kv_head": head.kv_head,
                        "weights": matrix_json(head.weights),
                        "top": [
                            [{"index": t.index, "token": t.token, "weight": num_json(t.weight)} for t in row]
                            for row in head.top
                        ],
                    }
                    for head in entry.heads
                ],
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
            "tokens": [asdict(token) for token in self.tokens],
            "target_tokens": targets,
            "rows": "row i: the step that produced generated token i (its query: the decoder's input token i)",
            "layers": [layer(entry, "decoder", targets) for entry in decoder.layers]
            + [layer(entry, "cross", [asdict(token) for token in self.tokens]) for entry in self.cross],
        }


def generate_pair(
    backend,
    source: str,
    selection: Selection,
    *,
    max_new_tokens: int,
    sample: bool,
    temperature: float,
    seed: int | None,
    top_k: int,
) -> PairGenerateReport:
    import torch

    from attn_cli.math import attention
    from attn_cli.math.measures import top_keys

    info = backend.stack_info("decoder")
    layers, heads = selection.resolve(info)
    rows: dict[tuple[str, int], list] = {(stack, layer): [] for stack in ("decoder", "cross") for layer in layers}

    def keep_row(stack: str, record) -> None:
        """The step's one query over every key it was handed: (h, K), T5's position bias added."""
        q = record.q[0, heads, -1:].float()  # (h, 1, D)
        k = record.k[0, [info.kv_head_of(head) for head in heads]].float()  # (h, K, D)
        scores = record.scorer_for(heads)(q, k)  # (h, 1, K)
        if record.bias is not None:
            scores = scores + record.bias[0 if record.bias.shape[0] == 1 else 0, heads, -1:].float()
        last = record.q.shape[-2] - 1
        allowed = record.mask.rows(last, last + 1)  # (1, K)
        weights = attention.masked_softmax(scores, allowed).masked_fill(~allowed, float("nan"))
        rows[(stack, record.layer)].append(weights[:, 0].cpu())

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
        matrix = torch.full((len(heads), count, len(keys)), float("nan"))  # (h, N, K)
        for i, row in enumerate(rows[(stack, layer)][:count]):
            matrix[:, i, : row.shape[-1]] = row
        allowed = ~matrix.isnan()
        top = top_keys(matrix.nan_to_num(0.0), allowed, top_k)
        names = [token.text for token in keys]
        return GeneratedLayer(
            layer,
            [
                GeneratedHead(
                    head,
                    info.kv_head_of(head),
                    matrix[i].numpy(),
                    [[TopKey(j, names[j], w) for j, w in row] for row in top[i]],
                )
                for i, head in enumerate(heads)
            ],
        )

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
