"""The progress bar on stderr, seen on a real terminal (a tmux pane): it never stays on screen, and a
reader of stdout that answers as soon as the document is complete (jq does) prints on a clean line."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import needs_program, patience

ROOT = Path(__file__).resolve().parents[1]
ANSWER = "0.1767767"  # layer 0 head 0's scale, 1/√32, as the JSON writes it


def pane_after(command: str, tmp_path: Path, *, timeout: float = 240) -> list[str]:
    """The lines of an 80 × 20 tmux pane after `command` ran in it (on this session's own tmux server)."""
    socket = f"attn-test-{os.getpid()}"
    config = tmp_path / "tmux.conf"
    config.write_text("")
    tmux = ["tmux", "-L", socket, "-f", str(config)]
    subprocess.run(
        [
            *tmux,
            "new-session",
            "-d",
            "-x",
            "80",
            "-y",
            "20",
            "-c",
            str(tmp_path),
            "env PS1='$ ' bash --norc --noprofile",
        ],
        check=True,
    )
    # Typed at an interactive shell, as a user would: the pipeline runs as a job in the foreground.
    subprocess.run([*tmux, "send-keys", f"{command}; echo DONE", "Enter"], check=True)
    try:
        deadline = time.monotonic() + patience(timeout)
        while time.monotonic() < deadline:
            lines = subprocess.run([*tmux, "capture-pane", "-p"], capture_output=True, text=True).stdout.split("\n")
            if "DONE" in lines:
                return lines
            time.sleep(0.1)
        pytest.fail(f"the command did not finish in {timeout:.0f} s; the pane:\n" + "\n".join(lines))
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)


@pytest.mark.slow
def test_a_pipe_readers_answer_lands_on_its_own_line_under_load(tmp_path):
    needs_program("tmux", "the bar needs a real terminal")
    # The reader answers as soon as the document is complete, not at end of file: jq, the user's case
    # (a C program, quick enough to print while the bar is still up), else Python reading the line.
    python = shlex.quote(sys.executable)
    reader = (
        "jq '.layers[0].heads[0].scale'"
        if shutil.which("jq")
        else f"{python} -c "
        + shlex.quote("import json,sys; print(json.loads(sys.stdin.readline())['layers'][0]['heads'][0]['scale'])")
    )
    command = (
        f"env PYTHONPATH={shlex.quote(str(ROOT))} HF_HUB_OFFLINE=1 {python} -m attn_cli inspect "
        f"'Hello, how are you?' --json | {reader}"
    )
    # Load, so that the bar is drawn while layers run; at the lowest priority, so that it takes only a core that
    # would sit idle and does not slow the rest of the suite. Once: the order of the bar's clear and stdout's
    # writes, which decides this race, is checked every time by the deterministic twin below.
    busy = subprocess.Popen(["nice", "-n", "19", sys.executable, "-c", "while 1: pass"])
    try:
        lines = pane_after(command, tmp_path)
    finally:
        busy.kill()
        busy.wait()
    shown = "\n".join(lines)
    assert [line.strip() for line in lines].count(ANSWER) == 1, f"the answer is not on its own line:\n{shown}"
    assert "━" not in shown and "analysing" not in shown, f"the bar stayed on screen:\n{shown}"


class LazyReport:
    """A report whose JSON moves the bar as it is written, as a lazy inspect report does."""

    model = None

    def __init__(self, progress):
        self.progress = progress

    def json_chunks(self):
        yield '{"layers": ['
        for layer in range(3):
            self.progress(layer, 3)
            yield f'{{"layer": {layer}}}' + ("," if layer < 2 else "")
        self.progress(3, 3)
        yield "]}"


def test_the_bar_is_cleared_before_the_documents_last_chunk_and_never_reads_a_question_mark(monkeypatch):
    """Deterministic twin of the tmux test: the order of the bar's clear and stdout's writes."""
    import io

    from rich.console import Console

    from attn_cli.cli import common

    events: list[str] = []
    screen = io.StringIO()
    monkeypatch.setattr(common, "stderr_console", lambda: Console(file=screen, force_terminal=True, width=80))
    clear = common.Bar.clear
    monkeypatch.setattr(common.Bar, "clear", lambda bar: (events.append("clear"), clear(bar)))

    class Stdout(io.StringIO):
        def write(self, text):
            events.append(text)
            return len(text)

    monkeypatch.setattr(sys, "stdout", Stdout())
    common.run_and_emit(
        lambda progress, lazy: LazyReport(progress),
        label="running minilm …",
        json_wanted=True,
        output=None,
        save=None,
        render=None,
        figure=None,
    )
    assert events[-2:] == ["clear", "]}\n"], events
    assert "/?" not in screen.getvalue()
