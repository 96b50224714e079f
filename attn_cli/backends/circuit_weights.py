"""Where a Hugging Face model keeps the weights of its heads' circuits: W_Q, W_K, W_V, W_O per head, the
norm each attention reads through, the token and position embeddings and the unembedding.

Shapes (L layers, H query heads, d = d_model, r = head dim, V vocabulary, n positions), row-vector
convention (x·W): w_q, w_k, w_v (L, H, d, r); w_o (L, H, r, d); w_e (V, d); w_pos (n, d); w_u (d, V).
Grouped-query models: a query head's w_k and w_v are its kv head's (ModelInfo.kv_head_of), repeated.
Everything is copied to the CPU in float64: the circuits are small products of these, and float64 keeps
their ratios exact to far below the 1e-5 they are checked to.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from attn_cli.backends.capture_hook import output_projection
from attn_cli.backends.validate import check_finite_tensor
from attn_cli.plumbing.errors import AttnError, UnsupportedModel

# The query, key and value projections by name (nn.Linear each): Llama/Mistral/Qwen/OPT/BART, BERT, DistilBERT.
_SEPARATE = (("q_proj", "k_proj", "v_proj"), ("query", "key", "value"), ("q_lin", "k_lin", "v_lin"))
_FUSED = "c_attn"  # GPT-2: one Conv1D (d, 3·H·r), x·W then split into q, k, v
_PRE_NORMS = ("ln_1", "input_layernorm")  # the norm a pre-norm block applies before its attention
_FINAL_NORMS = ("ln_f", "norm", "final_layernorm")


@dataclass(frozen=True)
class Norm:
    kind: str  # "layernorm" (subtracts the mean, then scales) or "rmsnorm" (scales only)
    scale: torch.Tensor  # (d,) its weight


@dataclass
class CircuitWeights:
    w_q: torch.Tensor
    w_k: torch.Tensor
    w_v: torch.Tensor
    w_o: torch.Tensor
    reading_norms: list[Norm | None]  # per layer: the norm whose output the attention reads
    norm_placement: str  # "pre" (GPT-2, Llama: the block's own), "post" (BERT: the previous sublayer's), "none"
    final_norm: Norm | None  # before the unembedding
    w_e: torch.Tensor | None
    w_pos: torch.Tensor | None  # learned absolute positions added to the tokens; None otherwise
    positions: str  # "learned", "rotary" or "none": how positions enter
    w_u: torch.Tensor | None
    unembedding: str  # "lm_head", "tied", or why there is none
    biases: list[str] = field(default_factory=list)  # which of q, k, v have biases (left out of the circuits)
    qk_norms: bool = False  # q and k are normalised per head before the scores (Qwen3's q_norm, k_norm)


def hf_circuit_weights(model, lm, info) -> CircuitWeights:
    """The weights of a loaded transformers base model (and its LM head, or None)."""
    attentions = sorted(
        (module for module in model.modules() if _projections(module) is not None),
        key=lambda module: int(getattr(module, "layer_idx", 0) or 0),
    )
    if len(attentions) != info.layers:
        raise UnsupportedModel(
            f"{info.name}: found {len(attentions)} attention modules with W_Q, W_K, W_V for {info.layers} layers",
            "attn circuits knows GPT-2, BERT and Llama-style layouts",
        )
    parents = {id(child): parent for parent in model.modules() for child in parent.children()}
    per_layer = [_layer(module, parents.get(id(module)), info) for module in attentions]
    stacked = [torch.stack(tensors) for tensors in zip(*(weights for weights, _ in per_layer))]
    biases = [name for name in "qkv" if any(name in names for _, names in per_layer)]
    reading, placement = _reading_norms(model, attentions, parents)
    final = _norm(_first_attribute(model, _FINAL_NORMS))
    w_e = _cpu(model.get_input_embeddings().weight)
    w_pos, positions = _positions(model, info)
    w_u, unembedding = _unembedding(model, lm, final, w_e, info)
    _check_finite(stacked, reading, final, {"the token embedding": w_e, "W_pos": w_pos, "W_U": w_u})
    w_q, w_k, w_v, w_o = stacked  # (L, H, d, r) three times, then (L, H, r, d)
    return CircuitWeights(
        w_q=w_q,
        w_k=w_k,
        w_v=w_v,
        w_o=w_o,
        reading_norms=reading,
        norm_placement=placement,
        final_norm=final,
        w_e=w_e,
        w_pos=w_pos,
        positions=positions,
        w_u=w_u,
        unembedding=unembedding,
        biases=biases,
        qk_norms=any(hasattr(module, "q_norm") or hasattr(module, "k_norm") for module in attentions),
    )


def _check_finite(stacked: list, reading: list, final, others: dict) -> None:
    """The check the captures get (validate.check_finite_tensor) on the weights the circuits are made of: NaN or
    Inf there would reach an SVD as a LinAlgError, or numbers that mean nothing. stacked: w_q, w_k, w_v, w_o."""
    for layer in range(len(stacked[0])):
        for name, tensor in zip(("W_Q", "W_K", "W_V", "W_O"), stacked):
            check_finite_tensor(layer, name, tensor[layer])
        if reading[layer] is not None:
            check_finite_tensor(layer, "its norm's scale", reading[layer].scale)
    for name, tensor in {**others, "the final norm's scale": None if final is None else final.scale}.items():
        if tensor is not None and not bool(torch.isfinite(tensor).all()):
            raise AttnError(
                f"{name} holds NaN or infinite values",
                "the weights hold non-finite numbers or the dtype overflowed; try --dtype float32",
            )


def _cpu(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.detach().to("cpu", torch.float64)


def _projections(module):
    """(q, k, v) as (d, out) matrices for x·W, or None when `module` is not an attention with them."""
    for names in _SEPARATE:
        layers = [getattr(module, name, None) for name in names]
        if all(isinstance(layer, torch.nn.Linear) for layer in layers):
            return tuple(_cpu(layer.weight).T for layer in layers), [layer.bias for layer in layers]
    fused = getattr(module, _FUSED, None)
    if fused is not None and type(fused).__name__ == "Conv1D" and not getattr(module, "is_cross_attention", False):
        weight = _cpu(fused.weight)  # (d, 3·H·r): Conv1D keeps (in, out)
        biases = [None] * 3 if fused.bias is None else list(fused.bias.chunk(3))
        return weight.chunk(3, dim=1), biases
    return None


def _layer(module, parent, info):
    """((w_q, w_k, w_v (H, d, r), w_o (H, r, d)), names of the projections with biases) of one layer."""
    (q, k, v), biases = _projections(module)
    heads, kv_heads, r = info.heads, info.kv_heads, info.head_dim
    per_head = lambda matrix, count: matrix.reshape(matrix.shape[0], count, r).permute(1, 0, 2)  # noqa: E731
    kv_of = torch.tensor([info.kv_head_of(head) for head in range(heads)])
    w_o = output_projection(module, parent)  # (d, H·r): out = concat·W_oᵀ
    if w_o is None:
        raise UnsupportedModel(
            f"{info.name}: no output projection W_O found beside layer {module.layer_idx}'s attention"
        )
    w_o = _cpu(w_o).T.reshape(heads, r, -1)  # (H, r, d): head h's rows of W_oᵀ
    named = [name for name, bias in zip("qkv", biases) if bias is not None and bool(bias.detach().abs().max() > 0)]
    return (per_head(q, heads), per_head(k, kv_heads)[kv_of], per_head(v, kv_heads)[kv_of], w_o), named


def _norm(module) -> Norm | None:
    weight = getattr(module, "weight", None)
    if module is None or weight is None:
        return None
    name = type(module).__name__.lower()
    kind = "rmsnorm" if "rms" in name else "layernorm"
    scale = _cpu(weight)
    return Norm(kind, 1 + scale if "gemma" in name else scale)  # Gemma's RMSNorm multiplies by 1 + weight


def _first_attribute(module, names):
    return next((getattr(module, name) for name in names if hasattr(module, name)), None)


def _reading_norms(model, attentions, parents) -> tuple[list[Norm | None], str]:
    """The norm whose output each attention reads. Pre-norm blocks (GPT-2's ln_1, Llama's input_layernorm)
    hold it; a post-norm BERT reads the output of the LayerNorm that ends the sublayer before (the
    embeddings' for layer 0)."""
    blocks = [parents.get(id(module)) for module in attentions]
    pre = [_first_attribute(block, _PRE_NORMS) if block is not None else None for block in blocks]
    if all(norm is not None for norm in pre):
        return [_norm(norm) for norm in pre], "pre"
    embeddings_norm = getattr(getattr(model, "embeddings", None), "LayerNorm", None)
    layers = getattr(getattr(model, "encoder", None), "layer", None)
    if embeddings_norm is not None and layers is not None:
        after = [embeddings_norm] + [getattr(getattr(layer, "output", None), "LayerNorm", None) for layer in layers]
        return [_norm(norm) for norm in after[: len(attentions)]], "post"
    return [None] * len(attentions), "none"


def _positions(model, info) -> tuple[torch.Tensor | None, str]:
    """Learned absolute positions (GPT-2's wpe, BERT's position_embeddings), or how else positions enter."""
    table = getattr(model, "wpe", None)
    if table is None:
        table = getattr(getattr(model, "embeddings", None), "position_embeddings", None)
    if table is not None:
        first = (table.padding_idx + 1) if getattr(table, "padding_idx", None) is not None else 0  # RoBERTa
        return _cpu(table.weight)[first:], "learned"
    config = model.config
    if (
        getattr(model, "rotary_emb", None) is not None
        or getattr(config, "rope_theta", None) is not None
        or getattr(config, "rope_parameters", None) is not None
    ):
        return None, "rotary"
    return None, "none"


def _unembedding(model, lm, final: Norm | None, w_e, info) -> tuple[torch.Tensor | None, str]:
    """W_U (d, V) where the logits are a linear map of the final norm's output: the checkpoint's LM head, or
    the input embeddings where the config ties them and the checkpoint has no head."""
    if final is None:
        return None, (
            f"{info.name} has no final norm feeding an unembedding (an encoder: its checkpoint has no "
            "language-model head)"
        )
    head = lm.get_output_embeddings() if lm is not None else None
    if isinstance(head, torch.nn.Linear):
        return _cpu(head.weight).T, "lm_head"
    if head is None and getattr(model.config, "tie_word_embeddings", False):
        return w_e.T, "tied"
    return None, f"{info.name}'s checkpoint has no language-model head and does not tie one to its embeddings"
