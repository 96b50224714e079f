"""Where errors become messages and exit codes — here and nowhere else.

Every failure ends as exactly one line on stderr (`error: …`) and an exit code: 1 a runtime failure,
2 bad usage, 130 interrupted (SIGINT), 143 terminated (SIGTERM; 129 SIGHUP), 0 when the reader of stdout went
away. ATTN_DEBUG=1 adds the traceback above that line; the exit code stays the same. Exceptions of the
libraries underneath (safetensors, huggingface_hub, transformers, the OS) are mapped here by class, so
the code below needs no try/except of its own for them.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import sys
import warnings
from collections.abc import Iterator

import typer
from rich.console import Console
from rich.text import Text

from attn_cli.plumbing import interrupts
from attn_cli.plumbing.errors import AttnError

_UTF8 = ("utf8", "utf-8", "utf_8")


@functools.cache
def stderr_console() -> Console:
    """The one stderr console, so text printed while a progress bar is live lands above it.
    (Rich finds sys.stderr at each write, so a test that swaps the stream still sees the output.)"""
    return Console(stderr=True)


class ReaderGone(Exception):
    """Rich found stdout's reader gone (a closed pipe); raised instead of Rich's own SystemExit(1)."""


def describe(error: BaseException) -> tuple[str, str | None, int]:
    """(message, hint, exit code) for any exception; the message is one line."""
    if isinstance(error, AttnError):
        return _one_line(error.message), error.hint and _one_line(error.hint), error.exit_code
    if isinstance(error, KeyboardInterrupt):
        code = interrupts.exit_code(error)
        return ("interrupted" if code == 130 else "terminated"), None, code
    if isinstance(error, UnicodeEncodeError) and (error.encoding or "").lower() not in _UTF8:
        char = error.object[error.start] if isinstance(error.object, str) else "?"
        return (
            f"the output encoding {error.encoding} cannot write {ascii(char)}",
            "use a UTF-8 locale or PYTHONIOENCODING=utf-8, or -o FILE",
            1,
        )
    if isinstance(error, OSError):
        if error.errno == errno.EBADF and error.filename is None:
            return "cannot write to stdout: it is closed", "redirect it to a file or /dev/null, or use -o FILE", 1
        where = f" ({error.filename})" if error.filename else ""
        return f"{error.strerror or _one_line(error)}{where}", None, 1
    if isinstance(error, MemoryError) or type(error).__name__ == "OutOfMemoryError":
        return "out of memory", "use fewer tokens, layers or heads, or a smaller --dtype", 1
    name = type(error).__name__
    if name == "SafetensorError":
        return f"cannot read or write a .safetensors file: {_one_line(error)}", None, 1
    if name == "HFValidationError":
        return f"not a valid model directory or hub id: {_one_line(error)}", None, 1
    if name == "UnpicklingError":
        return f"cannot read the pickle checkpoint: {_one_line(error)}", None, 1
    return f"unexpected {name}: {_short(_one_line(error))}", "ATTN_DEBUG=1 shows the traceback", 1


def fail(error: BaseException) -> typer.Exit:
    """Print error as one red line (after its traceback with ATTN_DEBUG=1); the Exit to raise."""
    swallowed = interrupts.last_raised()
    if swallowed is not None:  # a library swallowed the interrupt; what broke next is its echo
        error = swallowed
    message, hint, code = describe(error)
    if isinstance(error, KeyboardInterrupt):
        interrupts.reported()
    if os.environ.get("ATTN_DEBUG"):
        import traceback

        traceback.print_exception(type(error), error, error.__traceback__, file=sys.stderr)
    line = Text.assemble(("error: ", "bold red"), (message, "red"))
    if hint:
        line.append(f"; {hint}")
    with contextlib.suppress(Exception):
        stderr_console().print(line, soft_wrap=True)  # one line, however wide the terminal
    return typer.Exit(code)


def _is_control_flow(error: BaseException) -> bool:
    """Typer's own exits, aborts and usage errors pass through to run_at_the_edge."""
    from typer.exceptions import Abort, Exit, TyperException

    return isinstance(error, (SystemExit, GeneratorExit, Exit, Abort, TyperException))


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Turn any error of a command into one line on stderr and its exit code; a library's warning into
    one `warning: …` line."""
    shown = warnings.showwarning
    warnings.showwarning = show_warning
    try:
        yield
    except (BrokenPipeError, ReaderGone):
        reader_went_away()
    except BaseException as error:
        if _is_control_flow(error):
            raise
        raise fail(error) from None
    finally:
        warnings.showwarning = shown


def show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """warnings.showwarning as one line (`warning: …`) above any progress bar. Python's own form is two
    lines, the second the library's source line (torch.load's "Detected pickle protocol 3 …")."""
    with contextlib.suppress(Exception):
        stderr_console().print(Text(f"warning: {_one_line(message)}", style="yellow"), soft_wrap=True)


def reader_went_away() -> None:
    """The reader closed the pipe (`attn ... | head`): not our failure, so exit 0, quietly."""
    _silence_stdout()
    raise typer.Exit(0)


def _silence_stdout() -> None:
    """Point stdout at devnull so the interpreter's final flush does not raise again."""
    with contextlib.suppress(Exception):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _rich_reader_gone(self) -> None:
    self.quiet = True
    raise ReaderGone()


def run_at_the_edge(app) -> None:
    """Run the Typer app. Usage errors Typer finds itself (unknown option, missing argument) get the
    same one-line form as ours; a closed pipe outside a command (help text) ends quietly too. The process
    around it (signals, the standard streams) is launch.prepare_process's, done before this is imported."""
    from typer.exceptions import TyperException

    # Rich's default exits 1 on a closed pipe (`attn --help | head`): replaced on the class, on purpose
    Console.on_broken_pipe = _rich_reader_gone  # type: ignore[method-assign]
    try:
        code = app(standalone_mode=False)
    except TyperException as error:
        message = _one_line(error.format_message()).rstrip(".")
        if not message:  # `attn` alone: the help was the answer
            sys.exit(getattr(error, "exit_code", 2))
        context = getattr(error, "ctx", None)
        line = Text.assemble(("error: ", "bold red"), (message, "red"))
        if context is not None:
            line.append(f"; see '{context.command_path} --help'")
        stderr_console().print(line, soft_wrap=True)
        sys.exit(getattr(error, "exit_code", 2))
    except typer.Abort as error:
        cause = error.__cause__ or error.__context__
        sys.exit(fail(cause).exit_code if isinstance(cause, KeyboardInterrupt) else 1)
    except (BrokenPipeError, ReaderGone):
        _silence_stdout()
        sys.exit(0)
    except SystemExit:
        raise
    except BaseException as error:  # outside a command: help text to a closed stdout, an interrupt …
        sys.exit(fail(error).exit_code)
    swallowed = interrupts.last_raised()
    if swallowed is not None:  # Typer's bare Exit(130), or an interrupt a library swallowed
        sys.exit(fail(swallowed).exit_code)
    sys.exit(code if isinstance(code, int) else 0)


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def _short(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
