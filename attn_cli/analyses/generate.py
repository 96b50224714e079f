"""`attn generate`: the attention of generated tokens, recorded while model.generate() runs.

The capture hook sees every step of generation: the first with the whole prompt, each later one
with one new query over the KV cache. Row i of a head is the step that produced generated token
i: the attention of the token before it (the prompt's last token for the first) over every token
it could see. One forward pass over prompt + generated ids gives the same rows (tested).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from attn_cli.analyses.inspect import check_texts
from attn_cli.analyses.inspect_report import TopKey, find_head
from attn_cli.backends.capabilities import CapturesGeneration, supports
from attn_cli.data.arguments import whole
from attn_cli.data.capture import ModelInfo, Token
from attn_cli.data.document import SCHEMA_VERSION, Document, counted, matrix_json, num_json
from attn_cli.data.selection import Selection
from attn_cli.plumbing.errors import BadInput, UnsupportedModel


@dataclass
class GeneratedHead:
    head: int
    kv_head: int
    weights: np.ndarray  # (N, T) row i: the step that produced generated token i; NaN where it could not look
    top: list[list[TopKey]]  # (N, ≤k) its most-attended tokens

    @property
    def entropy(self) -> np.ndarray:
        """(N,) each row's entropy in nats over the keys the step could see (its NaN cells left out)."""
        kept = np.nan_to_num(self.weights, nan=0.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            terms = np.where(kept > 0, -kept * np.log(kept), 0.0)
        return terms.sum(-1)

    def to_json_dict(self) -> dict:
        """The head as generate's JSON holds it, for a decoder's and an encoder–decoder's generation alike."""
        return {
            "head": self.head,
            "kv_head": self.kv_head,
            "weights": matrix_json(self.weights),
            "top": [
                [{"index": t.index, "token": t.token, "weight": num_json(t.weight)} for t in row] for row in self.top
            ],
        }


@dataclass
class GeneratedLayer:
    layer: int
    heads: list[GeneratedHead]


@dataclass
class GenerateReport(Document):
    prompt: str
    text: str  # the generated text
    model: ModelInfo
    device: str
    dtype: str
    tokens: list[Token]  # prompt, then generated
    prompt_tokens: int  # P: tokens[P:] were generated
    layers: list[GeneratedLayer]
    stop: str  # "eos" or "max_new_tokens"
    sample: bool
    truncated_from: None = None  # a prompt is never cut (the header every view shares reads it)

    def summary_shape(self) -> str:
        return f"{counted(self.prompt_tokens, 'prompt token')} + {len(self.tokens) - self.prompt_tokens} generated"

    def head(self, layer: int, head: int) -> GeneratedHead:
        # find_head reads only .layer, .heads and .head, which these have; its annotation names inspect's types
        return find_head(self.layers, layer, head)  # type: ignore[arg-type, return-value]

    def to_json_dict(self) -> dict:
        return {
            "schema_version": SCHEMA_VERSION,
            "command": "generate",
            "prompt": self.prompt,
            "text": self.text,
            "model": asdict(self.model),
            "device": self.device,
            "dtype": self.dtype,
            "sample": self.sample,
            "stop": self.stop,
            "tokens": [{**token.to_json(), "generated": token.index >= self.prompt_tokens} for token in self.tokens],
            "layers": [
                {
                    "layer": layer.layer,
                    "heads": [head.to_json_dict() for head in layer.heads],
                }
                for layer in self.layers
            ],
        }

    def to_arrow(self):
        """One row per (layer, head, generated token, key): layer, head, generated (its position in tokens),
        generated_token, key, key_token, weight (null where that step could not look at the key)."""
        from attn_cli.data.tables import cells

        rows, keys = (self.prompt_tokens, len(self.tokens)), (0, len(self.tokens))
        return cells(
            [token.text for token in self.tokens],
            (
                ({"layer": layer.layer, "head": head.head}, rows, keys, {"weight": head.weights})
                for layer in self.layers
                for head in layer.heads
            ),
            row="generated",
        )


def generate_from(
    backend,
    prompt: str,
    selection: Selection,
    *,
    max_new_tokens: int = 20,
    sample: bool = False,
    temperature: float = 1.0,
    seed: int | None = None,
    top_k: int = 3,
    on_token=None,
) -> GenerateReport:
    """Generate from `prompt`, recording each new token's attention row in the selected heads. A decoder-only
    model's; an encoder–decoder model's is seq2seq_generate.generate_pair."""
    import torch

    check_texts([prompt])
    info = backend.info
    if not supports(backend, CapturesGeneration) or not info.causal:  # exit 1, as require's refusals
        raise UnsupportedModel(
            f"{info.name} is not a causal language model, so it does not generate",
            'try the decoder that ships with attn, --model lab (load("lab")), or a decoder (GPT-2, Llama, Qwen, '
            "Mistral …) saved with its language-model head",
        )
    check_options(max_new_tokens, sample, temperature, seed)
    layers, heads = selection.resolve(info)
    # each query head's kv head, by the layer's own grouping (its q and k as captured): a layer may have more kv
    # heads than the model info says (MiMo-V2-Flash's sliding layers have twice its full layers')
    groups: dict[int, int] = {}
    # per layer, per step: (the absolute position of the step's first key, its row (h, K))
    rows: dict[int, list[tuple[int, torch.Tensor]]] = {layer: [] for layer in layers}
    seen = dict.fromkeys(layers, 0)  # tokens each layer has run so far: the prompt, then one per step

    def keep_last_row(record) -> None:
        """The step's row. The cache hands the K keys that end at its query: all of them for a full layer
        (K = position + 1), but for a sliding layer (transformers' DynamicSlidingWindowLayer) only the W − 1 it
        keeps plus the new one, so key j sits at absolute position end − K + j, not j."""
        seen[record.layer] += record.q.shape[-2]
        groups[record.layer] = record.q.shape[1] // record.k.shape[1]
        row = step_row(record, heads)  # (h, K)
        rows[record.layer].append((seen[record.layer] - row.shape[-1], row))

    prompt_tokens, generated, stop = backend.capture_generation(
        prompt,
        layers,
        keep_last_row,
        max_new_tokens=max_new_tokens,
        sample=sample,
        temperature=temperature,
        seed=seed,
        on_token=on_token,
    )
    tokenizer = backend.tokenizer
    count = len(prompt_tokens)
    names = tokenizer.convert_ids_to_tokens(generated)
    special = set(tokenizer.all_special_ids)
    tokens = prompt_tokens + [
        Token(count + i, name, token_id, token_id in special)
        for i, (name, token_id) in enumerate(zip(names, generated))
    ]
    texts = [token.text for token in tokens]
    report_layers = [
        generated_layer(
            layer, heads, kv_heads_of(info, heads, groups.get(layer)), rows[layer], len(generated), texts, top_k
        )
        for layer in layers
    ]
    return GenerateReport(
        prompt,
        tokenizer.decode(generated),
        info,
        backend.device,
        backend.dtype,
        tokens,
        count,
        report_layers,
        stop,
        sample,
    )


def kv_heads_of(info, heads: list[int], group: int | None) -> list[int]:
    """Each query head's kv head under the layer's own grouping (query heads per kv head); the model info's
    where the layer was not seen."""
    return [info.kv_head_of(head, group) for head in heads]


def check_options(max_new_tokens: int, sample: bool, temperature: float, seed: int | None) -> None:
    """generate()'s settings, refused in one line before the model runs."""
    whole(max_new_tokens, "--max-new-tokens", minimum=1)
    if seed is not None:
        whole(seed, "--seed", minimum=-(2**63), maximum=2**64 - 1)  # what torch.manual_seed takes
    if sample and not temperature > 0:
        raise BadInput(f"--temperature must be above 0, not {temperature}")


def step_row(record, heads: list[int]):
    """The row of one generation step's capture: its last query (the one whose output picks the next token)
    over every key it was handed, (h, K) for the query heads `heads` (each reading its kv head), NaN where it could
    not look (a key the mask hides, such as one outside a window in the prompt's step, is like one the cache
    dropped). An additive score bias (T5's position bias, Doge's per-head bias) is added as the model adds it, and a
    per-head mask (Doge's) gives each head its own keys."""
    from attn_cli.math import attention

    group = record.q.shape[1] // record.k.shape[1]  # this layer's own grouping: it may differ by layer
    q = record.q[0, heads, -1:].float()  # (h, 1, D)
    k = record.k[0, [head // group for head in heads]].float()  # (h, K, D)
    scores = record.scorer_for(heads)(q, k)  # (h, 1, K)
    if record.bias is not None:  # (1, H, T_q, K): generation runs one sequence
        scores = scores + record.bias[0, heads, -1:].float()
    last = record.q.shape[-2] - 1
    allowed = record.mask.rows(last, last + 1)  # (1, K)
    if record.head_mask is not None:  # a per-head mask (Doge's): each head's own keys, its bias added above
        allowed = allowed & record.head_mask[0, heads, -1:]  # (h, 1, K)
    if record.sink is None:
        weights = attention.masked_softmax(scores, allowed)  # (h, 1, K)
    else:  # a learned sink logit per head (gpt-oss): one more column of the softmax; the keys' share is shown
        weights = attention.sink_softmax(scores, allowed, record.sink.to(scores.device)[heads])[0]
    return weights.masked_fill(~allowed, float("nan"))[:, 0].cpu()


def generated_layer(
    layer: int, heads: list[int], kv_heads: list[int], steps: list, count: int, keys: list[str], top_k: int
) -> GeneratedLayer:
    """One layer's rows as a report: steps[i] = (the position of its first key, its (h, K) row) for the step
    that produced generated token i; `count` generated tokens; `keys` the texts of the tokens they could see."""
    import torch

    from attn_cli.math.measures import top_keys

    matrix = torch.full((len(heads), min(count, len(steps)), len(keys)), float("nan"))  # (h, N, T)
    for i, (start, row) in enumerate(steps[:count]):
        matrix[:, i, start : start + row.shape[-1]] = row
    allowed = ~matrix.isnan()
    top = top_keys(matrix.nan_to_num(0.0), allowed, top_k)  # (h, N, ≤k)
    return GeneratedLayer(
        layer,
        [
            GeneratedHead(head, kv, matrix[i].numpy(), [[TopKey(j, keys[j], w) for j, w in row] for row in top[i]])
            for i, (head, kv) in enumerate(zip(heads, kv_heads))
        ],
    )
