"""The model catalog (`attn models`): the models attn can run without a download, as plain data. The backend
builds it (backends/catalog.py reads the built-ins and the Hugging Face cache); the renderer draws it."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import Enum
from pathlib import Path

from attn_cli.data.document import SCHEMA_VERSION, Document, counted


class Source(str, Enum):
    builtin = "builtin"
    hf_cache = "hf-cache"


@dataclass(frozen=True)
class CatalogEntry:
    name: str  # what --model accepts: a built-in name or the hub id (org/name)
    source: Source
    architecture: str | None  # model_type from config.json; None where it cannot be read
    layers: int | None
    heads: int | None
    kv_heads: int | None
    head_dim: int | None
    path: str | None  # the model directory (the cached snapshot), None when there is none
    description: str | None  # the built-in's line; for a cache entry, only what is wrong with it

    def to_json_dict(self) -> dict:
        return {**asdict(self), "source": self.source.value}


@dataclass(frozen=True)
class Catalog(Document):
    models: list[CatalogEntry]  # built-ins in registry order, then the cache by name
    cache_dir: Path  # the Hugging Face cache that was scanned (it may not exist)

    def summary_shape(self) -> str:
        return counted(len(self.models), "model")

    def to_json_dict(self) -> dict:
        return {
            "schema_version": SCHEMA_VERSION,
            "command": "models",
            "models": [entry.to_json_dict() for entry in self.models],
        }

    def to_arrow(self):
        """One row per model, the columns of its JSON record (name, source, architecture, layers, …)."""
        from attn_cli.data.tables import records

        return records(
            [entry.to_json_dict() for entry in self.models],
            strings=("name", "source", "architecture", "path", "description"),
        )
