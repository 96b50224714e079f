"""A terminal is never drawn wider than it is: a COLUMNS larger than the terminal (inherited into a
narrower tmux pane, or stale after a resize) used to have Rich draw 120-column lines into an 80-column
screen, which wrapped them mid-word. Checked on a pseudo-terminal of a known size."""

from __future__ import annotations

import fcntl
import io
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest
from conftest import patience
from rich.cells import cell_len

from attn_cli.launch import fit_to_terminal

ROOT = Path(__file__).resolve().parent.parent


def terminal(columns: int, lines: int) -> tuple[int, int]:
    """A pseudo-terminal (master, slave) whose window is columns × lines."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", lines, columns, 0, 0))
    return master, slave


@pytest.mark.parametrize(
    "given, expected",
    [
        ({"COLUMNS": "120", "LINES": "100"}, {"COLUMNS": "80", "LINES": "24"}),  # wider and taller than the screen
        ({"COLUMNS": "60", "LINES": "10"}, {"COLUMNS": "60", "LINES": "10"}),  # narrower: the user's choice
        ({}, {}),  # neither set: Rich asks the terminal itself
        ({"COLUMNS": "wide"}, {"COLUMNS": "wide"}),  # not a number: Rich ignores it too
    ],
)
def test_columns_and_lines_are_lowered_to_the_terminal(given, expected):
    master, slave = terminal(80, 24)
    try:
        with open(slave, "w", closefd=False) as stream:
            environ = dict(given)
            fit_to_terminal(environ, stream)
        assert environ == expected
    finally:
        os.close(master)
        os.close(slave)


def test_a_file_or_pipe_keeps_columns_as_given(tmp_path):
    environ = {"COLUMNS": "120"}
    with open(tmp_path / "out.txt", "w") as stream:
        fit_to_terminal(environ, stream)
    fit_to_terminal(environ, io.StringIO())
    fit_to_terminal(environ, None)
    assert environ == {"COLUMNS": "120"}


def read_all(master: int, process: subprocess.Popen, timeout: float = 120) -> str:
    """Everything the process writes to the terminal until it exits."""
    chunks = []
    while True:
        ready, _, _ = select.select([master], [], [], patience(timeout))
        if not ready:
            process.kill()
            raise AssertionError(f"no output for {timeout} s")
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the slave side closed: the process is gone
            break
        if not chunk:
            break
        chunks.append(chunk)
    process.wait(timeout=patience(timeout))
    return b"".join(chunks).decode("utf-8")


def test_help_in_an_80_column_terminal_with_columns_120_fits_80_columns():
    """`attn circuits --help` (Typer's Rich help) on an 80-column terminal whose environment says COLUMNS=120.
    Without the fit every boxed line is 120 cells and the terminal wraps it mid-word."""
    master, slave = terminal(80, 50)
    env = {**os.environ, "COLUMNS": "120", "PYTHONPATH": str(ROOT), "TERM": "xterm"}
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "attn_cli", "circuits", "--help"],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            cwd=ROOT,
        )
        os.close(slave)
        slave = -1
        output = read_all(master, process)
    finally:
        os.close(master)
        if slave >= 0:
            os.close(slave)
    assert process.returncode == 0, output
    lines = re.sub(r"\x1b\[[0-9;]*m", "", output).replace("\r", "").splitlines()  # no styles
    assert any("--save" in line for line in lines)
    assert max(cell_len(line) for line in lines) == 80  # the boxes span the terminal, no wider
