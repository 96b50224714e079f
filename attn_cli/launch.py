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
    file attn opens can land on them, and a closed stdout made an error to write to. Idempotent."""
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
