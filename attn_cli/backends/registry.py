"""Model names → backend modules. Built-in names are registered exactly like user models are loaded.

Every backend module provides `Options` and `load(name, *, device, dtype, options)` (backends/base.py).
A built-in name maps to its module; anything else is a Hugging Face model (a local directory or a
hub id), served by backends/hf.py. Modules are imported only when a model is loaded, so listing
the built-ins costs nothing.
"""

from __future__ import annotations

import importlib
import warnings
from types import ModuleType

from attn_cli.backends.base import Backend, parse_options

HF_MODULE = "attn_cli.backends.hf"
# name → (module, one-line description)
_BUILTINS: dict[str, tuple[str, str]] = {
    "minilm": (
        "attn_cli.backends.minilm",
        "all-MiniLM-L6-v2: a 6-layer, 12-head pretrained BERT, bundled (the default)",
    ),
    "lab": (
        "attn_cli.backends.lab",
        "the lab decoder: a 2-layer Llama-shaped decoder with an induction head, trained by lab/train.py",
    ),
    "toy": (
        "attn_cli.backends.toy",
        "the textbook model: seeded embeddings, W_Q, W_K, W_V, W_O, every scoring function",
    ),
}


def builtin_models() -> dict[str, str]:
    """Built-in model names and one-line descriptions."""
    return {name: description for name, (_, description) in _BUILTINS.items()}


def backend_module(spec: str) -> ModuleType:
    """The module that loads `spec`: a built-in's own, else the Hugging Face backend."""
    return importlib.import_module(_BUILTINS[spec][0] if spec in _BUILTINS else HF_MODULE)


def backend_label(spec: str) -> str:
    """How errors name the backend: "the toy model", "the Hugging Face model ./dir"."""
    return f"the {spec} model" if spec in _BUILTINS else f"the Hugging Face model {spec}"


def load_backend(spec: str, *, device: str = "auto", dtype: str = "auto", **options) -> Backend:
    """Load a built-in name ("minilm", "lab", "toy"), a local model directory, or a hub id in the HF cache.

    options: the backend's own settings (its module's Options), checked before anything loads.
    """
    from attn_cli.plumbing.devices import resolve_device
    from attn_cli.plumbing.errors import BadInput

    if not isinstance(spec, str) or not spec.strip():
        raise BadInput(
            f"no model named: {spec!r}",
            "name one: minilm, lab, toy, a model directory or a hub id (attn models lists them)",
        )
    with warnings.catch_warnings():
        # Importing transformers pulls in tqdm.auto, which in a notebook without ipywidgets warns "IProgress not
        # found" (a TqdmWarning, in the first cell of every notebook) about the progress bars attn turns off
        # (hf.py: disable_progress_bar): nothing the user can act on, so it is not shown
        warnings.filterwarnings("ignore", message="IProgress not found")
        module = backend_module(spec)
        parsed = parse_options(backend_label(spec), module.Options, options)
        return module.load(spec, device=resolve_device(device), dtype=_dtype(dtype), options=parsed)


def _dtype(dtype: str) -> str:
    from attn_cli.plumbing.errors import BadInput

    if dtype not in ("auto", "float32", "float16", "bfloat16"):
        raise BadInput(f"unknown dtype {dtype!r}", "use auto, float32, float16 or bfloat16")
    return dtype
