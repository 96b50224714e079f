"""The process around the CLI: signal handlers and the standard streams, set up before anything else
is imported, so that Ctrl-C or SIGTERM in the first fraction of a second is handled like any later.

Entry points: `attn` (pyproject's console script) and `python -m attn_cli` call main().
"""

from __future__ import annotations

import errno
import io
import os
import sys

from attn_cli.plumbing import interrupts

_prepared = False


class _ClosedStdout(io.TextIOWrapper):
    """stdout when the process was started with it closed (`attn … >&-`): writing anything is an error."""

    def write(self, text: str) -> int:
        if text:
            raise OSError(errno.EBADF, "stdout is closed")
        return 0

    def isatty(self) -> bool:
        return False


def prepare_process() -> None:
    """SIGTERM as an exception (cleanups run); closed descriptors 0–2 reopened on /dev/null so that no
    file attn opens can land on them, a closed stdout made an error to write to, and COLUMNS and LINES
    no larger than a terminal stdout is. Idempotent."""
    global _prepared
    if _prepared:
        return
    _prepared = True
    interrupts.install()
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            devnull = os.open(os.devnull, os.O_RDWR)
            if devnull != fd:
                os.dup2(devnull, fd)
                os.close(devnull)
    if sys.stdout is None:
        sys.stdout = _ClosedStdout(open(1, "wb", closefd=False), encoding="utf-8")
    if sys.stderr is None:  # nowhere to report to; the exit code still tells
        sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False)
    fit_to_terminal(os.environ, sys.stdout)


def fit_to_terminal(environ, stream) -> None:
    """Lower COLUMNS and LINES in environ to the size of the terminal stream is, when they exceed it.
    Rich (tables, help) takes COLUMNS over the terminal's own size; an inherited or stale one (exported
    by a shell, then carried into a narrower tmux pane) would draw every line wider than the screen, and
    the terminal would wrap them mid-word. A smaller value is the user's choice and stays; a file or pipe
    keeps COLUMNS as given (it is how wide a file's tables are)."""
    try:
        if not stream.isatty():
            return
        size = os.get_terminal_size(stream.fileno())
    except (AttributeError, ValueError, OSError):  # no stream, a closed one, or no size to read
        return
    for name, cells in (("COLUMNS", size.columns), ("LINES", size.lines)):
        value = environ.get(name, "").strip()
        if value.isdigit() and cells > 0 and int(value) > cells:
            environ[name] = str(cells)


def main() -> None:
    """Run `attn`: prepare the process, then import and run the CLI at its edge."""
    try:
        prepare_process()
        from attn_cli.cli import app
        from attn_cli.cli.edge import run_at_the_edge
    except KeyboardInterrupt as interrupt:  # during the imports: the edge is not there yet
        code = interrupts.exit_code(interrupt)
        sys.stderr.write("error: interrupted\n" if code == 130 else "error: terminated\n")
        sys.exit(code)
    run_at_the_edge(app)
