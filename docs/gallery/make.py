"""The gallery's pictures, made from real runs: `python docs/gallery/make.py [DIR]` (default: this folder).

Each picture is what a user gets from one command on a bundled model (MiniLM, the lab decoder): the
terminal, exported as SVG by Rich at 80 columns in colour, and the figures `--save FILE.svg` writes.
tests/test_docs_site.py runs this script into a temporary folder and fails when a picture differs from
the one committed here, so the gallery never goes stale: after a change that alters a picture, run the
script and commit what it wrote. (The PNG screenshots beside docs/gallery.md are taken in a browser by hand:
their pixels depend on the machine's fonts.)
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
LAB_TEXT = "the cat saw a dog . the cat saw a dog"
# (file, what it shows, the command's words): each is run as `attn WORDS`, and its terminal exported (a file
# named terminal-*.svg, titled `attn COMMAND --model M`) or its figure saved (--save FILE.svg)
PICTURES = [
    (
        "terminal-default.svg",
        "attn inspect's default view: every head of MiniLM, and the most focused one in detail",
        ["inspect", "Hello, how are you?"],
    ),
    (
        "terminal-inspect.svg",
        "a previous-token head of MiniLM: its weights and each row's most-attended keys",
        ["inspect", "Hello, how are you?", "--layer", "1", "--head", "9", "--show", "weights,top"],
    ),
    ("terminal-heads.svg", "what each head of the lab decoder does", ["heads", LAB_TEXT, "--model", "lab"]),
    (
        "terminal-kv.svg",
        "how much KV cache each head of the lab decoder needs",
        ["kv", LAB_TEXT, "--model", "lab", "--budget", "8", "--window", "2,4"],
    ),
    (
        "figure-compare.svg",
        "a MiniLM head beside shared-K (queries from the keys): the weights drift to the diagonal",
        ["compare", "Time flies like an arrow.", "--layer", "0", "--head", "0"],
    ),
    (
        "figure-routes.svg",
        "where the lab decoder's second 'dog' comes from: the first 'dog', found through the 'a' before it",
        ["routes", LAB_TEXT, "--model", "lab", "--target", "dog"],
    ),
    (
        "figure-ablate.svg",
        "what removing each head of the lab decoder does to the loss of a continuation",
        ["ablate", LAB_TEXT, "--model", "lab", "--target", "a dog"],
    ),
    ("figure-heads.svg", "every head's scores on the lab decoder", ["heads", LAB_TEXT, "--model", "lab"]),
]


def make(folder: Path) -> list[Path]:
    """Every picture of PICTURES, written into folder; returns their paths."""
    from rich.console import Console
    from typer.testing import CliRunner

    from attn_cli.cli import app

    runner = CliRunner()
    written = []
    for name, _what, words in PICTURES:
        path = folder / name
        if name.startswith("terminal-"):
            result = runner.invoke(
                app, words, env={"COLUMNS": "80", "FORCE_COLOR": "1", "TERM": "xterm-256color", "NO_COLOR": None}
            )
            assert result.exit_code == 0, (words, result.output)
            console = Console(record=True, width=80, force_terminal=True, color_system="truecolor", file=io.StringIO())
            console.print(_ansi(result.stdout), end="")
            path.write_text(console.export_svg(title=_title(words)), "utf-8")
        else:
            result = runner.invoke(app, [*words, "--save", str(path)], env={"COLUMNS": "80", "NO_COLOR": "1"})
            assert result.exit_code == 0, (words, result.output)
        written.append(path)
    return written


def _ansi(text: str):
    from rich.text import Text

    return Text.from_ansi(text)


def _title(words: list[str]) -> str:
    """The window's title: the command and its model (the whole command line would run under the buttons)."""
    model = words[words.index("--model") + 1] if "--model" in words else "minilm"
    return f"attn {words[0]} --model {model}"


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE
    for made in make(target):
        print(made)
