"""Model names → backends. Built-in names are registered exactly like user models are loaded."""

from __future__ import annotations

from typing import Callable

from attn_cli.backends.base import Backend

# A factory takes the load options (device, dtype, allow_pickle, revision) and returns a Backend.
BackendFactory = Callable[..., Backend]
_BUILTINS: dict[str, tuple[BackendFactory, str]] = {}


def register(name: str, description: str) -> Callable[[BackendFactory], BackendFactory]:
    def decorate(factory: BackendFactory) -> BackendFactory:
        _BUILTINS[name] = (factory, description)
        return factory

    return decorate


def builtin_models() -> dict[str, str]:
    """Built-in model names and one-line descriptions."""
    return {name: description for name, (_, description) in _BUILTINS.items()}


def load_backend(spec: str, *, device: str, revision: str | None = None, **options) -> Backend:
    """A built-in name ("minilm"), a local model directory, or a hub id in the HF cache.

    options: dtype ("auto"), allow_pickle (False), trust_remote_code (False), device_map (None).
    """
    if spec in _BUILTINS:
        factory, _ = _BUILTINS[spec]
        return factory(device=device, revision=revision, **options)
    from attn_cli.backends.hf import load_hf_backend
    from attn_cli.backends.hf_files import resolve_model_dir

    directory = resolve_model_dir(spec, revision=revision, allow_pickle=options.get("allow_pickle", False))
    return load_hf_backend(spec, directory, device=device, **options)


@register("minilm", "all-MiniLM-L6-v2: a 6-layer, 12-head pretrained BERT, bundled (the default)")
def _load_minilm(*, device: str, dtype: str = "auto", device_map: str | None = None, **_options) -> Backend:
    from attn_cli.backends.hf import load_hf_backend
    from attn_cli.backends.minilm import minilm_dir, verify_weights

    directory = minilm_dir()
    verify_weights(directory / "model.safetensors")
    return load_hf_backend("minilm", directory, device=device, dtype=dtype, device_map=device_map)


@register("toy", "the textbook model of the background articles: seeded embeddings, W_Q, W_K, W_V, W_O")
def _load_toy(*, device: str, toy: dict | None = None, **_options) -> Backend:
    from attn_cli.backends.toy import load_toy

    return load_toy(device=device, toy=toy)
