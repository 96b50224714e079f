"""Tiny random vision transformers saved as a user's checkpoint would be (config, safetensors weights and the
image processor's preprocessor_config.json), for tests/test_vision*.py. Nothing is downloaded."""

from __future__ import annotations

from pathlib import Path

SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4)


def tiny_configs():
    """name → (config, image processor) for every architecture attn reads images with."""
    from transformers import (
        BitImageProcessor,
        CLIPImageProcessor,
        CLIPVisionConfig,
        DeiTConfig,
        DeiTImageProcessor,
        Dinov2WithRegistersConfig,
        SiglipImageProcessor,
        SiglipVisionConfig,
        ViTConfig,
        ViTImageProcessor,
    )

    square = {"height": 32, "width": 32}
    return {
        "vit": (ViTConfig(**SIZES, intermediate_size=37, image_size=32, patch_size=8), ViTImageProcessor(size=square)),
        "deit": (
            DeiTConfig(**SIZES, intermediate_size=37, image_size=32, patch_size=8),
            DeiTImageProcessor(size=square, crop_size=square),
        ),
        "dinov2": (
            Dinov2WithRegistersConfig(**SIZES, mlp_ratio=1, image_size=28, patch_size=7, num_register_tokens=4),
            BitImageProcessor(size={"shortest_edge": 28}, crop_size={"height": 28, "width": 28}),
        ),
        "clip": (
            CLIPVisionConfig(**SIZES, intermediate_size=37, image_size=32, patch_size=8),
            CLIPImageProcessor(size={"shortest_edge": 32}, crop_size=square),
        ),
        "siglip": (
            SiglipVisionConfig(**SIZES, intermediate_size=37, image_size=32, patch_size=8),
            SiglipImageProcessor(size=square),
        ),
    }


def save_vision(model, processor, directory: Path) -> Path:
    model.eval().save_pretrained(directory)
    processor.save_pretrained(directory)
    return directory


def build(name: str, directory: Path, seed: int = 0) -> Path:
    import torch
    from transformers import AutoModel

    torch.manual_seed(seed)
    config, processor = tiny_configs()[name]
    return save_vision(AutoModel.from_config(config), processor, directory)


def halves(path: Path, size=(40, 30), left=(220, 30, 30), right=(20, 20, 20)) -> Path:
    """A PNG whose left half is one colour and right half another."""
    from PIL import Image

    width, height = size
    image = Image.new("RGB", size, right)
    image.paste(Image.new("RGB", (width // 2, height), left), (0, 0))
    image.save(path)
    return path


def noise(path: Path, size=(48, 40), seed: int = 0) -> Path:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)).save(path)
    return path


def planted_left(directory: Path) -> Path:
    """A tiny ViT whose layer 0 head 0 attends, from [CLS] and from every patch, only to the patches whose
    red channel is bright: on an image whose left half is red and right half dark, only to the left half.

    The patch embedding writes +red sum into dimension 0 and −red sum into dimension 1 (nothing else, and
    no position embeddings), so after the layer norm a bright-red patch has x₀ = +4, a dark one −4 and
    [CLS] 0; head 0's key reads x₀, its query is a constant: scores +23 on red patches, 0 on [CLS], −23 on dark."""
    import torch
    from transformers import ViTImageProcessor, ViTModel

    torch.manual_seed(0)
    config, _ = tiny_configs()["vit"]
    model = ViTModel(config, add_pooling_layer=False)
    with torch.no_grad():
        embeddings = model.embeddings
        embeddings.position_embeddings.zero_()
        embeddings.cls_token.zero_()
        projection = embeddings.patch_embeddings.projection
        projection.weight.zero_()
        projection.bias.zero_()
        projection.weight[0, 0] = 1.0  # x₀ = the patch's summed (normalised) red
        projection.weight[1, 0] = -1.0
        attention = model.layers[0].attention
        norm = model.layers[0].layernorm_before
        norm.weight.fill_(1.0)
        norm.bias.zero_()
        head = slice(0, config.hidden_size // config.num_attention_heads)  # head 0's rows
        for linear in (attention.q_proj, attention.k_proj):
            linear.weight[head] = 0.0
            linear.bias[head] = 0.0
        attention.k_proj.weight[0, 0] = 4.0  # k₀ = 4·x₀
        attention.q_proj.bias[0] = 4.0  # q₀ = 4 for every token
    return save_vision(model, ViTImageProcessor(size={"height": 32, "width": 32}), directory)
