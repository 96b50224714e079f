"""Read the TOML presets in configs/ (installed inside the wheel as attn_cli/_configs)."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


def config_dir() -> Path:
    """Where the presets live: inside the installed wheel, else the source checkout."""
    package = Path(__file__).resolve().parents[1]  # attn_cli/ (this file is attn_cli/plumbing/config.py)
    packaged = package / "_configs"
    return packaged if packaged.is_dir() else package.parent / "configs"


def docs_dir(package: Path = Path(__file__).resolve().parents[1]) -> Path:
    """Where the command pages live (docs/commands/NAME.md, what `attn docs NAME` shows): inside the installed
    wheel (attn_cli/_docs, pyproject's force-include), else the source checkout's docs/. package: attn_cli/."""
    packaged = package / "_docs"
    return packaged if packaged.is_dir() else package.parent / "docs"


@functools.cache
def defaults() -> dict:
    """configs/defaults.toml as a dict (read once per process)."""
    with open(config_dir() / "defaults.toml", "rb") as handle:
        return tomllib.load(handle)
