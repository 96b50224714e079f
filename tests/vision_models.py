"""Tiny random vision transformers saved as a user's checkpoint would be (config, safetensors weights and the
image processor's preprocessor_config.json), for tests/test_vision*.py. Nothing is downloaded."""

from __future__ import annotations

from pathlib import Path

SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4)


def tiny_configs():
    """name → (config, image processor) for every architecture attn reads images with."""
    from transformers import (BitImageProcessor, CLIPImageProcessor, CLIPVisionConfig, DeiTConfig,
                              DeiTImageProcessor, Dinov2WithRegistersConfig, SiglipImageProcessor,
                              SiglipVisionConfig, ViTConfig, ViTImageProcessor)

    square = {"height": 32, "width": 32}
    return {
        "vit": (ViTConfig(**SIZES, intermediate_size=37, image_size=32, patch_size=8), ViTImageProcessor(size=square)),
        "deit": (DeiTConfig(**SIZES, intermediate_size=37, image_size=32, patch_size=8),
                 DeiTImageProcessor(size=square, crop_size=square)),
        "dinov2": (Dinov2WithRegistersConfig(**SIZES, mlp_ratio=1, image_size=28, patch_size=7, num_register_tokens=4),
                   BitImageProcessor(size={"shortest_edge": 28}, crop_size={"height": 28, "width": 28})),
        "clip": (CLIPVisionConfig(**SIZES, intermediate_size=37, image_size=32, patch_size=8),
                 CLIPImageProcessor(size={"shortest_edge": 32}, crop_size=square)),
        "siglip": (SiglipVisionConfig(**SIZES, intermediate_size=37, image_size=32, patch_size=8),
                   SiglipImageProcessor(size=square)),
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
