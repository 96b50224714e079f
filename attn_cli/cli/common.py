"""The steps every command shares: read the text, run the core with a spinner, print or write."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Callable, Iterator

from rich.text import Text

from attn_cli import textio
from attn_cli.atomic import atomic_open
from attn_cli.cli.edge import stderr_console
from attn_cli.cli.options import PANEL_NAMES, Include
from attn_cli.errors import AttnError, BadInput


def read_text(text: str) -> str:
    """The argument itself, or stdin for '-'. Blank text, or text that is not valid UTF-8, is a usage error."""
    return textio.read_text(text)


def parse_panels(show: list[str] | None):
    """--show weights,top --show q → {Panel.weights, Panel.top, Panel.q}; None keeps the default view."""
    from attn_cli.render.terminal import Panel

    if not show:
        return None
    names = [name.strip().lower() for value in show for name in value.split(",") if name.strip()]
    if not names:
        raise BadInput("--show needs a panel name", f"choose from {', '.join(PANEL_NAMES)}")
    unknown = [name for name in names if name not in PANEL_NAMES]
    if unknown:
        raise BadInput(f"--show {unknown[0]!r} is not a panel", f"choose from {', '.join(PANEL_NAMES)}")
    return {Panel(name) for name in names}


def run_options(settings: dict, *, text: str, model, top_k, dtype, include, rows=None, cols=None,
                **given) -> dict:
    """RunOptions keyword arguments from the command line, with configs/defaults.toml filling the gaps."""
    from attn_cli.selection import parse_span

    return dict(
        text=read_text(text),
        model=model or settings["inspect"]["model"],
        top_k=settings["inspect"]["top_k"] if top_k is None else top_k,
        dtype=dtype.value,
        include_qkv=Include.qkv in (include or []),
        symmetry_tolerance=settings["symmetry"]["relative_tolerance"],
        matrix_cell_limit=settings["matrices"]["max_cells"],
        rows=parse_span(rows, "--rows"),
        cols=parse_span(cols, "--cols"),
        **given,
    )


def toy_settings(*, d_model=None, heads=None, layers=None, positions=None, seed=None, config=None, weights=None,
                 shared_projection=False, mask=None, valid_len=None, scoring=None) -> dict:
    """The toy flags that were given, as ToyConfig overrides (plus config and weights paths)."""
    settings = {"d_model": d_model, "heads": heads, "layers": layers, "positions": positions, "seed": seed,
                "config": config, "weights": weights, "valid_len": valid_len, "scoring": scoring,
                "shared_projection": True if shared_projection else None,
                "causal": None if mask is None else mask.value == "causal"}
    return {key: value for key, value in settings.items() if value is not None}


def run_and_emit(run: Callable, request, settings: dict, *, json_wanted: bool, output: Path | None,
                 save: Path | None, render: Callable, command: str) -> None:
    """Run the core, then write JSON (stdout or -o) or print render(report, width) (and --save it).

    run(request, progress, lazy): lazy reports are analysed while their JSON is written.
    """
    with progress_on_stderr(f"running {request.model} …") as progress:
        report = run(request, progress, json_wanted)
        warn_if_truncated(report)
        warn_about_matrices(report, request)
        if json_wanted:
            emit_json(report, output)
    if not json_wanted:
        emit_terminal(lambda width: render(report, width), save, settings["render"]["fallback_width"],
                      f"{command} · {report.model.name}")


@contextlib.contextmanager
def progress_on_stderr(label: str) -> Iterator[Callable[[int, int], None] | None]:
    """A transient progress bar over layers on stderr; None (silence) when stderr is not a terminal."""
    console = stderr_console()
    if not console.is_terminal:
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn

    # redirect_stdout=False: stdout carries the JSON document and must never pass through Rich.
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  console=console, transient=True, redirect_stdout=False, redirect_stderr=False) as progress:
        task = progress.add_task(label, total=None)

        def update(done: int, total: int) -> None:
            progress.update(task, description="analysing layers", completed=done, total=total)

        yield update


def warn_about_matrices(report, request) -> None:
    """Say on stderr when whole matrices were left out, or when --full makes them large."""
    reports = getattr(report, "reports", [report])
    if any(getattr(single, "matrices_left_out", False) for single in reports):
        stderr_console().print(Text(
            f"note: scores and weights left out: the selected heads × tokens² pass the "
            f"{request.matrix_cell_limit:,}-cell limit; every per-row statistic is complete. "
            "Use --rows/--cols for a window, or --full for whole matrices.", style="yellow"), soft_wrap=True)
    elif request.full:
        from attn_cli.core import select

        layers, heads = select(request, report.model)
        cells = sum(len(single.tokens) ** 2 for single in reports) * len(layers) * len(heads)
        if cells > request.matrix_cell_limit:
            stderr_console().print(Text(f"warning: --full keeps {cells:,} cells per matrix kind "
                                        f"(~{cells * 2 * 11 / 1e6:,.0f} MB of JSON)", style="yellow"), soft_wrap=True)



def check_outputs(save: Path | None, json_wanted: bool) -> None:
    """--save records the terminal view; fail before the model runs if it cannot be written."""
    if save is None:
        return
    from attn_cli.render.files import check_snapshot_path

    if json_wanted:
        raise BadInput("--save records the terminal view", "use -o FILE to write the JSON document")
    check_snapshot_path(save)


def warn_if_truncated(report) -> None:
    """A warning on stderr per text that --truncate cut. report: one report or an InspectBatch."""
    for single in getattr(report, "reports", [report]):
        if getattr(single, "truncated_from", None) is not None:
            stderr_console().print(Text(f"warning: text truncated from {single.truncated_from} tokens "
                                        f"to the model's {len(single.tokens)}", style="yellow"), soft_wrap=True)


def emit_json(report, output: Path | None) -> None:
    """The report's JSON document to stdout or -o FILE; reports that can stream, stream."""
    from attn_cli.render.files import stream_json, write_json

    def write(stream) -> None:
        if hasattr(report, "json_header"):
            stream_json(report, stream)
        else:
            write_json(report.to_json_dict(), stream)

    if output is None:
        write(sys.stdout)
        sys.stdout.flush()  # surface a closed pipe here, inside the edge, not at interpreter exit
        return
    try:
        with atomic_open(output, option="-o") as handle:
            write(handle)
    except OSError as error:
        raise AttnError(f"cannot write {output}: {error.strerror}") from None
    stderr_console().print(Text(f"wrote {output}", style="dim"))


def emit_terminal(render: Callable[[int], object], save: Path | None, fallback_width: int, title: str) -> None:
    """Print render(width) to stdout; with --save also write it as SVG/HTML."""
    from rich.console import Console

    from attn_cli.render.files import save_snapshot

    # A terminal (or COLUMNS) says how wide to be; a file or pipe gets the configured width.
    width = None if sys.stdout.isatty() or "COLUMNS" in os.environ else fallback_width
    console = Console(record=save is not None, width=width)
    console.print(render(console.width))
    if save is not None:
        save_snapshot(console, save, title=title)
        stderr_console().print(Text(f"saved {save}", style="dim"))
