"""Checks of the toy model's inputs, as small pure functions: its config file, the sizes of its
settings, and its weights (finite numbers only). Each failure is one line: BadInput (exit 2) for
settings, AttnError (exit 1) for a weights file."""

from __future__ import annotations

import sys
from pathlib import Path

from attn_cli.plumbing.errors import AttnError, BadInput

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

# Sizes past these would take minutes or all memory (d_model² per projection, layers × heads × T²).
LIMITS = {"d_model": 4096, "heads": 256, "layers": 64, "additive_hidden": 4096, "valid_len": 1 << 31}
SEED_RANGE = (0, 2**63 - 1)
MAX_TOKENS = 4096  # the toy has no position limit of its own; T² scores per head must fit in memory


def read_toml_table(path: Path, table: str = "toy") -> dict:
    """The [table] of a TOML file as a dict; unreadable, not UTF-8, not TOML, or not a table: BadInput."""
    try:
        data = Path(path).read_bytes()
    except OSError as error:
        raise BadInput(f"config {path}: {error.strerror or error}") from None
    try:
        document = tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise BadInput(f"config {path} is not UTF-8: byte 0x{data[error.start]:02x} at offset {error.start}") from None
    except tomllib.TOMLDecodeError as error:
        raise BadInput(f"config {path}: {' '.join(str(error).split())}") from None
    values = document.get(table, {})
    if not isinstance(values, dict):
        raise BadInput(f"config {path}: [{table}] must be a table of settings")
    return values


def check_sizes(values: dict) -> None:
    """Settings whose size would take minutes or all memory, and seeds torch cannot take. (Their types
    are checked where every backend option is: backends/base.py.)"""
    for name, limit in LIMITS.items():
        value = values.get(name)
        if value is not None and not 0 <= value <= limit:
            raise BadInput(f"toy setting {name} = {value} is out of range", f"use 0 to {limit}")
    seed = values.get("seed")
    if seed is not None and not SEED_RANGE[0] <= seed <= SEED_RANGE[1]:
        raise BadInput(f"toy seed {seed} is out of range", f"use {SEED_RANGE[0]} to {SEED_RANGE[1]}")


def check_finite_weights(weights: dict, path: Path) -> None:
    """Weights with NaN or Inf make every number after them meaningless: refuse them (exit 1)."""
    import torch

    for name, tensor in weights.items():
        bad = (~torch.isfinite(tensor)).sum().item()
        if bad:
            raise AttnError(
                f"toy weights {path}: {name} holds {bad} NaN or infinite value(s)",
                "every weight must be a finite number",
            )


def check_token_count(token_lists: list[list[str]]) -> None:
    """The toy keeps every score matrix in memory: at most MAX_TOKENS tokens a text."""
    from attn_cli.plumbing.errors import InputTooLong

    longest = max((len(tokens) for tokens in token_lists), default=0)
    if longest > MAX_TOKENS:
        raise InputTooLong(f"the text is {longest} tokens but the toy takes at most {MAX_TOKENS}", "shorten it")
