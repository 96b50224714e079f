"""What every backend produces: a Capture of one forward pass (plain data every stage can import).

Shapes (one sequence, T tokens, H query heads, H_kv key/value heads, D head dim):

    q        (H, T, D)     queries as the model multiplies them (after RoPE where the model has it)
    k, v     (H_kv, T, D)  keys and values per kv head, before grouped heads are repeated
    mask     AttentionMask  which key j query i may attend (padding, causal, windows); rows on demand
    inputs   (T, d_model)  the attention layer's input X, when it was captured
    weights  (H, T, T)     weights-only models: the softmax weights the model itself returned, where its
                           attention does not go through transformers' attention interface (q, k, v empty)
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, overload

if TYPE_CHECKING:
    import torch

    from attn_cli.data.image import PatchGrid
    from attn_cli.math.masks import AttentionMask


@dataclass(frozen=True)
class Token:
    index: int
    text: str  # as the tokenizer spells it ("hello", "##ing", "Ġthe")
    id: int
    special: bool  # [CLS], [SEP], <s>, padding …

    def to_json(self) -> dict:
        """{"index", "text", "id", "special"}: dataclasses.asdict's keys, without its deep copy of each value
        (0.3 s of writing a 16k-token document's header)."""
        return {"index": self.index, "text": self.text, "id": self.id, "special": self.special}


@dataclass(frozen=True)
class Word:
    """Tokens that make one word (--words): data/words.py groups them, from the tokenizer or the pieces."""

    index: int
    text: str  # as written in the text (offsets), or the pieces joined without their markers
    special: bool
    pieces: tuple[int, ...]  # the token positions that make it, in order


@dataclass(frozen=True)
class ModelInfo:
    name: str  # what the user asked for ("minilm", a path, org/name)
    architecture: str  # model_type from the config ("bert", "llama", "toy")
    layers: int
    heads: int
    kv_heads: int  # < heads under grouped-query attention
    head_dim: int
    causal: bool
    max_positions: int | None  # the model's own position limit, None if unbounded
    # A hybrid's layers that have no attention matrix (linear attention, a state-space or convolution mixer:
    # Qwen3-Next, Jamba, LFM2, Zamba2 …), by their true index; () when every layer is softmax attention.
    # A list, as JSON gives it back (to_json_dict equals the JSON read back); left out of the hash.
    no_attention_layers: list[int] = field(default_factory=list, hash=False)
    # What the weights shown are not, where the model's attention is more than one softmax per head (diffllama's
    # difference of two softmaxes): one line, said in the terminal and in JSON. None: the weights are the model's.
    attention_note: str | None = field(default=None, hash=False)

    def __post_init__(self):
        object.__setattr__(self, "no_attention_layers", list(self.no_attention_layers))

    @property
    def attention_layers(self) -> list[int]:
        """The layers with an attention matrix, in order."""
        other = set(self.no_attention_layers)
        return [layer for layer in range(self.layers) if layer not in other]

    def kv_head_of(self, head: int, group: int | None = None) -> int:
        """The key/value head a query head reads (query heads are grouped in order): `group` query heads per kv
        head where its layer says so (a layer may have more kv heads than the config's count), else the
        model's."""
        return head // (group or self.heads // self.kv_heads)


@dataclass
class LayerCapture:
    layer: int
    q: torch.Tensor  # (H, T, D); an empty (H, T, 0) under weights-only (see weights)
    k: torch.Tensor  # (H_kv, T, D); (H, T, 0) under weights-only
    v: torch.Tensor  # (H_kv, T, D); (H, T, 0) under weights-only
    mask: AttentionMask  # rows(start, stop) -> (rows, T) bool, True = may attend
    scale: float  # the factor the model multiplies q·k by (1/sqrt(D) unless the model says otherwise)
    inputs: torch.Tensor | None = None  # (T, d_model) the attention layer's input X, when asked for
    # For scorings that are not q·kᵀ·scale (the toy's bilinear, additive):
    # scorer(q_rows (c, D), keys (n, D), head) -> scores (c, n). None: q·kᵀ·scale.
    scorer: Callable | None = None
    # What the layer made of the heads, where the backend computes it itself (the toy):
    concat: torch.Tensor | None = None  # (T, H·D) the heads' outputs side by side
    projected: torch.Tensor | None = None  # (T, d_model) concat·W_Oᵀ + b_O, what the layer adds to X
    # The attention output projection W_O as (d_model, H·D): query head h's slice is columns h·D:(h+1)·D.
    # A reference to the model's own weight (no copy); None where it could not be found.
    w_o: torch.Tensor | None = None
    # An additive score bias the model adds to q·kᵀ·scale before the softmax (T5's relative position bias), as the
    # model hands it: (B or 1, H, T_q, T_k) in a batch record, (H, T_q, T_k) in one sequence's. None: no bias.
    bias: torch.Tensor | None = None
    # A learned sink logit per query head (GPT-OSS, MiMo-V2-Flash's s_aux), (H,): one more logit in every row's
    # softmax, whose share p_sink is taken from the keys (their weights sum to 1 − p_sink). None: no sink.
    sink: torch.Tensor | None = None
    # Which keys each head may attend, where the model masks per head (Doge's dynamic mask: a learned per-key
    # bias, in `bias`, and a per-head top-k): (B or 1, H, T_q, T_k) bool in a batch record, (H, T_q, T_k) in one
    # sequence's; `mask` then holds the keys any head may attend. None: every head obeys `mask`.
    head_mask: torch.Tensor | None = None
    # Weights-only (backends/hf.py): the model's own softmax weights, (B, H, T, T) in a batch record, (H, T, T) in
    # one sequence's, where its attention does not go through the attention interface: q, k and v are then
    # empty, (…, T, 0), and `without_qkv` says why.
    weights: torch.Tensor | None = None
    without_qkv: str | None = None

    def scorer_for(self, heads: Sequence[int]) -> Callable:
        """score(q_rows (h, c, D), keys (h, n, D)) -> (h, c, n) for these query heads, in order:
        q·kᵀ·scale, or the model's own scorer one head at a time."""
        import torch

        from attn_cli.math.scoring import scores

        if self.scorer is None:
            return lambda rows, keys: scores(rows, keys, self.scale)
        return lambda rows, keys: torch.stack(
            [scores(row, key, self.scale, self.scorer, head) for row, key, head in zip(rows, keys, heads)]
        )


def sequence_of(record: LayerCapture, index: int, real: torch.Tensor) -> LayerCapture:
    """Sequence `index` of a batched layer record, padding positions removed. real: (T,) bool."""
    keep = real.nonzero().squeeze(1).to(record.q.device)  # (T_real,)
    whole = len(keep) == record.q.shape[2]  # no padding: the sequence's rows are a view, not a copy
    weights = _rows_of(record.weights, index, keep, 1, whole)  # (H, T_real, T) …
    if weights is not None and not whole:
        weights = weights.index_select(2, keep)  # … and its key columns: (H, T_real, T_real)
    return LayerCapture(
        layer=record.layer,
        q=_rows_of(record.q, index, keep, 1, whole),  # (H, T_real, D)
        k=_rows_of(record.k, index, keep, 1, whole),  # (H_kv, T_real, D)
        v=_rows_of(record.v, index, keep, 1, whole),
        mask=record.mask.for_sequence(index, keep),  # (T_real, T_real) rule or dense
        scale=record.scale,
        inputs=_rows_of(record.inputs, index, keep, 0, whole),  # (T_real, d_model)
        scorer=record.scorer,
        concat=_rows_of(record.concat, index, keep, 0, whole),  # (T_real, H·D)
        projected=_rows_of(record.projected, index, keep, 0, whole),  # (T_real, d_model)
        w_o=record.w_o,
        sink=record.sink,
        bias=_per_head_of(record.bias, index, keep, whole) if record.head_mask is not None else None,
        head_mask=_per_head_of(record.head_mask, index, keep, whole),
        weights=weights,
        without_qkv=record.without_qkv,
    )


def _per_head_of(batched, index: int, keep, whole: bool):
    """Sequence `index` of a per-head (B or 1, H, T_q, T_k) tensor, positions `keep` as queries and keys."""
    if batched is None:
        return None
    one = batched[index if batched.shape[0] > 1 else 0]  # (H, T_q, T_k)
    return one if whole else one.index_select(1, keep).index_select(2, keep)


@overload
def _rows_of(batched: torch.Tensor, index: int, keep: torch.Tensor, dim: int, whole: bool) -> torch.Tensor: ...
@overload
def _rows_of(batched: None, index: int, keep: torch.Tensor, dim: int, whole: bool) -> None: ...
@overload
def _rows_of(
    batched: torch.Tensor | None, index: int, keep: torch.Tensor, dim: int, whole: bool
) -> torch.Tensor | None: ...
def _rows_of(
    batched: torch.Tensor | None, index: int, keep: torch.Tensor, dim: int, whole: bool
) -> torch.Tensor | None:
    """Sequence `index` of a batched tensor ((B, H, T, D) with dim 1, (B, T, width) with dim 0), positions `keep`
    only; whole: `keep` is every position, so the sequence itself (a view)."""
    if batched is None:
        return None
    return batched[index] if whole else batched[index].index_select(dim, keep)


@dataclass
class Capture:
    tokens: list[Token]
    model: ModelInfo
    device: str
    dtype: str  # the model's compute dtype ("float32", "bfloat16", …)
    layers: dict[int, LayerCapture] = field(default_factory=dict)  # only the requested layers
    truncated_from: int | None = None  # token count before --truncate cut it
    padding_side: str | None = None  # "left"/"right" when run in a padded batch of several texts
    # How the tokenizer groups the tokens into words (data/words.py), where it says which tokens make which word
    # (a fast tokenizer's word ids and offsets); None: --words guesses them from the pieces' markers. Called
    # when `words` is first read: only --words reads it, and grouping a 16k-token text costs ~0.2 s.
    word_grouping: Callable[[], list[Word]] | None = None
    # Cross-attention (an encoder–decoder model's decoder reading the encoder): the key tokens (the source),
    # when they are not `tokens` (the queries, the target). q is then (H, T_query, D), k and v (H_kv, T_key, D).
    keys: list[Token] | None = None
    # An image's patch grid (data/image.py) when a vision transformer read an image; None for text.
    image: PatchGrid | None = None

    @functools.cached_property
    def words(self) -> list[Word] | None:
        """The tokenizer's words (word_grouping's, grouped once); None where the tokenizer says none."""
        return None if self.word_grouping is None else self.word_grouping()
