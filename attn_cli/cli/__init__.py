"""The `attn` command line. Thin: parse options → build a request → call the core → render.

Importing this module must not import torch or transformers, so `attn --help`
is instant; commands import the core inside their bodies.
"""

from __future__ import annotations

import typer

from attn_cli import __version__
from attn_cli.cli.edge import run_at_the_edge
from attn_cli.cli.compare import EPILOG as COMPARE_EPILOG
from attn_cli.cli.compare import compare_command
from attn_cli.cli.heads import EPILOG as HEADS_EPILOG
from attn_cli.cli.heads import heads_command
from attn_cli.cli.inspect import EPILOG as INSPECT_EPILOG
from attn_cli.cli.inspect import inspect_command
from attn_cli.cli.models import EPILOG as MODELS_EPILOG
from attn_cli.cli.models import models_command
from attn_cli.cli.steps import EPILOG as STEPS_EPILOG
from attn_cli.cli.steps import steps_command

app = typer.Typer(
    name="attn",
    help="See what attention does with your sentence: Q, K, V, scores, weights and symmetry of every head.",
    no_args_is_help=True,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.command("inspect", epilog=INSPECT_EPILOG)(inspect_command)
app.command("compare", epilog=COMPARE_EPILOG)(compare_command)
app.command("steps", epilog=STEPS_EPILOG)(steps_command)
app.command("models", epilog=MODELS_EPILOG)(models_command)
app.command("heads", epilog=HEADS_EPILOG)(heads_command)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"attn {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version."),
) -> None:
    """See what attention does with your sentence."""


def main() -> None:
    """Console entry point: run the app, turning closed pipes into a quiet exit."""
    run_at_the_edge(app)
