"""Write reports to files and streams: JSON documents, SVG/HTML snapshots of the terminal view."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TextIO

from attn_cli.errors import BadInput

SNAPSHOT_FORMATS = (".svg", ".html", ".htm")


def write_json(document: dict, stream: TextIO) -> None:
    """One JSON document and a newline. allow_nan=False: masked values are already null."""
    json.dump(document, stream, ensure_ascii=False, allow_nan=False)
    stream.write("\n")


def check_snapshot_path(path: Path) -> None:
    """Fail before the model runs, not after, when --save names a format we cannot write."""
    if path.suffix.lower() not in SNAPSHOT_FORMATS:
        raise BadInput(f"--save {path}: unknown format {path.suffix or '(none)'!r}", "use a .svg or .html file")
    if not path.parent.exists():
        raise BadInput(f"--save {path}: directory {path.parent} does not exist")


def save_snapshot(console, path: Path, title: str) -> None:
    """Save what a recording Console printed, as SVG or HTML by the file's extension."""
    if path.suffix.lower() == ".svg":
        console.save_svg(str(path), title=title)
    else:
        console.save_html(str(path))
