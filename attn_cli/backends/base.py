"""The contract between attn and a model: what a backend module provides, and how its options are checked.

A backend module (minilm, toy, hf) provides two names:

    Options   a frozen dataclass: the backend's own settings, each with a default and a comment
    load(name, *, device, dtype, options) -> Backend

The registry finds the module; `parse_options` checks what the user gave against
`Options` (unknown keys and wrong types are a BadInput naming the backend), so
nothing above a backend needs to know which settings it has. Values may come
typed (the Python API) or as strings (`-O key=value` on the command line).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from attn_cli.data.capture import Capture, ModelInfo
from attn_cli.plumbing.errors import BadInput


class Backend(Protocol):
    """One loaded model."""

    info: ModelInfo
    device: str
    dtype: str

    def capture_batch(
        self,
        texts: Sequence[str],
        layers: Sequence[int],
        *,
        truncate: bool = False,
        inject=None,
        keep_inputs: bool = False,
        padding_side: str | None = None,
        pre_rope: bool = False,
    ) -> list[Capture]:
        """Tokenize the texts, run them through the model as one padded batch, and keep Q, K, V of
        `layers`: one Capture per text, its padding cut away.

        inject: a variant transform (q, k, scale) -> (q', k', scale') applied inside every
        attention layer, so its effect propagates; the capture then holds q', k', scale'.
        keep_inputs: also keep each selected layer's input X (for the raw variant).
        pre_rope: keep q and k as they were before rotary position embeddings.
        """
        ...


_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def parse_options(backend: str, options_type: type, given: Mapping[str, object]):
    """An `options_type` instance from what was given; keys may use - or _ ("d-model", "d_model")."""
    hints = typing.get_type_hints(options_type)
    known = [field.name for field in dataclasses.fields(options_type)]
    values = {}
    for key, value in given.items():
        name = key.strip().replace("-", "_")
        if name not in known:
            listed = ", ".join(known) if known else "none"
            raise BadInput(f"{backend} does not take the option {key!r}", f"its options: {listed}")
        values[name] = _coerce(value, hints[name], f"{backend} option {name}={value!r}")
    return options_type(**values)


def _coerce(value, annotation, what: str):
    """value as the annotated type (bool, int, float, str, Path, or one of them | None)."""
    kinds = [kind for kind in _members(annotation) if kind is not type(None)]
    if value is None and type(None) in _members(annotation):
        return None
    if any(isinstance(value, kind) and not (kind is int and isinstance(value, bool)) for kind in kinds):
        return value
    kind = kinds[0]
    if isinstance(value, str):
        text = value.strip()
        if kind is bool and text.lower() in _TRUE + _FALSE:
            return text.lower() in _TRUE
        if kind in (int, float):
            try:
                return kind(text)
            except ValueError:
                pass
        if kind is Path:
            return Path(text)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    names = {bool: "true or false", int: "a whole number", float: "a number", str: "text", Path: "a file path"}
    raise BadInput(f"{what}: expected {names.get(kind, kind.__name__)}")


def _members(annotation) -> tuple:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return typing.get_args(annotation)
    return (annotation,)
