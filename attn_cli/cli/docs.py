"""`attn docs [COMMAND]`: a command's documentation page, in the terminal.

The pages are the Markdown the documentation site is built from (docs/commands/NAME.md, shipped inside the
wheel), drawn by Rich: attn has no hosted site to link to, and this works offline, over SSH and wherever the
package is installed, with no browser and no build step. `--path` prints the file instead, for an editor or
`mkdocs serve`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from attn_cli.cli.edge import user_errors
from attn_cli.plumbing.errors import BadInput, did_you_mean

EPILOG = "Examples:\n\n  attn docs\n\n  attn docs heads\n\n  attn docs kv --path"


def command_pages() -> dict[str, Path]:
    """Every command page by its command's name: docs/commands/NAME.md."""
    from attn_cli.plumbing.config import docs_dir

    return {path.stem: path for path in sorted((docs_dir() / "commands").glob("*.md"))}


def docs_command(
    command: Annotated[str | None, typer.Argument(help="The command whose page to show. Default: the list.")] = None,
    path: Annotated[bool, typer.Option("--path", help="Print the page's file path instead of the page.")] = False,
) -> None:
    """Show a command's documentation page in the terminal: what it shows, how to read it, options, JSON."""
    from rich.console import Console
    from rich.markdown import Markdown
    from rich.table import Table

    with user_errors():
        pages = command_pages()
        if command is None:
            from rich.text import Text

            table = Table(box=None, title="attn docs COMMAND shows its page:", title_justify="left")
            table.add_column("command", no_wrap=True)
            table.add_column("what its page is about")  # the column that gives way to the terminal's width
            for name, page in pages.items():
                # one line a page, cut where the terminal ends, with an ellipsis (attn docs NAME has the rest)
                table.add_row(name, Text(_summary(page), no_wrap=True, overflow="ellipsis"))
            Console().print(table)
            return
        if command not in pages:
            raise BadInput(f"no page for {command!r}", did_you_mean(command, pages) or f"pages: {', '.join(pages)}")
        if path:
            typer.echo(str(pages[command]))
            return
        drawn = Markdown(_without_comments(pages[command].read_text(encoding="utf-8")))
        console = Console()
        if not console.is_terminal:  # a pipe or a file: the page as it is
            console.print(drawn)
            return
        import os

        os.environ.setdefault("LESS", "-FRX")  # less keeps the colours, and a page that fits is just printed
        with console.pager(styles=True):  # a page is longer than a screen: read it in the pager ($PAGER, less)
            console.print(drawn)


def _summary(page: Path) -> str:
    """A page's first sentence of prose (its first paragraph that is not a heading, code or a table), as plain
    text: a link's words without its address, no Markdown marks."""
    import re

    paragraphs = page.read_text(encoding="utf-8").split("\n\n")
    prose = next((text for text in paragraphs if text.strip() and text.lstrip()[0] not in "#`<|!-"), "")
    text = re.sub(r"\[([^\]]+)\]\([^)]*\)", r"\1", " ".join(prose.split())).replace("`", "").replace("**", "")
    return re.split(r"(?<!\bal)(?<!\be\.g)(?<!\bi\.e)\. ", text)[0].rstrip(".")  # "Gu et al. 2024" ends none


def _without_comments(text: str) -> str:
    """The page without its HTML comments (the test suite's marks above code blocks)."""
    import re

    return re.sub(r"<!--.*?-->\n?", "", text, flags=re.DOTALL)
