"""What every JSON document attn writes has in common (no torch: `attn models` uses it too)."""

from __future__ import annotations

import json
from typing import Iterator

SCHEMA_VERSION = 1  # bumped on any breaking change of a document's shape


class Document:
    """A report the one JSON writer (render/files.write_json) can write: its text, in chunks.

    Small documents are one chunk of to_json_dict(); an inspect report streams layer by layer.
    """

    def to_json_dict(self) -> dict:
        raise NotImplementedError

    def json_chunks(self) -> Iterator[str]:
        yield dumps(self.to_json_dict())


def dumps(value) -> str:
    """Compact JSON, non-ASCII kept, NaN refused (masked values must already be null)."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False)
