"""`attn explore [TEXT]`: a full-screen terminal app that loads the model once and looks around it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from attn_cli.cli import options as opt
from attn_cli.cli.edge import user_errors
from attn_cli.cli.loading import Loading, loads_model

EPILOG = (
    "Keys: ← → / h l heads, ↑ ↓ / k j layers, [ ] query token, e edit the sentence, v variant, "
    "s scores/weights, g grid metric, x export, ? help, q quit.\n\n"
    "Examples:\n\n"
    "  attn explore \"The cat sat on the mat.\"\n\n"
    "  attn explore \"I love you\" --model toy -O heads=2 -O causal=true"
)


@loads_model
def explore_command(
    text: Annotated[Optional[str], typer.Argument(metavar="TEXT", show_default=False,
        help="The sentence to start with (default: an example sentence).")] = None,
    loading: Loading = Loading(),
    truncate: opt.Truncate = False,
    threads: Annotated[Optional[int], typer.Option("--threads", min=1,
        help="CPU threads torch may use (default: torch's choice less one core, which the screen needs; "
             "1 on 2 cores).")] = None,
    export_dir: Annotated[Optional[Path], typer.Option("--export-dir",
        help="Where x writes its .svg, .html and .json files (default: the current directory).")] = None,
) -> None:
    """Look around a model in a full-screen terminal app: every head, any sentence, without reloading."""
    with user_errors():
        from attn_cli.plumbing.errors import BadInput

        if text is not None and not text.strip():
            raise BadInput("the text is empty", "pass a sentence, or leave it out for the example")
        if export_dir is not None and not export_dir.is_dir():
            raise BadInput(f"--export-dir {export_dir}: not a directory")
        loading.options()  # a malformed -O fails here, before the screen opens

        from attn_cli.explore.app import DEFAULT_TEXT, ExploreApp

        def load():
            return loading.load()

        app = ExploreApp(load, text or DEFAULT_TEXT, model_name=loading.name,
                         truncate=truncate, export_dir=export_dir, threads=threads)
        app.run()
        if app.error is not None:
            raise app.error
        raise typer.Exit(app.return_code or 0)
