"""Where errors become messages and exit codes — here and nowhere else."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from typing import Iterator

import typer
from rich.console import Console
from rich.text import Text

from attn_cli.errors import AttnError


@functools.cache
def stderr_console() -> Console:
    """The one stderr console, so text printed while a progress bar is live lands above it.
    (Rich finds sys.stderr at each write, so a test that swaps the stream still sees the output.)"""
    return Console(stderr=True)


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Turn AttnError into one red line on stderr and its exit code (a traceback with ATTN_DEBUG=1)."""
    try:
        yield
    except BrokenPipeError:
        reader_went_away()
    except AttnError as error:
        if os.environ.get("ATTN_DEBUG"):
            raise
        line = Text.assemble(("error: ", "bold red"), (error.message, "red"))
        if error.hint:
            line.append(f"; {error.hint}")
        stderr_console().print(line, soft_wrap=True)  # one line, however wide the terminal
        raise typer.Exit(error.exit_code) from None


def reader_went_away() -> None:
    """The reader closed the pipe (`attn ... | head`): not our failure, so exit 0, quietly."""
    _silence_stdout()
    raise typer.Exit(0)


def _silence_stdout() -> None:
    """Point stdout at devnull so the interpreter's final flush does not raise again."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def run_at_the_edge(app) -> None:
    """Run the Typer app. Usage errors Typer finds itself (unknown option, missing argument) get the
    same one-line form as ours; a closed pipe outside a command (help text) ends quietly too."""
    from typer.exceptions import TyperException

    try:
        code = app(standalone_mode=False)
    except TyperException as error:
        message = error.format_message().rstrip(".")
        if not message:  # `attn` alone: the help was the answer
            sys.exit(getattr(error, "exit_code", 2))
        context = getattr(error, "ctx", None)
        line = Text.assemble(("error: ", "bold red"), (message, "red"))
        if context is not None:
            line.append(f"; see '{context.command_path} --help'")
        stderr_console().print(line, soft_wrap=True)
        sys.exit(getattr(error, "exit_code", 2))
    except typer.Abort:
        sys.exit(1)
    except BrokenPipeError:
        _silence_stdout()
        sys.exit(0)
    sys.exit(code if isinstance(code, int) else 0)
