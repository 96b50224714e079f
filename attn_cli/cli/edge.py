"""Where errors become messages and exit codes — here and nowhere else."""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Iterator

import typer
from rich.console import Console
from rich.text import Text

from attn_cli.errors import AttnError


def stderr_console() -> Console:
    return Console(stderr=True)


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Turn AttnError into one red line on stderr and its exit code (a traceback with ATTN_DEBUG=1)."""
    try:
        yield
    except AttnError as error:
        if os.environ.get("ATTN_DEBUG"):
            raise
        console = stderr_console()
        console.print(Text.assemble(("error: ", "bold red"), (error.message, "red")), soft_wrap=True)
        if error.hint:
            console.print(Text(f"  hint: {error.hint}"), soft_wrap=True)
        raise typer.Exit(error.exit_code) from None


def run_at_the_edge(app) -> None:
    """Run the Typer app; a reader that closed the pipe early (`| head`) ends the run quietly."""
    try:
        app()
    except BrokenPipeError:
        # Point stdout at devnull so the interpreter's final flush does not raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(0)
