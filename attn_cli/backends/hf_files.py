"""Find a Hugging Face model directory, safely: local path or hub id, safetensors only by default."""

from __future__ import annotations

import os
import re
from pathlib import Path

from attn_cli.plumbing.errors import BadInput, ModelNotFound, UnsafeCheckpoint

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")
_PICKLE_WEIGHTS = ("pytorch_model.bin", "pytorch_model.bin.index.json", "model.pt", "model.pth", "model.ckpt")
# What a model needs besides its weights; nothing executable.
_HUB_PATTERNS = ["*.json", "*.txt", "*.model", "*.tiktoken", "*.safetensors"]


def resolve_model_dir(spec: str, *, revision: str | None = None, allow_pickle: bool = False) -> Path:
    """A local directory holding the model `spec` names (a path, or org/name in the HF cache)."""
    path = Path(os.path.expanduser(spec))  # ~unknown-user stays as it is (Path.expanduser raises RuntimeError)
    try:
        is_dir, exists = path.is_dir(), path.exists()
    except OSError as error:  # a name too long for the file system, …
        raise ModelNotFound(
            f"no model directory at {spec}: {error.strerror}", "check the path, or pass a hub id like org/name"
        ) from None
    if is_dir:
        if revision is not None:
            raise BadInput(f"--revision {revision} applies to hub ids, not to the directory {spec}")
        check_weights_format(path, allow_pickle)
        return path
    if exists:
        raise ModelNotFound(
            f"--model {spec} is a file, not a model directory", "pass the directory holding config.json"
        )
    if spec.startswith((".", "/", "~")) or not _HUB_ID.match(spec):
        raise ModelNotFound(f"no model directory at {spec}", "check the path, or pass a hub id like org/name")
    directory = _hub_snapshot(spec, revision, allow_pickle)
    check_weights_format(directory, allow_pickle)
    return directory


def check_weights_format(directory: Path, allow_pickle: bool) -> None:
    """Refuse a directory whose weights are only a pickle checkpoint (pickles can run code)."""
    if not (directory / "config.json").is_file():
        raise ModelNotFound(f"{directory} has no config.json", "is it a Hugging Face model directory?")
    if any(directory.glob("*.safetensors")):
        return
    pickles = [name for name in _PICKLE_WEIGHTS if (directory / name).exists()]
    if not pickles:
        raise ModelNotFound(f"{directory} holds no model weights (*.safetensors)")
    if not allow_pickle:
        raise UnsafeCheckpoint(
            f"{directory} has only a pickle checkpoint ({pickles[0]}); loading one can run arbitrary code",
            "convert it to safetensors, or pass --allow-pickle if you trust its source",
        )


def _hub_snapshot(repo_id: str, revision: str | None, allow_pickle: bool) -> Path:
    """The cached snapshot of `repo_id`, downloading it when allowed and reachable."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    patterns = _HUB_PATTERNS + (list(_PICKLE_WEIGHTS) if allow_pickle else [])
    try:
        return Path(snapshot_download(repo_id, revision=revision, allow_patterns=patterns, local_files_only=True))
    except LocalEntryNotFoundError:
        pass
    if _offline():
        raise ModelNotFound(
            f"{repo_id} is not in the local Hugging Face cache and HF_HUB_OFFLINE is set",
            f"download it where there is network (hf download {repo_id}) or pass a local directory",
        )
    try:
        return Path(snapshot_download(repo_id, revision=revision, allow_patterns=patterns))
    except Exception as error:  # network, auth, missing repo: all end the same way for the user
        raise ModelNotFound(
            f"{repo_id} is not in the local Hugging Face cache and could not be downloaded ({type(error).__name__})",
            "check the name and your network, or pass a local directory with --model PATH",
        ) from error


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def saved_head(directory: Path) -> str | None:
    """The head the checkpoint was saved with (config.json's architectures say so): "causal" (a decoder's
    *ForCausalLM), "seq2seq" (an encoder–decoder's *ForConditionalGeneration, Marian's MTModel, an
    EncoderDecoderModel of two models, which AutoModel does not load), "classifier"
    (*ForSequenceClassification), "masked" (*ForMaskedLM), or None."""
    import json

    try:
        config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
        architectures = [str(name) for name in config.get("architectures") or []]
    except (OSError, ValueError, AttributeError, TypeError):
        return None
    if config.get("is_encoder_decoder") and any(
        name.endswith(("ForConditionalGeneration", "MTModel", "EncoderDecoderModel")) for name in architectures
    ):
        return "seq2seq"
    if any(name.endswith(("ForCausalLM", "LMHeadModel")) for name in architectures):
        return "causal"
    if any(name.endswith("ForMaskedLM") for name in architectures):
        return "masked"
    return "classifier" if any(name.endswith("ForSequenceClassification") for name in architectures) else None
