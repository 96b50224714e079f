"""What a loaded Hugging Face model is, read off its config and modules: its ModelInfo (dimensions, attention
kind, the positions it can place). Shared by the text and vision backends."""

from __future__ import annotations

from attn_cli.data.capture import ModelInfo


def model_info(name: str, model) -> ModelInfo:
    """Dimensions and attention kind from the config and the attention modules."""
    config = model.config
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    causal = any(getattr(module, "is_causal", False) for module in model.modules() if hasattr(module, "layer_idx"))
    return ModelInfo(
        name=name,
        architecture=config.model_type,
        layers=config.num_hidden_layers,
        heads=heads,
        kv_heads=getattr(config, "num_key_value_heads", None) or heads,
        head_dim=head_dim,
        causal=causal,
        max_positions=usable_positions(model),
    )


def usable_positions(model) -> int | None:
    """How many tokens the model can place: its own position limit, not the tokenizer's.

    RoBERTa-style embeddings number positions from padding_idx + 1, so the first
    padding_idx + 1 rows of the table are never a real token's position.
    """
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit is None:
        return None
    for name, module in model.named_modules():
        if name.endswith("position_embeddings") and getattr(module, "padding_idx", None) is not None:
            return limit - module.padding_idx - 1
    return limit
