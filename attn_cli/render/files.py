"""Write reports to files and streams: JSON documents, SVG/HTML snapshots of the terminal view."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path
from typing import TextIO

from attn_cli.errors import BadInput

SNAPSHOT_FORMATS = (".svg", ".html", ".htm")


def write_json(document: dict, stream: TextIO) -> None:
    """One JSON document and a newline. allow_nan=False: masked values are already null."""
    json.dump(document, stream, ensure_ascii=False, allow_nan=False)
    stream.write("\n")


def stream_json(report, stream: TextIO) -> None:
    """Write a report's document layer by layer as the layers are analysed, then a newline.

    report: an InspectReport, or an InspectBatch of them ("sequences"). The text equals
    json.dumps(report.to_json_dict()), but no more than one layer's dict exists at a time.
    """
    _stream_report(report, stream)
    stream.write("\n")


def _stream_report(report, stream: TextIO) -> None:
    if hasattr(report, "reports"):  # InspectBatch: {"...", "sequences": [doc, doc]}
        _stream_list(stream, report.json_header(), "sequences", report.reports,
                     lambda single: _stream_report(single, stream))
    else:  # layers are analysed as this loop asks for them (a lazy report)
        _stream_list(stream, report.json_header(), "layers", report.layers,
                     lambda layer: stream.write(_layer_text(layer)))


def _stream_list(stream: TextIO, header: dict, key: str, items, write_item) -> None:
    stream.write(_dumps(header)[:-1] + f', "{key}": [')  # the header object, left open
    for index, item in enumerate(items):
        if index:
            stream.write(", ")
        write_item(item)
    stream.write("]}")


def _layer_text(layer) -> str:
    """A layer's JSON text; matrices are formatted straight to text (the slow part of big documents)."""
    from attn_cli.report import head_json, head_matrices

    heads = []
    for head in layer.heads:
        text = _dumps(head_json(head, matrices=False))[:-1]  # the record, left open
        for name, rows in head_matrices(head):
            text += f', "{name}": ' + _matrix_text(rows)
        heads.append(text + "}")
    return f'{{"layer": {layer.layer}, "heads": [{", ".join(heads)}]}}'


def _matrix_text(rows) -> str:
    """Rows of floats as JSON: 7 significant digits like report._num, null for masked or non-finite."""
    return "[" + ", ".join(
        "[" + ", ".join(f"{v:.7g}" if v is not None and math.isfinite(v) else "null" for v in row) + "]"
        for row in rows
    ) + "]"


def _dumps(value) -> str:
    return json.dumps(value, ensure_ascii=False, allow_nan=False)


def check_snapshot_path(path: Path) -> None:
    """Fail before the model runs, not after, when --save names a format we cannot write."""
    if path.suffix.lower() not in SNAPSHOT_FORMATS:
        raise BadInput(f"--save {path}: unknown format {path.suffix or '(none)'!r}", "use a .svg or .html file")
    from attn_cli.atomic import check_writable

    check_writable(path, "--save")


def save_snapshot(console, path: Path, title: str) -> None:
    """Save what a recording Console printed, as SVG or HTML by the file's extension."""
    from attn_cli.atomic import atomic_path

    with atomic_path(path, "--save") as temp:
        if path.suffix.lower() == ".svg":
            console.save_svg(str(temp), title=title)
        else:
            console.save_html(str(temp))


def save_tensors(report, path: Path) -> None:
    """The selected heads' tensors as safetensors, named layers.L.heads.H.{q,k,v,output,scores,weights}.

    Masked scores are NaN. Metadata (strings, as safetensors requires): text, tokens and
    model as JSON, and per head its kv head, scale and window.
    """
    import torch
    from safetensors.torch import save_file

    tensors, heads = {}, {}
    for layer, head in report.heads():
        prefix = f"layers.{layer}.heads.{head.head}"
        for name, rows in (*head.tensors.items(), ("scores", head.scores), ("weights", head.weights)):
            if rows is not None:
                tensors[f"{prefix}.{name}"] = torch.tensor(
                    [[float("nan") if x is None else x for x in row] for row in rows], dtype=torch.float32)
        heads[prefix] = {"kv_head": head.kv_head, "scale": head.scale, "window": head.window}
    metadata = {
        "text": report.text,
        "tokens": _dumps([token.text for token in report.tokens]),
        "model": _dumps(asdict(report.model)),
        "heads": _dumps(heads),
        "attn_schema_version": "1",
    }
    from attn_cli.atomic import atomic_path

    try:
        with atomic_path(path, "--save-tensors") as temp:
            save_file(tensors, str(temp), metadata=metadata)
    except OSError as error:
        from attn_cli.errors import AttnError

        raise AttnError(f"cannot write {path}: {error.strerror}") from None
