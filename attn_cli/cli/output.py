"""What a command writes: the output options every command takes, declared once.

Typer reads a command's options from its signature, so each command would otherwise repeat
--json, -o, --save, --dpi and --scale (nine commands did). `@writes_output(...)` puts the ones the
command has into its signature where its `out: Output` parameter stands, and hands the command
one Output built from them. --save is repeatable: every file given is written, from one run.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from attn_cli.cli import options as opt

OUTPUT_PANEL = "Output"  # the output options, grouped in --help

FIGURE_FORMATS = (
    "FILE.svg (vector heatmaps with full labels, for papers), FILE.pdf or FILE.png (the same figure drawn; needs "
    "the \\[figures] extra) or FILE.html (one offline page: hover a cell or a label for its numbers)"
)


@dataclass(frozen=True)
class Output:
    """The output options of the command line: --json, -o FILE, --save FILE (repeatable), --dpi, --scale."""

    json: bool = False
    output: Path | None = None
    save: tuple[Path, ...] = ()
    dpi: int | None = None
    scale: opt.ColourScale = opt.ColourScale.fixed

    @property
    def json_wanted(self) -> bool:
        """--json, or -o FILE (which implies it)."""
        return self.json or self.output is not None

    @property
    def per_head(self) -> bool:
        """--scale head: weights coloured on each head's own scale."""
        return self.scale is opt.ColourScale.head

    def check(self, **more: Path | None) -> bool:
        """common.check_outputs for these options (more: other options' files by name); json_wanted."""
        from attn_cli.cli.common import check_outputs

        return check_outputs(self.save, self.json, self.output, self.dpi, **more)


def _json_option() -> Any:
    return Annotated[
        bool,
        typer.Option(
            "--json",
            metavar=opt.FLAG,
            rich_help_panel=OUTPUT_PANEL,
            help="Write one JSON document to stdout instead of tables.",
        ),
    ]


def _output_option() -> Any:
    return Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            rich_help_panel=OUTPUT_PANEL,
            help="Write the JSON document to this file (implies --json).",
        ),
    ]


def _save_option(help: str) -> Any:
    return Annotated[
        list[Path] | None,
        typer.Option(
            "--save",
            metavar="FILE",
            show_default=False,
            rich_help_panel=OUTPUT_PANEL,
            help=f"{help} Repeatable: every --save is written, from one run.",
        ),
    ]


def _dpi_option() -> Any:
    return Annotated[
        int | None,
        typer.Option(
            "--dpi",
            metavar="N",
            rich_help_panel=OUTPUT_PANEL,
            help="Pixels per inch of --save FILE.png. Default: 150. SVG and PDF are vector.",
        ),
    ]


def _scale_option() -> Any:
    return Annotated[
        opt.ColourScale,
        typer.Option(
            "--scale",
            metavar="SCALE",
            rich_help_panel=OUTPUT_PANEL,
            help="How weights become colours: fixed (0 → 1, the same for every head, so heads compare) or head "
            "(each head from its own smallest to its largest weight, so a broad head is not one flat colour). The "
            "legend says which.",
        ),
    ]


def figure_help(what: str) -> str:
    """--save's help for a command whose figure shows `what`."""
    return f"Also save a figure of {what}: {FIGURE_FORMATS}."


def writes_output(*, save: str | None = None, dpi: bool = True, scale: bool = True) -> Callable[[Callable], Callable]:
    """Give a command the output options in place of its `out: Output` parameter.

    save: --save's help (None: the command saves no figure, and so has no --dpi or --scale either);
    dpi: --dpi (a PNG figure's pixels); scale: --scale (how weights become colours)."""
    fields: dict[str, Any] = {  # name → an Annotated parameter type for Typer
        "json": _json_option(),
        "output": _output_option(),
    }
    if save is not None:
        fields["save"] = _save_option(save)
        if dpi:
            fields["dpi"] = _dpi_option()
        if scale:
            fields["scale"] = _scale_option()
    defaults = {field.name: field.default for field in dataclasses.fields(Output)}
    defaults["save"] = None  # Typer's default of a repeatable option

    def decorate(command: Callable) -> Callable:
        signature = inspect.signature(command, eval_str=True)
        shared = [
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=defaults[name], annotation=annotation)
            for name, annotation in fields.items()
        ]
        parameters = []
        for parameter in signature.parameters.values():
            # Typer calls commands with keywords only, so every parameter can be keyword-only.
            keyword = parameter.replace(kind=inspect.Parameter.KEYWORD_ONLY)
            parameters += shared if parameter.name == "out" else [keyword]
        if len(parameters) == len(signature.parameters):
            raise TypeError(f"{command.__name__} has no `out: Output` parameter")
        clash = set(fields) & (set(signature.parameters) - {"out"})
        if clash:
            raise TypeError(f"{command.__name__} declares output options itself: {', '.join(sorted(clash))}")

        @functools.wraps(command)
        def with_output(**given):
            chosen = {name: given.pop(name) for name in fields}
            chosen["save"] = unique(chosen.get("save") or ())
            return command(out=Output(**chosen), **given)

        with_output.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
        return with_output

    return decorate


def unique(paths: Sequence[Path]) -> tuple[Path, ...]:
    """The --save files in the order given, each once (the same file twice is one figure, written once)."""
    return tuple(dict.fromkeys(paths))
