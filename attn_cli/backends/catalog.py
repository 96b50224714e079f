"""The models attn can run without a download: the built-ins and the local Hugging Face cache.

Everything comes from each model's config.json, read with the json module: listing never
imports torch or transformers and never reads (or hashes) weights, so it is instant.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path

from attn_cli.backends.lab import lab_dir
from attn_cli.backends.minilm import minilm_dir

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib
from attn_cli.data.catalog import Catalog, CatalogEntry, Source
from attn_cli.plumbing.errors import AttnError, ModelNotFound

NO_DIMENSIONS = {"architecture": None, "layers": None, "heads": None, "kv_heads": None, "head_dim": None}

# Built-ins that are a Hugging Face model directory: where it is (raising ModelNotFound when not
# installed). A built-in without an entry here (one with no config.json) is listed with its
# description and no dimensions.
BUILTIN_DIRECTORIES: dict[str, Callable[[], Path]] = {"minilm": minilm_dir, "lab": lab_dir}


def dimensions_from_config(config: dict) -> dict:
    """architecture, layers, heads, kv_heads and head_dim from a config.json dict; None where it does not say.

    Llama/BERT spell them num_hidden_layers, num_attention_heads, num_key_value_heads, hidden_size
    (and sometimes head_dim); GPT-2 spells them n_layer, n_head, n_embd. Without a kv-head count
    every head has its own keys (kv_heads = heads). Multimodal configs keep them in text_config.
    """
    text = config.get("text_config")
    if not isinstance(text, dict) or _count(config, "num_hidden_layers", "n_layer", "num_layers"):
        text = config
    heads = _count(text, "num_attention_heads", "n_head", "num_heads")
    width = _count(text, "hidden_size", "n_embd", "d_model")
    multi_query = 1 if text.get("multi_query") is True else None  # GPT-BigCode, Falcon-7B: one kv head
    architecture = config.get("model_type")
    return {
        "architecture": architecture if isinstance(architecture, str) and architecture else None,
        "layers": _count(text, "num_hidden_layers", "n_layer", "num_layers"),
        "heads": heads,
        "kv_heads": _count(text, "num_key_value_heads", "num_kv_heads") or multi_query or heads,
        "head_dim": _count(text, "head_dim", "d_kv") or (width // heads if width and heads else None),
    }


def _count(config: dict, *keys: str) -> int | None:
    """The first of `keys` that holds a positive whole number (null, strings and booleans do not count)."""
    for key in keys:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def read_dimensions(directory: Path) -> tuple[dict, str | None]:
    """dimensions_from_config of directory/config.json, and what went wrong (None when nothing did)."""
    try:
        with open(directory / "config.json", encoding="utf-8") as handle:
            config = json.load(handle)
    except FileNotFoundError:
        return dict(NO_DIMENSIONS), "no config.json"
    except (OSError, ValueError) as error:  # ValueError: not JSON, not UTF-8
        return dict(NO_DIMENSIONS), f"config.json unreadable ({type(error).__name__})"
    if not isinstance(config, dict):
        return dict(NO_DIMENSIONS), "config.json is not a JSON object"
    return dimensions_from_config(config), None


def list_models(cache_dir: Path | str | None = None) -> Catalog:
    """The built-in models, then the models in the Hugging Face cache (huggingface_hub's by default)."""
    cache = Path(os.path.expandvars(str(cache_dir))).expanduser() if cache_dir else default_cache_dir()
    return Catalog(builtin_entries() + cached_entries(cache), cache)


def default_cache_dir() -> Path:
    """The cache huggingface_hub uses (HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub)."""
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def builtin_entries() -> list[CatalogEntry]:
    from attn_cli.backends.registry import builtin_models

    return [_builtin_entry(name, description) for name, description in builtin_models().items()]


def toy_dimensions() -> dict:
    """The toy's default shape from configs/toy.toml (flags can change it per run)."""
    from attn_cli.plumbing.config import config_dir

    with open(config_dir() / "toy.toml", "rb") as handle:
        toy = tomllib.load(handle)["toy"]
    return {
        "architecture": "toy",
        "layers": toy["layers"],
        "heads": toy["heads"],
        "kv_heads": toy["heads"],
        "head_dim": toy["d_model"] // toy["heads"],
    }


# Built-ins that are not a Hugging Face directory: their dimensions from their own config.
BUILTIN_DIMENSIONS: dict[str, Callable[[], dict]] = {"toy": toy_dimensions}


def _builtin_entry(name: str, description: str) -> CatalogEntry:
    locate = BUILTIN_DIRECTORIES.get(name)
    if name in BUILTIN_DIMENSIONS:
        return CatalogEntry(name, Source.builtin, **BUILTIN_DIMENSIONS[name](), path=None, description=description)
    if locate is None:
        return CatalogEntry(name, Source.builtin, **NO_DIMENSIONS, path=None, description=description)
    try:
        directory = locate()
    except ModelNotFound as error:
        return CatalogEntry(name, Source.builtin, **NO_DIMENSIONS, path=None, description=f"{description} — {error}")
    dimensions, problem = read_dimensions(directory)
    if problem:
        description = f"{description} — {problem}"
    return CatalogEntry(name, Source.builtin, **dimensions, path=str(directory), description=description)


def cached_entries(cache_dir: Path) -> list[CatalogEntry]:
    """One entry per model repo in the cache, sorted by name; a missing cache holds none.

    A repo huggingface_hub cannot scan (a blob gone, refs to a missing snapshot) is listed
    with no dimensions and its complaint as the description, rather than left out.
    """
    from huggingface_hub import scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    try:
        scan = scan_cache_dir(cache_dir)
    except CacheNotFound:
        return []
    except ValueError:  # its word for "the cache is a file"
        raise AttnError(
            f"the Hugging Face cache {cache_dir} is a file, not a directory",
            "point HF_HUB_CACHE or --cache-dir at a directory",
        ) from None
    except OSError as error:
        raise AttnError(f"cannot read the Hugging Face cache {cache_dir}: {error.strerror or error}") from None
    entries = [_cached_entry(repo) for repo in scan.repos if repo.repo_type == "model"]
    entries += _damaged_entries(cache_dir, {repo.repo_path.name for repo in scan.repos}, scan.warnings)
    return sorted(entries, key=lambda entry: entry.name.lower())


def _cached_entry(repo) -> CatalogEntry:
    snapshot = newest_snapshot(repo)
    if snapshot is None:
        return CatalogEntry(
            repo.repo_id, Source.hf_cache, **NO_DIMENSIONS, path=None, description="no snapshot in the cache"
        )
    dimensions, problem = read_dimensions(snapshot)
    return CatalogEntry(repo.repo_id, Source.hf_cache, **dimensions, path=str(snapshot), description=problem)


def newest_snapshot(repo) -> Path | None:
    """The most recently modified revision's snapshot holding a config.json (else the newest at all)."""
    revisions = sorted(
        repo.revisions, key=lambda revision: (revision.last_modified, "main" in revision.refs), reverse=True
    )
    for revision in revisions:
        if (revision.snapshot_path / "config.json").is_file():
            return revision.snapshot_path
    return revisions[0].snapshot_path if revisions else None


def _damaged_entries(cache_dir: Path, scanned: set[str], warnings: list) -> list[CatalogEntry]:
    """Model repos the scan skipped, with the scan's own complaint where one names them."""
    entries = []
    for repo_path in Path(cache_dir).expanduser().resolve().glob("models--*"):
        if repo_path.name in scanned or not repo_path.is_dir():
            continue
        names_it = re.compile(re.escape(str(repo_path)) + r"(?=[/\\)]|$)")  # not models--org--ab for models--org--a
        complaint = next((str(warning) for warning in warnings if names_it.search(str(warning))), None)
        description = f"damaged cache entry: {complaint}" if complaint else "damaged cache entry"
        name = repo_path.name.removeprefix("models--").replace("--", "/")
        entries.append(
            CatalogEntry(name, Source.hf_cache, **NO_DIMENSIONS, path=str(repo_path), description=description)
        )
    return entries
