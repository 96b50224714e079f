"""What a Hugging Face model is, read off its config and modules: its ModelInfo (dimensions, attention kind,
the positions it can place), the dtype it is loaded in, and why its generation stopped. Shared by the text,
encoder–decoder and vision backends."""

from __future__ import annotations

from attn_cli.data.capture import ModelInfo
from attn_cli.plumbing.errors import UnsupportedModel

# Why a weights-only model has no Q, K and V: said in the JSON and in one line of the terminal.
WITHOUT_QKV = (
    "{name} computes attention in its own code, not through transformers' attention interface: attn reads the "
    "weights it returns (output_attentions), not its Q, K and V"
)


def model_info(name: str, model) -> ModelInfo:
    """Dimensions and attention kind from the config and the attention modules (an encoder–decoder made of two
    configs gives its encoder's: stack_config)."""
    config = stack_config(model.config, "encoder")
    heads = getattr(config, "num_attention_heads", None)
    inner = inner_models(config)
    if not isinstance(heads, int) and inner:  # BLT: a patcher, byte encoder and decoder, a global model
        raise UnsupportedModel(
            f"{config.model_type} is several models in one, each with its own attention ({', '.join(inner)}): "
            "attn shows one stack of layers over the text's tokens",
            "no numbers are shown rather than one of them passed off as the model's",
        )
    if not isinstance(heads, int):  # Mamba, RWKV, xLSTM, FNet: state spaces, recurrences or Fourier mixing
        raise UnsupportedModel(
            f"{config.model_type} has no attention heads (its config names no num_attention_heads)",
            "attn shows attention matrices; this model mixes tokens another way",
        )
    head_dims, kv_heads = per_layer(config, "head_dim"), per_layer(config, "num_key_value_heads")
    causal = any(getattr(module, "is_causal", False) for module in model.modules() if hasattr(module, "layer_idx"))
    notes = [ATTENTION_NOTES.get(config.model_type), varying_sizes(head_dims, kv_heads)]
    return ModelInfo(
        name=name,
        architecture=model.config.model_type,
        layers=config.num_hidden_layers,
        heads=heads,
        kv_heads=kv_heads[0] or heads,
        head_dim=head_dims[0] or config.hidden_size // heads,
        causal=causal,
        max_positions=usable_positions(model),
        no_attention_layers=no_attention_layers(model, config.num_hidden_layers),
        attention_note="; ".join(note for note in notes if note) or None,
    )


def inner_models(config) -> list[str]:
    """The names of the configs inside `config` that have attention heads of their own (BLT's patcher_config,
    encoder_config …), where the config itself names none."""
    return [
        name
        for name, value in vars(config).items()
        if name.endswith("_config") and isinstance(getattr(value, "num_attention_heads", None), int)
    ]


def stack_config(config, stack: str):
    """The config that sizes one stack ("encoder", or "decoder" for the decoder and cross-attention): the
    `encoder` or `decoder` config inside an encoder–decoder made of two (EncoderDecoderModel's BERT + BERT,
    T5Gemma's), whose own config names no heads or layers; the config itself for every other model."""
    inner = getattr(config, "encoder" if stack == "encoder" else "decoder", None)
    if getattr(config, "is_encoder_decoder", False) and isinstance(getattr(inner, "num_attention_heads", None), int):
        return inner
    return config


def per_layer(config, name: str) -> list:
    """A config size per layer: [the one value] for most configs, every layer's where a heterogeneous config
    (Gemma 4's per_layer_config) sets it per layer and refuses the global read (a RuntimeError, not an
    AttributeError, so getattr's default does not catch it). [None] where the config has none."""
    try:
        return [getattr(config, name, None)]
    except RuntimeError:
        return [getattr(layer, name, None) for layer in config.per_layer_config]


def varying_sizes(head_dims: list, kv_heads: list) -> str | None:
    """What the model info's one head_dim and kv_heads (layer 0's) leave out, where they vary by layer."""
    if len(set(head_dims)) <= 1 and len(set(kv_heads)) <= 1:
        return None
    layers = max(len(head_dims), len(kv_heads))  # a size the config sets once holds for every layer
    head_dims, kv_heads = (sizes * layers if len(sizes) == 1 else sizes for sizes in (head_dims, kv_heads))
    return "head_dim and kv_heads vary by layer (the model info gives layer 0's): " + ", ".join(
        f"layer {index}: {dim} ({kv} kv head{'' if kv == 1 else 's'})"
        for index, (dim, kv) in enumerate(zip(head_dims, kv_heads))
    )


# Model types whose heads are more than the one softmax attn shows (and eager's output_attentions returns).
ATTENTION_NOTES = {
    "diffllama": "differential attention: each head's output is softmax(S₁) − λ·softmax(S₂) of its two halves; the "
    "weights shown are each softmax alone, as eager's output_attentions returns them, not their difference",
}


def no_attention_layers(model, layers: int) -> list[int]:
    """A hybrid's layers without softmax attention (linear attention, state-space, convolution mixers), by index.

    A layer is said to have none only where the model has a list of exactly `layers` blocks, some of which hold
    a module that calls the attention interface, and this one holds none (Qwen3-Next's layers.0 is linear
    attention, Zamba2's layers.1 holds the shared attention block). Models whose blocks are not one per layer
    (ALBERT's shared layer, recurrent depth) or that have no such module say nothing: [] (every layer as before).
    """
    from attn_cli.backends.capture_hook import calls_interface

    modules = dict(model.named_modules())
    lists: dict[
        str, set[int]
    ] = {}  # the path of a list of `layers` blocks -> the indices of its blocks that hold attention
    for name, module in modules.items():
        if not calls_interface(type(module)):
            continue
        parts = name.split(".")
        for depth in range(len(parts) - 1, 0, -1):  # the innermost list of `layers` blocks above the module
            parent = ".".join(parts[: depth - 1])
            container = modules.get(parent)
            size = len(container) if hasattr(container, "__len__") else None  # type: ignore[arg-type]
            if parts[depth - 1].isdigit() and size == layers:
                lists.setdefault(parent, set()).add(int(parts[depth - 1]))
                break
    if len(lists) != 1:  # none, or several stacks (an encoder and a decoder): say nothing
        return []
    [found] = lists.values()
    return [layer for layer in range(layers) if layer not in found]


def usable_positions(model) -> int | None:
    """How many tokens the model can place: its own position limit, not the tokenizer's.

    RoBERTa-style embeddings number positions from padding_idx + 1, so the first
    padding_idx + 1 rows of the table are never a real token's position.
    """
    limit = getattr(stack_config(model.config, "encoder"), "max_position_embeddings", None)
    if limit is None:
        return None
    for name, module in model.named_modules():
        if name.endswith("position_embeddings") and getattr(module, "padding_idx", None) is not None:
            return limit - module.padding_idx - 1
    return limit


def from_pretrained_dtype(dtype: str):
    """--dtype as from_pretrained takes it: "auto" (as saved) or the torch dtype of that name
    (float32, float16, bfloat16; backends/registry.py refuses any other)."""
    import torch

    if dtype == "auto":
        return "auto"
    return {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]


def stop_reason(generated: list[int], eos: int | list[int] | None) -> str:
    """Why generation ended: "eos" when on one of the end-of-sequence ids generate() stops on (the model's
    generation_config's, an id or a list, which need not be the tokenizer's eos), else "max_new_tokens"."""
    eos_ids = {eos} if isinstance(eos, int) else set(eos or ())
    return "eos" if generated and generated[-1] in eos_ids else "max_new_tokens"
