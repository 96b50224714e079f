"""The lab decoder: a 2-layer Llama-shaped decoder in which an induction head formed, trained by lab/train.py
and shipped inside the package (attn_cli/backends/lab_model/: safetensors, config, word-level tokenizer)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from attn_cli.backends.minilm import verify_weights

PACKAGE = "attn-cli"  # the files ship in attn's own wheel
WEIGHTS_SHA256 = "3193e877e2d8f10088887be23163145442d42348e6e7d97099de65253d22647e"


@dataclass(frozen=True)
class Options:
    """None: the lab decoder is a few hundred kilobytes, loaded whole on the chosen device."""


def load(name: str, *, device: str, dtype: str, options: Options):
    """Load the shipped model offline, after checking its weights' SHA-256."""
    from attn_cli.backends.hf import load_hf_backend

    directory = lab_dir()
    verify_weights(directory / "model.safetensors", WEIGHTS_SHA256, PACKAGE)
    return load_hf_backend(name, directory, device=device, dtype=dtype)


def lab_dir() -> Path:
    """The shipped model directory (package data beside this module)."""
    return Path(__file__).resolve().parent / "lab_model"
