"""`attn inspect TEXT`: one model run, every selected head's attention."""

from __future__ import annotations

import os
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from attn_cli.cli.edge import stderr_console, user_errors
from attn_cli.errors import AttnError, BadInput


class DType(str, Enum):
    auto = "auto"
    float32 = "float32"
    float16 = "float16"
    bfloat16 = "bfloat16"


class Include(str, Enum):
    qkv = "qkv"


PANEL_NAMES = ("overview", "weights", "scores", "q", "k", "v", "symmetry", "top")


def inspect_command(
    text: Annotated[str, typer.Argument(help="The text to inspect; - reads it from stdin.", show_default=False)],
    model: Annotated[Optional[str], typer.Option("--model", "-m", envvar="ATTN_MODEL",
        help="minilm (bundled), a local Hugging Face model directory, or a hub id in the HF cache.")] = None,
    layer: Annotated[str, typer.Option("--layer", "-l", help="Layers: 3, 0,2, 1-4 or all.")] = "all",
    head: Annotated[str, typer.Option("--head", "-H", help="Heads: 3, 0,2, 1-4 or all.")] = "all",
    top_k: Annotated[Optional[int], typer.Option("--top-k", "-k", help="Most-attended keys per query. [default: 3]")] = None,
    show: Annotated[Optional[list[str]], typer.Option("--show", "-s",
        help=f"Panels, comma-separated or repeated: {', '.join(PANEL_NAMES)}. "
             "[default: overview and one head in detail]")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Write one JSON document to stdout instead of tables.")] = False,
    include: Annotated[Optional[list[Include]], typer.Option("--include",
        help="Extra JSON fields: qkv adds q, k, v and output per head.")] = None,
    output: Annotated[Optional[Path], typer.Option("--output", "-o",
        help="Write the JSON document to this file (implies --json).")] = None,
    save: Annotated[Optional[Path], typer.Option("--save",
        help="Also save the terminal view as FILE.svg or FILE.html.")] = None,
    device: Annotated[str, typer.Option("--device", "-d", envvar="ATTN_DEVICE",
        help="auto, cpu, cuda, cuda:N or mps. auto picks CUDA, then MPS, then CPU.")] = "auto",
    dtype: Annotated[DType, typer.Option("--dtype", help="Model weights dtype; auto keeps the saved one. "
        "Analysis is always float32.")] = DType.auto,
    truncate: Annotated[bool, typer.Option("--truncate",
        help="Cut text longer than the model's positions instead of failing.")] = False,
    allow_pickle: Annotated[bool, typer.Option("--allow-pickle",
        help="Allow pickle checkpoints (pytorch_model.bin). Pickles can run code: only for sources you trust.")] = False,
) -> None:
    """Show a transformer's attention for TEXT: weights heatmaps, symmetry and top-attended tokens."""
    from attn_cli.config import defaults

    with user_errors():
        settings = defaults()
        panels = parse_panels(show)
        if save is not None:
            from attn_cli.render.files import check_snapshot_path

            if as_json or output is not None:
                raise BadInput("--save records the terminal view", "use -o FILE to write the JSON document")
            check_snapshot_path(save)
        request = build_request(
            read_text(text), model or settings["inspect"]["model"], layer, head,
            settings["inspect"]["top_k"] if top_k is None else top_k, device, dtype.value,
            include_qkv=Include.qkv in (include or []), truncate=truncate, allow_pickle=allow_pickle,
            symmetry_tolerance=settings["symmetry"]["relative_tolerance"],
        )
        report = run_with_status(request, quiet=as_json or output is not None)
        if report.truncated_from is not None:
            stderr_console().print(f"warning: text truncated from {report.truncated_from} tokens "
                                   f"to the model's {len(report.tokens)}", style="yellow")
        if as_json or output is not None:
            emit_json(report.to_json_dict(), output)
        else:
            emit_terminal(report, panels, save, settings["render"]["fallback_width"])


def build_request(text, model, layer, head, top_k, device, dtype, **options):
    from attn_cli.core import InspectRequest

    return InspectRequest(text=text, model=model, layers=layer, heads=head, top_k=top_k,
                          device=device, dtype=dtype, **options)


def read_text(text: str) -> str:
    """The argument itself, or stdin for '-'. Blank text is a usage error."""
    if text == "-":
        text = sys.stdin.read().rstrip("\n")
    if not text.strip():
        raise BadInput("the text is empty", "pass a sentence, or - to read it from stdin")
    return text


def parse_panels(show: list[str] | None):
    """--show weights,top --show q → {Panel.weights, Panel.top, Panel.q}; None keeps the default view."""
    from attn_cli.render.terminal import Panel

    if not show:
        return None
    names = [name.strip().lower() for value in show for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in PANEL_NAMES]
    if unknown:
        raise BadInput(f"--show {unknown[0]!r} is not a panel", f"choose from {', '.join(PANEL_NAMES)}")
    return {Panel(name) for name in names}


def run_with_status(request, quiet: bool):
    """Run the core, with a spinner on stderr only when stderr is a terminal."""
    from attn_cli.core import run_inspect

    console = stderr_console()
    if quiet or not console.is_terminal:
        return run_inspect(request)
    with console.status(f"running {request.model} …"):
        return run_inspect(request)


def emit_json(document: dict, output: Path | None) -> None:
    from attn_cli.render.files import write_json

    if output is None:
        write_json(document, sys.stdout)
        sys.stdout.flush()  # surface a closed pipe here, inside the edge, not at interpreter exit
        return
    try:
        with open(output, "w", encoding="utf-8") as handle:
            write_json(document, handle)
    except OSError as error:
        raise AttnError(f"cannot write {output}: {error.strerror}") from None
    stderr_console().print(f"wrote {output}", style="dim")


def emit_terminal(report, panels, save: Path | None, fallback_width: int) -> None:
    from rich.console import Console

    from attn_cli.render.files import save_snapshot
    from attn_cli.render.terminal import render_report

    # A terminal (or COLUMNS) says how wide to be; a file or pipe gets the configured width.
    width = None if sys.stdout.isatty() or "COLUMNS" in os.environ else fallback_width
    console = Console(record=save is not None, width=width)
    width = console.width
    console.print(render_report(report, panels, width))
    if save is not None:
        save_snapshot(console, save, title=f"attn inspect · {report.model.name}")
        stderr_console().print(f"saved {save}", style="dim")
